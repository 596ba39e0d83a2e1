"""SWE-agent trajectories (`.traj`: `environment`, `trajectory`, `history`, `info`, ...).

`history` is what the model saw, demonstrations (`is_demo`) included. Two variants:

- function calling: assistant entries carry native `tool_calls`; `tool` entries answer them
  through `tool_call_ids` (one tool message per id).
- text actions: assistant entries carry an `action` string (the command line typed into
  SWE-agent's shell, special commands such as `open` or `edit` included). Such an entry gets
  a synthetic `ToolCall(id="call_<n>", name="bash", arguments={"command": action})`: every
  action runs through the same shell interface, so one tool name is the honest choice. The
  following `user` entry (the observation) becomes its tool result. Entries without an action
  stay plain messages.

Content may be a string or a list of `{type: text}` blocks. No per-call usage is recorded;
the model name comes from `replay_config` when present.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from cachepilot_bench.traces._common import (
    CallInfo,
    Item,
    TextActions,
    as_dict,
    assistant_item,
    build_session,
    openai_content,
    openai_tool_calls,
    read_trajectory,
    tool_item,
)
from cachepilot_bench.traces.session import Session

__all__ = ["FORMAT", "load"]

logger = logging.getLogger(__name__)

FORMAT = "swe-agent"


def _model(data: dict[str, Any]) -> str | None:
    config: Any = data.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    name = as_dict(as_dict(as_dict(config).get("agent")).get("model")).get("name")
    return name if isinstance(name, str) and name else None


def _items(history: list[dict[str, Any]], model: str | None) -> list[Item]:
    items: list[Item] = []
    info = CallInfo(model=model)
    names: dict[str, str] = {}
    actions = TextActions()
    for entry in history:
        role = entry.get("role")
        content = openai_content(entry.get("content"))
        if role == "assistant":
            native = openai_tool_calls(entry.get("tool_calls"))
            action = entry.get("action")
            text_action = not native and isinstance(action, str) and action.strip()
            calls = (*native, *actions.calls(action if text_action else None))
            items.append(assistant_item(content, calls, info, names))
        elif role == "tool":
            actions.open = None
            ids = entry.get("tool_call_ids")
            if not isinstance(ids, list):
                ids = [entry.get("tool_call_id")]
            for raw_id in ids:
                call_id = str(raw_id or "")
                items.append(tool_item(call_id, content, names.get(call_id)))
        else:
            item = actions.message_item(role, content)
            if item is not None:
                items.append(item)
    return items


def load(path: Path, rel: str) -> list[Session]:
    """Load one SWE-agent trajectory.

    Raises:
        TraceError: when the file has no `history` list.
    """
    data, history = read_trajectory(path, "history", "SWE-agent")
    model = _model(data)
    meta: dict[str, Any] = {}
    info = as_dict(data.get("info"))
    if info.get("exit_status"):
        meta["exit_status"] = info["exit_status"]
    if any(e.get("is_demo") for e in history):
        meta["has_demonstration"] = True
    session = build_session(
        session_id=rel,
        source=FORMAT,
        items=_items(history, model),
        path=path,
        model=model,
        meta=meta,
    )
    return [session] if session is not None else []

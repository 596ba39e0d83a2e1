"""mini-swe-agent trajectories (`<instance>.traj.json`: `info`, `messages`, `trajectory_format`).

- v1 (`mini-swe-agent-1`): actions are text. An assistant message with exactly one
  ```` ```bash ```` block (the agent's own regex) gets a synthetic call
  `ToolCall(id="call_<n>", name="bash", arguments={"command": ...})` and keeps its full text;
  the next `user` message (observation, timeout notice or the final submission output) becomes
  the tool result, verbatim. With zero or several blocks the agent rejected the action: no
  call, and the next user message (format-error feedback) stays a user message.
- v1.1 (`mini-swe-agent-1.1`): native `tool_calls` and `tool` messages. `reasoning_content`
  becomes a `ReasoningPart`. The closing `exit` message (the submission) was never sent to
  the model and is dropped; the last call's `tool_calls` stay pending.

Per call: usage from `extra.response.usage` (`Usage.from_openai_chat`; DeepSeek hit/miss
counts included), model from `extra.response.model`, timestamp from `extra.timestamp` (v1.1,
when the answer arrived) or `extra.response.created`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from cachepilot.messages import ContentPart, Message, ReasoningPart, TextPart
from cachepilot.usage import Usage
from cachepilot_bench.traces._common import (
    CallInfo,
    Item,
    TextActions,
    as_dict,
    assistant_item,
    build_session,
    iso_to_unix,
    openai_content,
    openai_message_item,
    read_trajectory,
)
from cachepilot_bench.traces.session import Session

__all__ = ["ACTION_RE", "FORMAT", "load"]

logger = logging.getLogger(__name__)

FORMAT = "mini-swe-agent"
ACTION_RE = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
"""mini-swe-agent v1's action regex."""


def _call_info(message: dict[str, Any]) -> CallInfo:
    extra = as_dict(message.get("extra"))
    response = as_dict(extra.get("response"))
    usage = response.get("usage")
    model = response.get("model")
    timestamp = iso_to_unix(extra.get("timestamp"))
    if timestamp is None:
        timestamp = iso_to_unix(response.get("created"))
    return CallInfo(
        timestamp=timestamp,
        usage=Usage.from_openai_chat(usage) if isinstance(usage, dict) else None,
        model=model if isinstance(model, str) else None,
    )


def _items_v1(raw: list[dict[str, Any]]) -> list[Item]:
    items: list[Item] = []
    actions = TextActions()
    for message in raw:
        role = message.get("role")
        content = openai_content(message.get("content"))
        if role == "assistant":
            found = ACTION_RE.findall(Message(role="assistant", content=content).text)
            calls = actions.calls(found[0] if len(found) == 1 else None)
            items.append(assistant_item(content, calls, _call_info(message)))
        else:
            item = actions.message_item(role, content)
            if item is not None:
                items.append(item)
    return items


def _items_v1_1(raw: list[dict[str, Any]], meta: dict[str, Any]) -> list[Item]:
    items: list[Item] = []
    names: dict[str, str] = {}
    for message in raw:
        role = message.get("role")
        if role == "exit":
            status = as_dict(message.get("extra")).get("exit_status")
            if status:
                meta.setdefault("exit_status", status)
            continue
        content = openai_content(message.get("content"))
        info = None
        if role == "assistant":
            reasoning = message.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                rest: tuple[ContentPart, ...] = (
                    content
                    if isinstance(content, tuple)
                    else ((TextPart(content),) if content else ())
                )
                content = (ReasoningPart(reasoning), *rest)
            info = _call_info(message)
        item = openai_message_item(message, content, names, info)
        if item is not None:
            items.append(item)
    return items


def load(path: Path, rel: str) -> list[Session]:
    """Load one mini-swe-agent trajectory.

    Raises:
        TraceError: when the file has no `messages` list.
    """
    data, raw = read_trajectory(path, "messages", "mini-swe-agent")
    info = as_dict(data.get("info"))
    declared = str(data.get("trajectory_format") or "")
    native = any(m.get("tool_calls") or m.get("role") == "tool" for m in raw)
    source = declared if declared.startswith("mini-swe-agent") else "mini-swe-agent-1"
    if native and source == "mini-swe-agent-1":
        source = "mini-swe-agent-1.1"
    meta: dict[str, Any] = {}
    for key in ("instance_id",):
        if data.get(key):
            meta[key] = data[key]
    for key in ("exit_status", "mini_version"):
        if info.get(key):
            meta[key] = info[key]
    items = _items_v1_1(raw, meta) if native else _items_v1(raw)
    config_model = as_dict(as_dict(info.get("config")).get("model")).get("model_name")
    session = build_session(
        session_id=rel,
        source=source,
        items=items,
        path=path,
        model=config_model if isinstance(config_model, str) else None,
        meta=meta,
    )
    return [session] if session is not None else []

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

import json
import logging
import re
from pathlib import Path
from typing import Any

from cachepilot.messages import ContentPart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.traces._common import (
    CallInfo,
    Item,
    TraceError,
    as_dict,
    build_session,
    iso_to_unix,
    openai_content,
    openai_tool_calls,
    read_json,
)
from cachepilot.traces.session import Session
from cachepilot.usage import Usage

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
    open_call: ToolCall | None = None
    n_calls = 0
    for message in raw:
        role = message.get("role")
        content = openai_content(message.get("content"))
        if role == "assistant":
            text = Message(role="assistant", content=content).text
            actions = ACTION_RE.findall(text)
            calls: tuple[ToolCall, ...] = ()
            open_call = None
            if len(actions) == 1:
                n_calls += 1
                open_call = ToolCall(
                    id=f"call_{n_calls}",
                    name="bash",
                    arguments=json.dumps({"command": actions[0].strip()}, ensure_ascii=False),
                )
                calls = (open_call,)
            items.append(
                (Message(role="assistant", content=content, tool_calls=calls), _call_info(message))
            )
        elif role == "user" and open_call is not None:
            items.append(
                (
                    Message(role="tool", content=content, tool_call_id=open_call.id, name="bash"),
                    None,
                )
            )
            open_call = None
        elif role in ("system", "user"):
            open_call = None
            items.append((Message(role=role, content=content), None))
    return items


def _items_v1_1(raw: list[dict[str, Any]], meta: dict[str, Any]) -> list[Item]:
    items: list[Item] = []
    names: dict[str, str] = {}
    for message in raw:
        role = message.get("role")
        content = openai_content(message.get("content"))
        if role == "assistant":
            reasoning = message.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                rest: tuple[ContentPart, ...] = (
                    content
                    if isinstance(content, tuple)
                    else ((TextPart(content),) if content else ())
                )
                content = (ReasoningPart(reasoning), *rest)
            calls = openai_tool_calls(message.get("tool_calls"))
            names.update((c.id, c.name) for c in calls)
            items.append(
                (
                    Message(role="assistant", content=content, tool_calls=tuple(calls)),
                    _call_info(message),
                )
            )
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            name = message.get("name") or names.get(call_id)
            items.append(
                (Message(role="tool", content=content, tool_call_id=call_id, name=name), None)
            )
        elif role in ("system", "user"):
            items.append((Message(role=role, content=content), None))
        elif role == "exit":
            status = as_dict(message.get("extra")).get("exit_status")
            if status:
                meta.setdefault("exit_status", status)
    return items


def load(path: Path, rel: str) -> list[Session]:
    """Load one mini-swe-agent trajectory.

    Raises:
        TraceError: when the file has no `messages` list.
    """
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise TraceError("not a mini-swe-agent trajectory (no 'messages' list)")
    raw = [m for m in data["messages"] if isinstance(m, dict)]
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

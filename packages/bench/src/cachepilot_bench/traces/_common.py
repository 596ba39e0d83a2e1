"""Helpers shared by the trace loaders: reading, content conversion, pairing repair."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cachepilot.audit.sources import iso_to_unix
from cachepilot.messages import (
    ContentPart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCall,
    pairing_issues,
)
from cachepilot.usage import Usage
from cachepilot_bench.traces.session import RecordedCall, Session

__all__ = [
    "NO_RESULT",
    "CallInfo",
    "Item",
    "TextActions",
    "TraceError",
    "as_dict",
    "as_list",
    "assistant_item",
    "build_session",
    "iso_to_unix",
    "join_content",
    "openai_content",
    "openai_message_item",
    "openai_tool_calls",
    "read_json",
    "read_jsonl",
    "read_trajectory",
    "repair_pairing",
    "tool_item",
    "unique_ids",
]

logger = logging.getLogger(__name__)

NO_RESULT = "[no result recorded]"
"""Content of the synthetic tool result added for a call the trace never answered."""


class TraceError(ValueError):
    """A file does not have the shape its format requires."""


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What a trace recorded about one model call, before its message index is known."""

    timestamp: float | None = None
    usage: Usage | None = None
    model: str | None = None

    @property
    def empty(self) -> bool:
        """True when nothing was recorded."""
        return self.timestamp is None and self.usage is None and self.model is None


Item = tuple[Message, CallInfo | None]
"""A transcript message plus, for an assistant message, what the trace recorded about it."""


# --- reading -----------------------------------------------------------------------------


def read_json(path: Path) -> Any:
    """Parse a whole file as JSON.

    Raises:
        TraceError: when the file is not valid UTF-8 JSON.
    """
    try:
        with path.open("rb") as fh:
            return json.loads(fh.read().decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"invalid JSON: {exc}") from exc


def read_trajectory(path: Path, key: str, kind: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A JSON object file and the objects of its `key` list (other entries skipped).

    Raises:
        TraceError: when the file is not a JSON object with a `key` list.
    """
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise TraceError(f"not a {kind} trajectory (no {key!r} list)")
    return data, [entry for entry in data[key] if isinstance(entry, dict)]


def read_jsonl(path: Path) -> list[Any]:
    """Parse a JSON-lines file; undecodable lines are skipped (a live session may end mid-line).

    Raises:
        TraceError: when no line decodes.
    """
    rows: list[Any] = []
    bad = 0
    with path.open("rb") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line.decode("utf-8-sig")))
            except (UnicodeDecodeError, ValueError):
                bad += 1
    if not rows:
        raise TraceError("no valid JSON line" if bad else "empty file")
    if bad:
        logger.debug("%s: skipped %d undecodable line(s)", path, bad)
    return rows


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is a dict, else an empty dict."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` when it is a list, else an empty list."""
    return value if isinstance(value, list) else []


# --- content -----------------------------------------------------------------------------


def join_content(parts: Sequence[ContentPart]) -> str | tuple[ContentPart, ...]:
    """Parts as message content: one text part becomes a plain string."""
    if not parts:
        return ""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


def _image_from_url(url: str, detail: Any = None) -> ImagePart:
    media_type = None
    if url.startswith("data:") and ";" in url:
        media_type = url[5 : url.index(";")] or None
    return ImagePart(
        url=url, media_type=media_type, detail=detail if isinstance(detail, str) else None
    )


def openai_content(raw: Any) -> str | tuple[ContentPart, ...]:
    """OpenAI-chat style content (string, None or a list of typed blocks) as message content."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        return json.dumps(raw, ensure_ascii=False)
    parts: list[ContentPart] = []
    for entry in raw:
        if isinstance(entry, str):
            parts.append(TextPart(entry))
            continue
        block = as_dict(entry)
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text"):
            parts.append(TextPart(str(block.get("text", ""))))
        elif kind == "image_url":
            image = block.get("image_url")
            if isinstance(image, dict):
                parts.append(_image_from_url(str(image.get("url", "")), image.get("detail")))
            else:
                parts.append(_image_from_url(str(image or "")))
        elif kind in ("reasoning", "thinking"):
            parts.append(ReasoningPart(str(block.get("text") or block.get("thinking") or "")))
        else:
            parts.append(TextPart(json.dumps(block, ensure_ascii=False)))
    return join_content(parts)


def openai_tool_calls(raw: Any, *, prefix: str = "call") -> list[ToolCall]:
    """`tool_calls` of an OpenAI-chat assistant message (arguments kept verbatim)."""
    calls: list[ToolCall] = []
    for n, raw_call in enumerate(as_list(raw)):
        entry = as_dict(raw_call)
        function = as_dict(entry.get("function"))
        name = function.get("name") or entry.get("name") or ""
        arguments = function.get("arguments", entry.get("arguments", "{}"))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = entry.get("id") or f"{prefix}_{n}"
        calls.append(ToolCall(id=str(call_id), name=str(name), arguments=arguments))
    return calls


# --- transcript items ---------------------------------------------------------------------

Content = str | tuple[ContentPart, ...]


def assistant_item(
    content: Content,
    calls: Sequence[ToolCall],
    info: CallInfo | None,
    names: dict[str, str] | None = None,
) -> Item:
    """An assistant message making `calls`; their names are recorded in `names` (id -> name)."""
    if names is not None:
        names.update((c.id, c.name) for c in calls)
    return (Message(role="assistant", content=content, tool_calls=tuple(calls)), info)


def tool_item(call_id: str, content: Content, name: str | None) -> Item:
    """A tool result answering `call_id`."""
    return (Message(role="tool", content=content, tool_call_id=call_id, name=name), None)


def openai_message_item(
    message: Mapping[str, Any],
    content: Content,
    names: dict[str, str],
    info: CallInfo | None = None,
) -> Item | None:
    """One OpenAI-chat message (with its converted `content`) as an item.

    An assistant message keeps its native `tool_calls` (and gets `info`); a `tool` message
    answers `tool_call_id`, named by its `name` or else by the call it answers (from `names`,
    filled by the assistant messages); `system` and `user` messages stay as they are. Other
    roles give None.
    """
    role = message.get("role")
    if role == "assistant":
        return assistant_item(content, openai_tool_calls(message.get("tool_calls")), info, names)
    if role == "tool":
        call_id = str(message.get("tool_call_id") or "")
        return tool_item(call_id, content, message.get("name") or names.get(call_id))
    if role in ("system", "user"):
        return (Message(role=role, content=content), None)
    return None


class TextActions:
    """Synthetic `bash` calls for text actions, each answered by the next user message.

    The n-th action becomes `ToolCall(id="call_<n>", name="bash", arguments={"command": ...})`
    (the command stripped). The call stays open until the next `system` or `user` message: a
    user message then becomes its tool result, verbatim.
    """

    def __init__(self) -> None:
        self.count = 0
        self.open: ToolCall | None = None

    def calls(self, command: str | None) -> tuple[ToolCall, ...]:
        """The calls of an assistant message with `command` as its action (None: no action).

        Any call still open is closed unanswered.
        """
        self.open = None
        if command is None:
            return ()
        self.count += 1
        self.open = ToolCall(
            id=f"call_{self.count}",
            name="bash",
            arguments=json.dumps({"command": command.strip()}, ensure_ascii=False),
        )
        return (self.open,)

    def message_item(self, role: Any, content: Content) -> Item | None:
        """A `system` or `user` message: the open call's result for a user message answering
        one, else the message as it is (closing any open call). Other roles give None."""
        if role == "user" and self.open is not None:
            item = tool_item(self.open.id, content, "bash")
        elif role in ("system", "user"):
            item = (Message(role=role, content=content), None)
        else:
            return None
        self.open = None
        return item


# --- pairing repair and session assembly -------------------------------------------------


def _orphan_message(message: Message) -> Message:
    label = (
        f"[tool result without a matching call: {message.name or 'tool'} {message.tool_call_id}]"
    )
    if isinstance(message.content, str):
        content: str | tuple[ContentPart, ...] = f"{label}\n{message.content}"
    else:
        content = (TextPart(label), *message.content)
    return Message(role="user", content=content, id=message.id)


def repair_pairing(items: Iterable[Item]) -> tuple[list[Item], int]:
    """Make a transcript satisfy tool-call pairing; returns the items and the repair count.

    Deterministic repairs, each counted once: a reused call id is renamed (`<id>~<n>`) along
    with its result; a call left unanswered before the next non-tool message gets a synthetic
    result `NO_RESULT`; a tool message that answers no open call becomes a user message placed
    right after the open answer block. Calls of the last assistant turn may stay pending.
    """
    out: list[Item] = []
    repairs = 0
    seen_calls: set[str] = set()
    pending: dict[str, list[ToolCall]] = {}  # original id -> open calls (renamed ids)
    deferred: list[Message] = []  # orphan results waiting for the open block to close

    def close_block(final: bool) -> None:
        nonlocal repairs
        if pending and not (final and not deferred):
            for calls in pending.values():
                for call in calls:
                    out.append(
                        (
                            Message(
                                role="tool", content=NO_RESULT, tool_call_id=call.id, name=call.name
                            ),
                            None,
                        )
                    )
                    repairs += 1
        pending.clear()
        for orphan in deferred:
            out.append((orphan, None))
        deferred.clear()

    for original, info in items:
        message = original
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            open_calls = pending.get(call_id)
            if open_calls:
                call = open_calls.pop(0)
                if not open_calls:
                    del pending[call_id]
                if call.id != call_id:
                    message = replace(message, tool_call_id=call.id)
                if message.name is None:
                    message = replace(message, name=call.name)
                out.append((message, info))
            else:
                repairs += 1
                if pending:
                    deferred.append(_orphan_message(message))
                else:
                    out.append((_orphan_message(message), None))
            continue
        close_block(final=False)
        if message.role == "assistant" and message.tool_calls:
            renamed: list[ToolCall] = []
            for call in message.tool_calls:
                new = call
                if call.id in seen_calls:
                    n = 2
                    while f"{call.id}~{n}" in seen_calls:
                        n += 1
                    new = replace(call, id=f"{call.id}~{n}")
                    repairs += 1
                seen_calls.add(new.id)
                pending.setdefault(call.id, []).append(new)
                renamed.append(new)
            if renamed != list(message.tool_calls):
                message = replace(message, tool_calls=tuple(renamed))
        out.append((message, info))
    close_block(final=True)
    return out, repairs


def build_session(
    *,
    session_id: str,
    source: str,
    items: Sequence[Item],
    path: Path | str | None = None,
    tools: Sequence[dict[str, Any]] = (),
    model: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Session | None:
    """Repair pairing, index the recorded calls and assemble a `Session`.

    Returns None when the transcript has no assistant message (no model call to replay).

    Raises:
        TraceError: if pairing still fails after repair (a loader bug, reported per file).
    """
    repaired, repairs = repair_pairing(items)
    messages = [m for m, _ in repaired]
    if not any(m.role == "assistant" for m in messages):
        return None
    issues = pairing_issues(messages, allow_pending_tail=True)
    if issues:
        raise TraceError(f"{session_id}: pairing still broken after repair: {issues[0]}")
    calls: list[RecordedCall] = []
    for index, (message, info) in enumerate(repaired):
        if message.role == "assistant" and info is not None and not info.empty:
            calls.append(
                RecordedCall(
                    index=index, timestamp=info.timestamp, usage=info.usage, model=info.model
                )
            )
    if model is None:
        model = next((c.model for c in calls if c.model), None)
    out_meta = dict(meta or {})
    out_meta["repairs"] = repairs
    return Session(
        id=session_id,
        source=source,
        messages=messages,
        tools=list(tools),
        calls=calls,
        model=model,
        path=str(path) if path is not None else None,
        meta=out_meta,
    )


def unique_ids(base: str, suffixes: Sequence[str]) -> list[str]:
    """`base#suffix` ids, made unique by appending `-<n>` to repeats."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for suffix in suffixes:
        candidate = f"{base}#{suffix}"
        count = seen.get(candidate, 0)
        seen[candidate] = count + 1
        out.append(candidate if count == 0 else f"{candidate}-{count + 1}")
    return out

"""The tool calls a thread's replies made, for results that arrive without their call.

A Responses request that continues a server-held conversation (`previous_response_id`) sends
each `function_call_output` without the `function_call` it answers: the call is in a reply
the proxy relayed earlier. `SeenCalls` keeps, per thread, each call's name and arguments as
seen in those replies (and in the thread's own requests), so such a result is reduced with
its tool's profile and the loop memory compares its real arguments. It is bounded (entries
and characters) and kept with the thread's stored state, so every replica names a result the
same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from cachepilot.messages import Message, ToolCall
from cachepilot.recall.tool import RECALL_TOOL_NAME

__all__ = ["SeenCalls", "compact_arguments", "streamed_call"]

logger = logging.getLogger(__name__)

MAX_CALLS = 256
"""Calls remembered per thread (the oldest go first)."""
MAX_CHARS = 64_000
"""Characters of names and arguments remembered per thread (the oldest calls go first)."""
ARGUMENT_CHARS = 2_000
"""Arguments longer than this are kept compacted (see `compact_arguments`)."""
_VALUE_CHARS = 200
"""A top-level argument value longer than this (as JSON) is kept as its digest."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def compact_arguments(arguments: str) -> str:
    """`arguments` as remembered: unchanged up to `ARGUMENT_CHARS`; longer, a JSON object
    keeps its short values (a path, a command) and shows each long one as its size and
    digest, so calls that differ anywhere still differ; anything else becomes one digest."""
    if len(arguments) <= ARGUMENT_CHARS:
        return arguments
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        kept: dict[str, Any] = {}
        for key, value in parsed.items():
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            if len(text) > _VALUE_CHARS:
                kept[key] = f"[{len(text)} chars, sha256 {_digest(text)}]"
            else:
                kept[key] = value
        out = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
        if len(out) <= ARGUMENT_CHARS:
            return out
    whole = {"arguments": f"[{len(arguments)} chars, sha256 {_digest(arguments)}]"}
    return json.dumps(whole, separators=(",", ":"))


class SeenCalls:
    """One thread's seen tool calls by id (see the module docstring)."""

    def __init__(self) -> None:
        self._calls: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._calls)

    def note(self, calls: Iterable[ToolCall]) -> None:
        """Remember `calls` (the recall tool's are answered by the proxy: not kept)."""
        for call in calls:
            if call.name == RECALL_TOOL_NAME or not call.id:
                continue
            entry = (call.name, compact_arguments(call.arguments))
            old = self._calls.pop(call.id, None)
            if old is not None:
                self._chars -= _size(call.id, old)
            self._calls[call.id] = entry
            self._chars += _size(call.id, entry)
        while self._calls and (len(self._calls) > MAX_CALLS or self._chars > MAX_CHARS):
            key, dropped = self._calls.popitem(last=False)
            self._chars -= _size(key, dropped)

    def answered(self, messages: Sequence[Message]) -> dict[str, ToolCall]:
        """The remembered calls answered by tool results in `messages` whose call is not
        among `messages`, by id."""
        present = {c.id for m in messages if m.role == "assistant" for c in m.tool_calls}
        out: dict[str, ToolCall] = {}
        for message in messages:
            call_id = str(message.tool_call_id) if message.role == "tool" else None
            if call_id is None or call_id in present:
                continue
            found = self._calls.get(call_id)
            if found is not None:
                out[call_id] = ToolCall(call_id, found[0], found[1])
        return out

    def to_json(self) -> list[list[str]]:
        """JSON-ready form (kept with the thread's state), oldest first."""
        return [[key, name, arguments] for key, (name, arguments) in self._calls.items()]

    @classmethod
    def from_json(cls, data: Any) -> SeenCalls:
        """Read `to_json` output back (entries that do not parse are dropped)."""
        out = cls()
        calls: list[ToolCall] = []
        for entry in data if isinstance(data, list) else ():
            if (
                isinstance(entry, list)
                and len(entry) == 3
                and all(isinstance(field, str) for field in entry)
            ):
                calls.append(ToolCall(entry[0], entry[1], entry[2]))
            else:
                logger.info("dropping an unreadable seen call from a stored thread state")
        out.note(calls)
        return out


def _size(call_id: str, entry: tuple[str, str]) -> int:
    return len(call_id) + len(entry[0]) + len(entry[1])


def streamed_call(data: Any) -> ToolCall | None:
    """The whole tool call a Responses stream event completes (`response.output_item.done`
    of a `function_call` or `custom_tool_call`), else None."""
    if not isinstance(data, dict) or data.get("type") != "response.output_item.done":
        return None
    item = data.get("item")
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    field = {"function_call": "arguments", "custom_tool_call": "input"}.get(str(kind))
    call_id, name = item.get("call_id"), item.get("name")
    if field is None or not isinstance(call_id, str) or not isinstance(name, str):
        return None
    arguments = item.get(field)
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return ToolCall(call_id, name, arguments)

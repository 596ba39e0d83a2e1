"""The recall tool behind the proxy: offered in each API's shape, answered from the archive,
and hidden from the client.

A reply whose only tool calls are recalls is answered by the proxy, which asks the upstream
again; a reply that mixes recalls with the client's own calls goes to the client without the
recalls (answered at once, sent to the upstream with the next request). Either way the
upstream saw more than the client: a *splice* remembers it. When the client resends the
assistant message it was shown, the splice puts back exactly what the upstream saw (the
recall calls, their answers, the earlier replies), so the thread's prefix stays byte-stable.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cachepilot.messages import Message, ToolCall
from cachepilot.pilot import CachePilot
from cachepilot.recall import DEFAULT_MAX_CHARS, RECALL_TOOL_NAME, RECALL_TOOL_SCHEMA
from cachepilot.wire import Api, Source, anthropic_tool

__all__ = [
    "Splices",
    "answer",
    "message_key",
    "recall_calls",
    "recall_tool",
    "strip_recall",
    "without_recall",
]

logger = logging.getLogger(__name__)

_MAX_SPLICES = 512


def recall_tool(api: Api) -> dict[str, Any]:
    """The recall tool's definition in the API's own shape."""
    schema: dict[str, Any] = json.loads(json.dumps(RECALL_TOOL_SCHEMA))  # a private copy
    if api == "chat":
        return schema
    if api == "responses":
        return {"type": "function", **schema["function"], "strict": False}
    return anthropic_tool(schema)


def recall_calls(message: Message) -> list[ToolCall]:
    """The recall calls of a reply."""
    return [c for c in message.tool_calls if c.name == RECALL_TOOL_NAME]


def without_recall(message: Message) -> Message:
    """A reply without its recall calls."""
    kept = tuple(c for c in message.tool_calls if c.name != RECALL_TOOL_NAME)
    return message if len(kept) == len(message.tool_calls) else replace(message, tool_calls=kept)


def answer(pilot: CachePilot, thread: str, call: ToolCall) -> Message:
    """The tool message answering one recall call (never raises on model input)."""
    args = call.parsed_arguments()
    ref = args.get("ref")
    lines, grep, limit = args.get("lines"), args.get("grep"), args.get("max_chars")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        limit = DEFAULT_MAX_CHARS
    try:
        text = pilot.recall(
            str(ref) if ref is not None else "",
            lines=str(lines) if lines is not None else None,
            grep=str(grep) if grep is not None else None,
            max_chars=limit,
            thread=thread,
        )
    except Exception:
        logger.warning("recall failed", exc_info=True)  # thread names stay out of logs
        text = "[recall failed: the archive could not be read; continue without it]"
    return Message(role="tool", content=text, tool_call_id=call.id, name=RECALL_TOOL_NAME)


def strip_recall(api: Api, body: Mapping[str, Any]) -> dict[str, Any]:
    """A non-streamed response body without its recall calls (the client's calls kept)."""
    out = dict(body)
    if api == "chat":
        choices = []
        for choice in body.get("choices") or ():
            if not isinstance(choice, Mapping) or not isinstance(choice.get("message"), Mapping):
                choices.append(choice)
                continue
            message = dict(choice["message"])
            calls = [c for c in message.get("tool_calls") or () if not _is_recall_call(c)]
            message["tool_calls"] = calls or None
            if not calls:
                message.pop("tool_calls")
            fixed = {**choice, "message": message}
            if not calls and choice.get("finish_reason") == "tool_calls":
                fixed["finish_reason"] = "stop"
            choices.append(fixed)
        out["choices"] = choices
    elif api == "responses":
        out["output"] = [
            item
            for item in body.get("output") or ()
            if not (
                isinstance(item, Mapping)
                and item.get("type") == "function_call"
                and item.get("name") == RECALL_TOOL_NAME
            )
        ]
    else:
        content = [
            block
            for block in body.get("content") or ()
            if not (
                isinstance(block, Mapping)
                and block.get("type") == "tool_use"
                and block.get("name") == RECALL_TOOL_NAME
            )
        ]
        out["content"] = content
        if body.get("stop_reason") == "tool_use" and not any(
            isinstance(b, Mapping) and b.get("type") == "tool_use" for b in content
        ):
            out["stop_reason"] = "end_turn"
    return out


def _is_recall_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, Mapping) else None
    return isinstance(function, Mapping) and function.get("name") == RECALL_TOOL_NAME


def message_key(message: Message) -> str:
    """How an assistant message the client was shown is recognised when it comes back.

    Its tool calls (ids, names and arguments as JSON values) and its text with all whitespace
    removed: clients re-serialize replies (join text blocks, reformat argument JSON), and
    these survive that.
    """
    h = hashlib.sha256()
    for call in message.tool_calls:
        try:
            arguments = json.dumps(json.loads(call.arguments), sort_keys=True)
        except (TypeError, ValueError):
            arguments = call.arguments
        h.update(f"{call.id}\x00{call.name}\x00{arguments}\x01".encode("utf-8", "surrogatepass"))
    h.update("".join(message.text.split()).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class _Splice:
    messages: tuple[Message, ...]


class Splices:
    """One thread's splices: shown assistant message → what the upstream saw in its place."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, _Splice] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, shown: Message, upstream: Sequence[Message]) -> None:
        """Remember that the upstream saw `upstream` where the client was shown `shown`."""
        self._items[message_key(shown)] = _Splice(tuple(upstream))
        self._items.move_to_end(message_key(shown))
        while len(self._items) > _MAX_SPLICES:
            self._items.popitem(last=False)

    def expand(
        self, messages: Sequence[Message], sources: Sequence[Source | None]
    ) -> tuple[list[Message], list[Source | None]]:
        """The client's transcript with every spliced message put back (no origin for those)."""
        if not self._items:
            return list(messages), list(sources)
        out: list[Message] = []
        where: list[Source | None] = []
        for message, source in zip(messages, sources, strict=True):
            found = self._items.get(message_key(message)) if message.role == "assistant" else None
            if found is None:
                out.append(message)
                where.append(source)
                continue
            out.extend(found.messages)
            where.extend([None] * len(found.messages))
        return out, where

    def to_json(self) -> list[dict[str, Any]]:
        """JSON-ready form (kept with the thread's state)."""
        return [
            {"key": key, "messages": [m.to_dict() for m in splice.messages]}
            for key, splice in self._items.items()
        ]

    @classmethod
    def from_json(cls, data: Any) -> Splices:
        """Read `to_json` output back (entries that do not parse are dropped)."""
        out = cls()
        for entry in data if isinstance(data, list) else ():
            try:
                key = str(entry["key"])
                messages = tuple(Message.from_dict(m) for m in entry["messages"])
            except (KeyError, TypeError, ValueError):
                logger.info("dropping an unreadable splice from a stored thread state")
                continue
            out._items[key] = _Splice(messages)
        return out

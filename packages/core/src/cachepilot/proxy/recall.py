"""The recall tool behind the proxy: offered in each API's shape, answered from the archive,
and hidden from the client.

A reply whose only tool calls are recalls is answered by the proxy, which asks the upstream
again; a reply that mixes recalls with the client's own calls goes to the client without the
recalls (answered at once, sent to the upstream with the next request). Either way the
upstream saw more than the client: a *splice* remembers it, as the raw request elements the
proxy sent (the upstream's own replies with their ids, encrypted reasoning and signatures,
and the answers). When the client resends the assistant message it was shown (keyed by what
its stream added up to), the splice puts back exactly those elements, so the thread's prefix
stays byte-stable. See docs/proxy.md.
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
from cachepilot.pilot.facade import CachePilot
from cachepilot.recall.tool import DEFAULT_MAX_CHARS, RECALL_TOOL_NAME, RECALL_TOOL_SCHEMA
from cachepilot.wire import (
    Api,
    BodyView,
    WireError,
    anthropic_tool,
    gemini_tool,
    resplice,
    wire_messages,
)
from cachepilot.wire.gemini import SYNTHETIC_ID_PREFIX

__all__ = [
    "Splices",
    "answer",
    "is_recall_part",
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
    if api == "gemini":
        return gemini_tool(schema)
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
    elif api == "gemini":
        out["candidates"] = [_gemini_without_recall(c) for c in body.get("candidates") or ()]
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


def is_recall_part(part: Any) -> bool:
    """Whether a Gemini part is a `functionCall` of the recall tool."""
    call = part.get("functionCall") if isinstance(part, Mapping) else None
    return isinstance(call, Mapping) and call.get("name") == RECALL_TOOL_NAME


def _gemini_without_recall(candidate: Any) -> Any:
    content = candidate.get("content") if isinstance(candidate, Mapping) else None
    if not isinstance(content, Mapping) or not isinstance(content.get("parts"), list):
        return candidate
    parts = content["parts"]
    kept = [p for p in parts if not is_recall_part(p)] or [{"text": ""}]
    return {**candidate, "content": {**content, "parts": kept}}


def _is_recall_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, Mapping) else None
    return isinstance(function, Mapping) and function.get("name") == RECALL_TOOL_NAME


def message_key(message: Message) -> str:
    """How an assistant message the client was shown is recognised when it comes back.

    Its tool calls (ids, names and arguments as JSON values) and its text with all whitespace
    removed: clients re-serialize replies (join text blocks, reformat argument JSON), and
    these survive that. A Gemini call without an id counts by its synthetic id without the
    ordinal (a reply read alone and the same reply read in its history number equal calls
    from different starts).
    """
    h = hashlib.sha256()
    for call in message.tool_calls:
        call_id = call.id
        if call_id.startswith(SYNTHETIC_ID_PREFIX):
            call_id = call_id.rsplit("-", 1)[0]
        try:
            arguments = json.dumps(json.loads(call.arguments), sort_keys=True)
        except (TypeError, ValueError):
            arguments = call.arguments
        h.update(f"{call_id}\x00{call.name}\x00{arguments}\x01".encode("utf-8", "surrogatepass"))
    h.update("".join(message.text.split()).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class _Splice:
    """What the upstream saw: raw request elements of `api` (a state stored by an earlier
    version holds neutral `messages` instead, written in the reading request's API)."""

    api: Api | None
    elements: tuple[dict[str, Any], ...] = ()
    messages: tuple[Message, ...] = ()

    def elements_for(self, api: Api) -> list[dict[str, Any]] | None:
        if self.api is None:
            return wire_messages(api, self.messages)
        return list(self.elements) if self.api == api else None


def _keep_client_marks(
    view: BodyView, index: int, elements: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Messages: the client's `cache_control` marks on a resent turn stay on their blocks
    (counted from the end) of the element that stands for that turn, the last assistant entry
    of the splice: a client's mark is never removed or moved."""
    raw = view.body.get("messages") if view.api == "anthropic" else None
    source = view.sources[index]
    client = raw[source.index] if isinstance(raw, list) and source.index < len(raw) else None
    content = client.get("content") if isinstance(client, Mapping) else None
    if not isinstance(content, list):
        return elements
    marks = [
        (k, b["cache_control"])
        for k, b in enumerate(reversed(content))
        if isinstance(b, Mapping) and b.get("cache_control")
    ]
    target = next(
        (i for i in range(len(elements) - 1, -1, -1) if elements[i].get("role") == "assistant"),
        None,
    )
    blocks = elements[target].get("content") if target is not None else None
    if not marks or target is None or not isinstance(blocks, list):
        return elements
    copied = [dict(b) if isinstance(b, Mapping) else b for b in blocks]
    for k, control in marks:
        if k < len(copied) and isinstance(copied[-1 - k], dict):
            copied[-1 - k]["cache_control"] = control
    out = list(elements)
    out[target] = {**elements[target], "content": copied}
    return out


class Splices:
    """One thread's splices: shown assistant message → what the upstream saw in its place.

    What the upstream saw is kept as the raw request elements the proxy sent it (Chat
    messages, Responses input items with their ids and encrypted reasoning, Messages entries
    with thinking signatures), so the client's resent turn is replaced by exactly those
    bytes on every later request.
    """

    def __init__(self) -> None:
        self._items: OrderedDict[str, _Splice] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, shown: Message, api: Api, upstream: Sequence[Mapping[str, Any]]) -> None:
        """Remember that the upstream saw the elements `upstream` where the client was shown
        `shown` (the message the client will send back)."""
        if not shown.tool_calls and not shown.text.strip():
            # Nothing would tell this turn from any other empty one: no splice.
            logger.info("a recall exchange behind an empty reply is not kept")
            return
        key = message_key(shown)
        self._items[key] = _Splice(api, tuple(dict(e) for e in upstream))
        self._items.move_to_end(key)
        while len(self._items) > _MAX_SPLICES:
            self._items.popitem(last=False)

    def expand(self, view: BodyView) -> BodyView:
        """`view` with every resent turn the thread has a splice for replaced by what the
        upstream saw (the same view when there is none)."""
        if not self._items:
            return view
        replace: dict[int, list[dict[str, Any]]] = {}
        for index, message in enumerate(view.messages):
            if message.role != "assistant":
                continue
            found = self._items.get(message_key(message))
            elements = found.elements_for(view.api) if found is not None else None
            if elements:
                replace[index] = _keep_client_marks(view, index, elements)
        if not replace:
            return view
        try:
            return resplice(view, replace)
        except WireError:
            logger.warning("a stored recall exchange does not fit the request; sending it as is")
            return view

    def to_json(self) -> list[dict[str, Any]]:
        """JSON-ready form (kept with the thread's state)."""
        out: list[dict[str, Any]] = []
        for key, splice in self._items.items():
            if splice.api is None:
                out.append({"key": key, "messages": [m.to_dict() for m in splice.messages]})
            else:
                out.append({"key": key, "api": splice.api, "elements": list(splice.elements)})
        return out

    @classmethod
    def from_json(cls, data: Any) -> Splices:
        """Read `to_json` output back (entries that do not parse are dropped)."""
        out = cls()
        for entry in data if isinstance(data, list) else ():
            try:
                key = str(entry["key"])
                if "elements" in entry:
                    api = entry["api"]
                    if api not in ("chat", "responses", "anthropic", "gemini"):
                        raise ValueError(api)
                    elements = tuple(dict(e) for e in entry["elements"])
                    out._items[key] = _Splice(api, elements)
                else:
                    messages = tuple(Message.from_dict(m) for m in entry["messages"])
                    out._items[key] = _Splice(None, messages=messages)
            except (KeyError, TypeError, ValueError):
                logger.info("dropping an unreadable splice from a stored thread state")
                continue
        return out

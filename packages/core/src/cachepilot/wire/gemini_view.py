"""Gemini request bodies read with provenance, and changed messages written back into them.

The Gemini half of `cachepilot.wire.view` / `cachepilot.wire.rewrite`: `read_gemini_view`
remembers, for each neutral message, the `contents` entry and the parts it came from;
`write_gemini` builds the new body from the client's own: an unchanged turn is copied as
received (thought signatures, call ids, unknown fields), a changed tool result keeps its
`functionResponse` part with only its `response` replaced, a user turn that gained a
leading block (the dynamic-context block) keeps its own parts after it, a turn whose only
change is some call arguments keeps every other part; only messages with no origin are
written from neutral form. A body naming a `cachedContent` never gains a
`systemInstruction` or `tools` (the API refuses them next to a cached content).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachepilot.messages import Message, TextPart
from cachepilot.wire._common import Reader
from cachepilot.wire.body_view import BodyView, Source
from cachepilot.wire.gemini import (
    content_parts,
    gemini_content,
    gemini_tools,
    read_gemini,
    response_value,
    system_texts,
    tools_body,
)

__all__ = ["join_turns", "read_gemini_view", "resplice_gemini", "write_gemini"]

logger = logging.getLogger(__name__)


def read_gemini_view(body: Mapping[str, Any]) -> BodyView:
    """Read a `generateContent` body strictly, remembering where each message came from.

    Raises:
        WireError: when the body is not a `generateContent` request.
    """
    reader = Reader(strict=True)
    system, messages, origins = read_gemini(body, strict=True)
    return BodyView(
        api="gemini",
        body=body,
        system=system,
        system_texts=system_texts(body, reader),
        head=0,
        messages=messages,
        sources=[Source(index, index + 1, parts) for index, parts in origins],
        tools=gemini_tools(body, reader),
    )


@dataclass(slots=True)
class _Turn:
    """One `contents` entry being written: its origin (raw index or None) and its parts."""

    origin: int | None
    role: str
    parts: list[Any]


def _write_system(
    body: dict[str, Any], view: BodyView, system: str | None, pieces: Sequence[str] | None
) -> None:
    if system == view.system:
        return
    key = "systemInstruction" if "systemInstruction" in body else "system_instruction"
    raw = body.get(key)
    if system is None:
        body.pop(key, None)
        return
    if raw is None:
        if body.get("cachedContent") is not None:
            # The cached content holds the instruction; the API refuses another one.
            logger.info("a system instruction next to a cachedContent is not added")
            return
        body["systemInstruction"] = {"parts": [{"text": system}]}
        return
    if isinstance(raw, str):
        body[key] = system
        return
    parts = raw.get("parts") if isinstance(raw, Mapping) else None
    parts = parts if isinstance(parts, list) else []
    texts = [k for k, p in enumerate(parts) if isinstance(p, Mapping) and "text" in p]
    if pieces is not None and len(pieces) == len(texts) and texts:
        new = list(parts)
        for k, piece in zip(texts, pieces, strict=True):
            new[k] = {**parts[k], "text": piece}
        body[key] = {**raw, "parts": new}
    else:
        body[key] = {**raw, "parts": [{"text": system}]}


def _changed_user(message: Message, origin: Message, raw: list[Any]) -> list[Any]:
    """A changed user turn's parts: a leading addition before the parts as received, else
    the text parts replaced one for one, else the parts written from neutral form."""
    old, new = origin.parts, message.parts
    if len(new) >= len(old) and tuple(new[len(new) - len(old) :]) == tuple(old):
        return [*content_parts(new[: len(new) - len(old)]), *raw]
    if len(new) == len(raw) == len(old):
        out: list[Any] = []
        for part, was, now in zip(raw, old, new, strict=True):
            if now == was:
                out.append(part)
            elif isinstance(now, TextPart) and isinstance(was, TextPart) and "text" in part:
                out.append({**part, "text": now.text})
            else:
                return content_parts(new)
        return out
    return content_parts(new)


def _changed_model(message: Message, origin: Message, raw: list[Any]) -> list[Any]:
    """A changed model turn's parts: when only call arguments changed, the parts as received
    with those `args` replaced (signatures kept); else written from neutral form."""
    if message.parts != origin.parts or len(message.tool_calls) != len(origin.tool_calls):
        return list(gemini_content(message)["parts"])
    pairs = list(zip(message.tool_calls, origin.tool_calls, strict=True))
    if any(new.id != old.id or new.name != old.name for new, old in pairs):
        return list(gemini_content(message)["parts"])
    calls = iter(pairs)
    out: list[Any] = []
    for part in raw:
        call = part.get("functionCall") if isinstance(part, Mapping) else None
        if not isinstance(call, Mapping):
            out.append(part)
            continue
        new, old = next(calls)
        args = new.parsed_arguments() if new.arguments != old.arguments else None
        out.append(part if args is None else {**part, "functionCall": {**call, "args": args}})
    return out


def _parts_of(
    message: Message, origin: Message, source: Source, entry: Mapping[str, Any]
) -> list[Any]:
    raw_parts = entry.get("parts")
    raw_parts = raw_parts if isinstance(raw_parts, list) else []
    own = [raw_parts[k] for k in source.blocks if k < len(raw_parts)]
    if message is origin:
        return own
    if message.role == "tool" and len(own) == 1 and isinstance(own[0], Mapping):
        result = own[0].get("functionResponse")
        if isinstance(result, Mapping):
            response = response_value(result.get("response"), message.text)
            return [{**own[0], "functionResponse": {**result, "response": response}}]
    if message.role == "assistant":
        return _changed_model(message, origin, own)
    if message.role == "tool":
        return list(gemini_content(message)["parts"])
    return _changed_user(message, origin, own)


def write_gemini(
    body: dict[str, Any],
    view: BodyView,
    system: str | None,
    pairs: Sequence[tuple[Message, Message | None, Source | None]],
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    pieces: Sequence[str] | None = None,
) -> None:
    """Write system prompt, messages and tools into `body` (a copy of `view.body`).

    `pieces`: `system` cut like the client's text parts (`cachepilot.wire.split_like`), so
    each part keeps its own text; None writes it as one part.
    """
    _write_system(body, view, system, pieces)
    raw: list[Any] = list(view.body.get("contents") or [])
    turns: list[_Turn] = []
    for message, origin, source in pairs:
        if source is None or origin is None or source.index >= len(raw):
            made = gemini_content(message)
            turns.append(_Turn(None, made["role"], made["parts"]))
            continue
        entry = raw[source.index]
        parts = _parts_of(message, origin, source, entry)
        last = turns[-1] if turns else None
        if last is not None and last.origin == source.index:
            last.parts.extend(parts)
            continue
        role = "model" if message.role == "assistant" else str(entry.get("role") or "user")
        turns.append(_Turn(source.index, role, list(parts)))
    merged: list[_Turn] = []
    for turn in turns:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.role == turn.role == "user"
            and (last.origin is None or turn.origin is None)
        ):
            # A result the proxy added joins the client's own user turn next to it.
            last.parts.extend(turn.parts)
            if last.origin is None:
                last.origin = turn.origin
            continue
        merged.append(turn)
    contents: list[Any] = []
    for turn in merged:
        if turn.origin is not None:
            entry = raw[turn.origin]
            if entry.get("parts") == turn.parts:
                contents.append(entry)  # unchanged: as received, byte for byte
                continue
            contents.append({**entry, "role": turn.role, "parts": turn.parts})
        else:
            contents.append({"role": turn.role, "parts": turn.parts})
    body["contents"] = contents
    if tools is None or list(tools) == list(view.tools):
        return
    if body.get("cachedContent") is not None:
        logger.info("tools next to a cachedContent are not changed")
        return
    body["tools"] = tools_body(tools)


def _call_order(model: Mapping[str, Any] | None) -> list[tuple[str | None, str]]:
    """(id, name) of each call of a model turn, in order."""
    out: list[tuple[str | None, str]] = []
    parts = model.get("parts") if isinstance(model, Mapping) else None
    for part in parts if isinstance(parts, list) else ():
        call = part.get("functionCall") if isinstance(part, Mapping) else None
        if isinstance(call, Mapping):
            given = call.get("id")
            out.append((given if isinstance(given, str) else None, str(call.get("name") or "")))
    return out


def join_turns(
    model: Mapping[str, Any] | None, first: Mapping[str, Any], second: Mapping[str, Any]
) -> dict[str, Any]:
    """Two user turns after `model` as one: their `functionResponse` parts in the order of
    the model turn's calls (by id, else by name in order: Gemini pairs results with calls
    in order), then their other parts; `second`'s fields kept."""
    parts = [*(first.get("parts") or ()), *(second.get("parts") or ())]
    results = [p for p in parts if isinstance(p, Mapping) and "functionResponse" in p]
    others = [p for p in parts if not (isinstance(p, Mapping) and "functionResponse" in p)]
    # Each result is found once, by id or from its name's queue: linear in both turns.
    by_id: dict[str, int] = {}
    by_name: dict[str, deque[int]] = {}
    for k, part in enumerate(results):
        inner = part["functionResponse"]
        if isinstance(inner, Mapping):
            if isinstance(inner.get("id"), str):
                by_id.setdefault(inner["id"], k)
            by_name.setdefault(str(inner.get("name") or ""), deque()).append(k)
    taken: set[int] = set()
    ordered: list[Any] = []
    for call_id, name in _call_order(model):
        found = by_id.get(call_id) if call_id is not None else None
        if found is None or found in taken:
            queue = by_name.get(name)
            found = None
            while queue:
                candidate = queue.popleft()
                if candidate not in taken:
                    found = candidate
                    break
        if found is not None:
            taken.add(found)
            ordered.append(results[found])
    left = [part for k, part in enumerate(results) if k not in taken]
    return {**second, "parts": [*ordered, *left, *others]}


def resplice_gemini(
    view: BodyView,
    replace: Mapping[int, Sequence[Mapping[str, Any]]],
    append: Sequence[Mapping[str, Any]],
) -> BodyView:
    """`cachepilot.wire.rewrite.resplice` for a Gemini body (see there): a replacement that
    ends with a user turn joins the client's user turn after it, results in call order.

    Raises:
        WireError: when the new body does not read.
    """
    found = view.body.get("contents")
    raw: list[Any] = list(found) if isinstance(found, list) else []
    out: list[Any] = []
    position = 0
    for index in sorted(replace):
        source = view.sources[index]
        out.extend(raw[position : source.index])
        elements = [dict(e) for e in replace[index]]
        position = source.end
        after = raw[position] if position < len(raw) else None
        if (
            len(elements) >= 2
            and elements[-1].get("role", "user") == "user"
            and isinstance(after, Mapping)
            and after.get("role", "user") == "user"
        ):
            elements[-1] = join_turns(elements[-2], elements[-1], after)
            position += 1
        out.extend(elements)
    out.extend(raw[position:])
    out.extend(dict(e) for e in append)
    return read_gemini_view({**view.body, "contents": out})

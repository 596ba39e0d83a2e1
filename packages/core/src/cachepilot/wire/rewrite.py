"""Request bodies read with provenance, and neutral messages written back into them.

A proxy changes a few things in a request (tool results shown as their reduced views, the
system prompt canonicalized, a fold summary in place of a range, the recall tool) and must
leave everything else exactly as the client sent it: unknown fields, item ids, Anthropic
`cache_control` marks, thinking signatures. `read_view` reads a body with the wire readers
and remembers, for each neutral message, where in the body it came from (`Source`);
`write_view` builds a new body from the original one in which every message that did not
change is copied from the original JSON, a changed message keeps its original element with
only its content replaced, and only messages with no origin are written from neutral form.
The original body is never mutated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachepilot.messages import ContentPart, Message, ReasoningPart, TextPart
from cachepilot.plan.epochs import FOLD_ID_PREFIX
from cachepilot.wire._common import Api
from cachepilot.wire.anthropic import anthropic_blocks
from cachepilot.wire.chat import chat_messages
from cachepilot.wire.gemini import gemini_contents
from cachepilot.wire.gemini_stream import candidate_parts
from cachepilot.wire.gemini_view import resplice_gemini, write_gemini
from cachepilot.wire.response import parse_response
from cachepilot.wire.responses import responses_input
from cachepilot.wire.view import BodyView, Source, read_view

__all__ = [
    "BodyView",
    "Source",
    "align",
    "cache_marks",
    "mark_breakpoints",
    "read_view",
    "reply_elements",
    "resplice",
    "split_like",
    "wire_messages",
    "write_view",
]

_SEP = "\n\n"


def align(outputs: Sequence[Message], inputs: Sequence[Message]) -> list[int | None]:
    """For each output message, the index of the input message it stands for (None: new).

    Outputs keep the order of their inputs. An output is its input when it is the same object;
    a changed tool result is found by its call id; a fold summary is new; any other changed
    message (a user message carrying the dynamic-context block) stands for the next input of
    the same role.
    """
    where = {id(m): i for i, m in enumerate(inputs)}
    by_call: dict[str, list[int]] = {}
    for i, m in enumerate(inputs):
        if m.role == "tool":
            by_call.setdefault(str(m.tool_call_id), []).append(i)
    out: list[int | None] = []
    last = -1
    for message in outputs:
        found = where.get(id(message))
        if found is not None and inputs[found] is message:
            out.append(found)
            last = max(last, found)
            continue
        if message.id is not None and message.id.startswith(FOLD_ID_PREFIX):
            out.append(None)
            continue
        match: int | None = None
        if message.role == "tool":
            match = next((i for i in by_call.get(str(message.tool_call_id), ()) if i > last), None)
        else:
            match = next(
                (i for i in range(last + 1, len(inputs)) if inputs[i].role == message.role), None
            )
        out.append(match)
        if match is not None:
            last = match
    return out


def split_like(text: str, pieces: Sequence[str]) -> list[str] | None:
    """Cut `text` (a rewrite of `pieces` joined by blank lines) back into as many pieces.

    Canonicalization replaces spans that hold no line break, so every newline of the joined
    text survives in order: the cut points are found by counting newlines. Text added at the
    end (a context block at the system tail) stays with the last piece. None when the
    newlines do not line up (then the caller writes the text as one piece).
    """
    return _cut_by_newlines(text, pieces, 2)


def _cut_by_newlines(text: str, pieces: Sequence[str], gap: int) -> list[str] | None:
    """Cut `text`, the rewrite of `pieces` joined by `gap` newlines, at the joins.

    Rewrites keep every newline, so each join is found by counting the newlines its pieces
    hold; a join must be `gap` adjacent newlines. None when they do not line up.
    """
    if len(pieces) <= 1:
        return [text]
    newlines = [i for i, c in enumerate(text) if c == "\n"]
    out: list[str] = []
    start = 0
    seen = 0
    for piece in pieces[:-1]:
        seen += piece.count("\n")
        if seen + gap > len(newlines):
            return None
        join = newlines[seen : seen + gap]
        if join[-1] - join[0] != gap - 1:
            return None
        out.append(text[start : join[0]])
        start = join[-1] + 1
        seen += gap
    out.append(text[start:])
    if out[-1].count("\n") < pieces[-1].count("\n"):
        return None
    return out


# --------------------------------------------------------------------------- writing


def _prefix_parts(new: Message, old: Message) -> tuple[ContentPart, ...] | None:
    """The parts `new` carries before all of `old`'s (None when `new` does not end with them)."""
    old_parts, new_parts = old.parts, new.parts
    if len(new_parts) < len(old_parts):
        return None
    cut = len(new_parts) - len(old_parts)
    if tuple(new_parts[cut:]) != tuple(old_parts):
        return None
    return tuple(new_parts[:cut])


def write_view(
    view: BodyView,
    system: str | None,
    outputs: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    inputs: Sequence[Message] | None = None,
    sources: Sequence[Source | None] | None = None,
) -> dict[str, Any]:
    """A new body: the original with its system prompt, messages and tools replaced.

    Args:
        view: the body as read.
        system: the system prompt to send.
        outputs: the messages to send.
        tools: the tools to send (None: as received).
        inputs: the messages `outputs` derive from (default: `view.messages`); unchanged ones
            are copied from the original body.
        sources: the origin of each input (default: `view.sources`; None for a message that
            has none in this body).
    """
    inputs = view.messages if inputs is None else inputs
    sources = view.sources if sources is None else sources
    positions = align(outputs, inputs)
    pairs: list[tuple[Message, Message | None, Source | None]] = []
    for message, pos in zip(outputs, positions, strict=True):
        if pos is None:
            pairs.append((message, None, None))
        else:
            pairs.append((message, inputs[pos], sources[pos]))
    body = dict(view.body)
    if view.api == "chat":
        _write_chat(body, view, system, pairs)
    elif view.api == "responses":
        _write_responses(body, view, system, pairs)
    elif view.api == "gemini":
        pieces = split_like(system or "", view.system_texts) if system is not None else None
        write_gemini(body, view, system, pairs, tools=tools, pieces=pieces)
        return body
    else:
        _write_anthropic(body, view, system, pairs)
    if tools is not None and (tools or "tools" in body):
        body["tools"] = [dict(t) for t in tools]
    return body


def _content_text(content: Any, text: str) -> Any:
    """A system message's content with its text replaced, in the client's form: a string
    stays a string; a list keeps its parts (each text part its own piece of `text`, every
    other field and part as sent). When the pieces cannot be told apart, the first text part
    carries the whole text."""
    if not isinstance(content, list):
        return text
    slots = [
        k
        for k, part in enumerate(content)
        if isinstance(part, Mapping) and isinstance(part.get("text"), str)
    ]
    if not slots:
        return text
    pieces = _cut_by_newlines(text, [content[k]["text"] for k in slots], 1)
    out = list(content)
    if pieces is None:
        out[slots[0]] = {**content[slots[0]], "text": text}
        dropped = set(slots[1:])
        return [part for k, part in enumerate(out) if k not in dropped]
    for k, piece in zip(slots, pieces, strict=True):
        out[k] = {**content[k], "text": piece}
    return out


def _rewritten_content(
    message: Message, origin: Message, fresh: Any, original: Any, text_type: str
) -> Any:
    """A rewritten Chat or Responses message's content: text put in front of the client's
    parts (the context block) as new text parts before the client's own parts, kept as
    sent (every field, marks included); any other change in the client's form."""
    prefix = _prefix_parts(message, origin) if isinstance(original, list) else None
    if prefix and all(isinstance(p, TextPart) for p in prefix) and origin.parts:
        head = [{"type": text_type, "text": p.text} for p in prefix if isinstance(p, TextPart)]
        return [*head, *original]
    return _client_form(fresh, original, text_type)


def _client_form(new: Any, original: Any, text_type: str) -> Any:
    """Content written from neutral form (`new`) in the form the client sent `original`: a
    string where the client sent a list of parts becomes a list, its one text part with the
    new text (the part's other fields kept), else one new text part. Anything else as is."""
    if not isinstance(new, str) or not new or not isinstance(original, list):
        return new
    if (
        len(original) == 1
        and isinstance(original[0], Mapping)
        and isinstance(original[0].get("text"), str)
    ):
        return [{**original[0], "text": new}]
    return [{"type": text_type, "text": new}]


def _write_chat(
    body: dict[str, Any],
    view: BodyView,
    system: str | None,
    pairs: Sequence[tuple[Message, Message | None, Source | None]],
) -> None:
    raw: list[Any] = list(view.body.get("messages") or [])
    head = raw[: view.head]
    if system != view.system:
        pieces = split_like(system or "", view.system_texts) if head else None
        if pieces is not None and len(pieces) == len(head) and system is not None:
            head = [
                {**entry, "content": _content_text(entry.get("content"), piece)}
                for entry, piece in zip(head, pieces, strict=True)
            ]
        elif system is not None:
            role = head[0].get("role", "system") if head else "system"
            head = [{"role": role, "content": system}]
        else:
            head = []
    out: list[Any] = list(head)
    for message, origin, source in pairs:
        fresh = chat_messages(None, [message])[0]
        if source is None or origin is None:
            out.append(fresh)
        elif message is origin:
            out.append(raw[source.index])
        elif message.role in ("tool", "user", "system"):
            entry = raw[source.index]
            content = _rewritten_content(
                message, origin, fresh["content"], entry.get("content"), "text"
            )
            out.append({**entry, "content": content})
        else:
            out.append(fresh)
    body["messages"] = out


def _write_responses(
    body: dict[str, Any],
    view: BodyView,
    system: str | None,
    pairs: Sequence[tuple[Message, Message | None, Source | None]],
) -> None:
    raw_input = view.body.get("input")
    items: list[Any] = raw_input if isinstance(raw_input, list) else []
    head: list[Any] = list(items[: view.head])
    instructions = view.body.get("instructions")
    if system != view.system:
        pieces = split_like(system or "", view.system_texts)
        expected = (1 if instructions else 0) + len(head)
        if system is not None and pieces is not None and len(pieces) == expected:
            if instructions:
                body["instructions"], pieces = pieces[0], pieces[1:]
            head = [
                {**item, "content": _content_text(item.get("content"), piece)}
                for item, piece in zip(head, pieces, strict=True)
            ]
        else:
            head = []
            if system is None:
                body.pop("instructions", None)
            else:
                body["instructions"] = system
    if isinstance(raw_input, str) and len(pairs) == 1 and not head:
        message, origin, _ = pairs[0]
        if message is origin or isinstance(message.content, str):
            body["input"] = message.content if message is not origin else raw_input
            return
    out: list[Any] = list(head)
    for message, origin, source in pairs:
        if source is None or origin is None or not items:
            out.extend(responses_input([message]))
        elif message is origin:
            out.extend(items[source.index : source.end])
        elif message.role == "tool" and source.end == source.index + 1:
            fresh = responses_input([message])[0]
            out.append({**items[source.index], "output": fresh["output"]})
        elif message.role in ("user", "system") and source.end == source.index + 1:
            fresh = responses_input([message])[0]
            item = items[source.index]
            content = _rewritten_content(
                message, origin, fresh["content"], item.get("content"), "input_text"
            )
            out.append({**item, "content": content})
        else:
            out.extend(responses_input([message]))
    body["input"] = out


def _tool_result_content(message: Message, block: Mapping[str, Any]) -> Any:
    """A tool result's new content in the shape of its original `content` (a caller's
    `cache_control` mark on a replaced text block stays on the text that replaces it)."""
    original = block.get("content")
    text = message.text
    if not isinstance(original, list):
        return text
    texts = [b for b in original if isinstance(b, Mapping) and b.get("type") in ("text", None)]
    replaced = {id(t) for t in texts}
    others = [b for b in original if id(b) not in replaced]
    if not text:
        return others
    first: dict[str, Any] = {"type": "text", "text": text}
    mark = next((t["cache_control"] for t in reversed(texts) if t.get("cache_control")), None)
    if mark is not None:
        first["cache_control"] = mark
    return [first, *others]


def _anthropic_new(message: Message) -> dict[str, Any]:
    """A message with no origin in the body, as a Messages entry."""
    if message.role == "assistant":
        return {"role": "assistant", "content": anthropic_blocks(message)}
    if message.role == "tool":
        content: Any = message.content
        if not isinstance(content, str):
            visible = tuple(p for p in content if not isinstance(p, ReasoningPart))
            content = anthropic_blocks(Message(role="user", content=visible))
        block = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": content}
        return {"role": "user", "content": [block]}
    if isinstance(message.content, str):
        return {"role": "user", "content": message.content}
    return {"role": "user", "content": anthropic_blocks(message)}


def _edited_arguments(
    message: Message, origin: Message, content: Any, blocks: Sequence[int]
) -> list[Any] | None:
    """An assistant turn whose only change is the arguments of some tool calls: its own
    blocks with those `tool_use` inputs replaced, every other block as received (thinking
    signatures, marks). A call whose new arguments are not a JSON object (which a `tool_use`
    input must be) keeps its input as received. None for any other change."""
    if (
        message.role != "assistant"
        or not isinstance(content, list)
        or message.parts != origin.parts
        or len(message.tool_calls) != len(origin.tool_calls)
    ):
        return None
    inputs: dict[str, dict[str, Any]] = {}
    changed = False
    for new, old in zip(message.tool_calls, origin.tool_calls, strict=True):
        if new.id != old.id or new.name != old.name:
            return None
        if new.arguments != old.arguments:
            changed = True
            try:
                parsed = json.loads(new.arguments)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                inputs[new.id] = parsed
    if not changed:
        return None
    out: list[Any] = []
    for k in blocks:
        block = content[k]
        if isinstance(block, Mapping) and block.get("type") == "tool_use":
            replaced = inputs.get(str(block.get("id")))
            if replaced is not None:
                block = {**block, "input": replaced}
        out.append(block)
    return out


@dataclass(slots=True)
class _Entry:
    """One Messages entry being written: its origin (raw index or None) and its content."""

    origin: int | None
    role: str
    content: Any
    base: Mapping[str, Any]


def _write_anthropic(
    body: dict[str, Any],
    view: BodyView,
    system: str | None,
    pairs: Sequence[tuple[Message, Message | None, Source | None]],
) -> None:
    raw: list[Any] = list(view.body.get("messages") or [])
    if system != view.system:
        raw_system = view.body.get("system")
        if system is None:
            body.pop("system", None)
        elif isinstance(raw_system, list) and raw_system:
            texts = [b for b in raw_system if isinstance(b, Mapping)]
            pieces = split_like(system, view.system_texts)
            if pieces is not None and len(pieces) == len(texts):
                body["system"] = [{**b, "text": p} for b, p in zip(texts, pieces, strict=True)]
            else:
                mark = {k: v for k, v in texts[-1].items() if k == "cache_control"}
                body["system"] = [{"type": "text", "text": system, **mark}]
        else:
            body["system"] = system
    entries: list[_Entry] = []
    for message, origin, source in pairs:
        if source is None or origin is None:
            made = _anthropic_new(message)
            entries.append(_Entry(None, made["role"], made["content"], {}))
            continue
        entry = raw[source.index]
        content = entry.get("content")
        piece: Any
        if message is origin:
            piece = content if isinstance(content, str) else [content[k] for k in source.blocks]
        elif message.role == "tool" and isinstance(content, list) and source.blocks:
            block = content[source.blocks[0]]
            piece = [{**block, "content": _tool_result_content(message, block)}]
        elif isinstance(content, str) and isinstance(message.content, str):
            piece = message.content
        elif (edited := _edited_arguments(message, origin, content, source.blocks)) is not None:
            piece = edited
        else:
            same_calls = message.tool_calls == origin.tool_calls
            prefix = _prefix_parts(message, origin) if same_calls else None
            if prefix is not None:
                head = anthropic_blocks(Message(role="user", content=prefix))
                kept = [{"type": "text", "text": content}] if isinstance(content, str) else [
                    content[k] for k in source.blocks
                ]  # fmt: skip
                piece = [*head, *kept]
            else:
                original = [] if isinstance(content, str) else [content[k] for k in source.blocks]
                made = _anthropic_new(message)["content"]
                if isinstance(content, list):  # the client's blocks stay blocks
                    made = _client_form(made, original, "text")
                piece = _carry_marks(made, original)
        last = entries[-1] if entries else None
        if last is not None and last.origin == source.index:
            last.content = _as_blocks(last.content) + _as_blocks(piece)
        else:
            entries.append(_Entry(source.index, str(entry.get("role")), piece, entry))
    merged: list[_Entry] = []
    for item in entries:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.role == item.role == "user"
            and (last.origin is None or item.origin is None)
        ):
            # A result the proxy added joins the client's own user turn next to it.
            last.content = _as_blocks(last.content) + _as_blocks(item.content)
            if last.origin is None:
                last.origin, last.base = item.origin, item.base
            continue
        merged.append(item)
    body["messages"] = [
        {**item.base, "role": item.role, "content": item.content} for item in merged
    ]


def _keep_client_marks(elements: list[dict[str, Any]], replaced: Sequence[Any]) -> None:
    """The client's `cache_control` marks of a replaced Messages turn, put on the end of the
    last assistant entry standing in for it (where the turn the client marked ends); thinking
    blocks take no mark. `elements` are fresh copies; their blocks are replaced, not changed."""
    marks = [
        block["cache_control"]
        for entry in replaced
        if isinstance(entry, Mapping) and isinstance(entry.get("content"), list)
        for block in entry["content"]
        if isinstance(block, Mapping) and "cache_control" in block
    ]
    at = next((i for i in range(len(elements) - 1, -1, -1)
               if elements[i].get("role") == "assistant"), None)  # fmt: skip
    if not marks or at is None:
        return
    blocks = [dict(b) if isinstance(b, Mapping) else b for b in _as_blocks(elements[at]["content"])]
    for k in range(len(blocks) - 1, -1, -1):
        if not marks:
            break
        if _markable(blocks, [k]) is not None:
            blocks[k]["cache_control"] = marks.pop()
    elements[at] = {**elements[at], "content": blocks}


def _carry_marks(content: Any, original: Sequence[Any]) -> Any:
    """A rewritten message's content with the caller's `cache_control` marks of its original
    blocks kept, aligned from the end (what a rewrite adds, a context block, comes first):
    a mark stays on the block that carries the text it marked."""
    marks = [
        b["cache_control"] for b in original if isinstance(b, Mapping) and "cache_control" in b
    ]
    if not marks:
        return content
    blocks = [dict(b) for b in _as_blocks(content)]
    if not blocks:
        return content
    if len(blocks) == len(original):
        for block, old in zip(blocks, original, strict=True):
            if isinstance(old, Mapping) and "cache_control" in old:
                block["cache_control"] = old["cache_control"]
        return blocks
    for block, mark in zip(reversed(blocks), reversed(marks), strict=False):
        block["cache_control"] = mark
    return blocks


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def mark_breakpoints(
    body: dict[str, Any], view: BodyView, indices: Sequence[int], control: Mapping[str, Any]
) -> dict[str, Any]:
    """`body` (read as `view`) with a `cache_control` mark after each message in `indices`.

    -1 marks the end of tools + system (the last system block, else the last tool). A mark
    goes on the last block of the message (a plain-string content becomes one text block);
    a message already marked is left alone. Returns a copy; `body` is not mutated.
    """
    out = dict(body)
    messages: list[Any] = list(out.get("messages") or [])
    for index in sorted(set(indices)):
        if index == -1:
            system = out.get("system")
            if isinstance(system, str) and system:
                out["system"] = [{"type": "text", "text": system, "cache_control": dict(control)}]
            elif isinstance(system, list) and system:
                blocks = list(system)
                if "cache_control" not in blocks[-1]:
                    blocks[-1] = {**blocks[-1], "cache_control": dict(control)}
                out["system"] = blocks
            elif isinstance(out.get("tools"), list) and out["tools"]:
                tools = list(out["tools"])
                if "cache_control" not in tools[-1]:
                    tools[-1] = {**tools[-1], "cache_control": dict(control)}
                out["tools"] = tools
            continue
        if not 0 <= index < len(view.sources):
            continue
        source = view.sources[index]
        entry = dict(messages[source.index])
        content = entry.get("content")
        if isinstance(content, str):
            if not content:
                continue
            entry["content"] = [{"type": "text", "text": content, "cache_control": dict(control)}]
        elif isinstance(content, list) and source.blocks:
            at = _markable(content, source.blocks)
            if at is None:
                continue
            blocks = list(content)
            if "cache_control" not in blocks[at]:
                blocks[at] = {**blocks[at], "cache_control": dict(control)}
            entry["content"] = blocks
        else:
            continue
        messages[source.index] = entry
    out["messages"] = messages
    return out


def _markable(content: Sequence[Any], blocks: Sequence[int]) -> int | None:
    """The last block of `blocks` that may carry a mark (not thinking, not empty text)."""
    for k in reversed(blocks):
        block = content[k]
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind in ("thinking", "redacted_thinking"):
            continue
        if kind == "text" and not block.get("text"):
            continue
        return k
    return None


def cache_marks(view: BodyView) -> list[tuple[int, Any]]:
    """The `cache_control` marks of a Messages body, one entry per mark as the API counts
    them (`cachepilot.wire.anthropic.cache_mark_count`), each with the planner index it
    ends: the neutral message index, -1 for a system block or tool definition. The
    request-level mark (automatic caching) ends the last message."""
    body = view.body
    found: list[tuple[int, Any]] = []
    for key in ("system", "tools"):
        blocks = body.get(key)
        for block in blocks if isinstance(blocks, list) else ():
            if isinstance(block, Mapping) and block.get("cache_control"):
                found.append((-1, block["cache_control"]))
    raw = body.get("messages")
    raw = raw if isinstance(raw, list) else []
    for index, source in enumerate(view.sources):
        content = raw[source.index].get("content") if source.index < len(raw) else None
        if not isinstance(content, list):
            continue
        for k in source.blocks:
            block = content[k]
            if not isinstance(block, Mapping):
                continue
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for nested in inner if isinstance(inner, list) else ():
                if isinstance(nested, Mapping) and nested.get("cache_control"):
                    found.append((index, nested["cache_control"]))
            if block.get("cache_control"):
                found.append((index, block["cache_control"]))
    top = body.get("cache_control")
    if top and view.messages:
        found.append((len(view.messages) - 1, top))
    return found


# --------------------------------------------------------------------------- elements


def wire_messages(api: Api, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Neutral messages as request elements of `api`: Chat messages, Responses `input` items,
    Messages entries (consecutive user-side messages, tool results among them, in one)."""
    if api == "chat":
        return chat_messages(None, messages)
    if api == "responses":
        return responses_input(messages)
    if api == "gemini":
        return gemini_contents(messages)
    out: list[dict[str, Any]] = []
    for message in messages:
        made = _anthropic_new(message)
        if out and made["role"] == "user" and out[-1]["role"] == "user":
            out[-1] = {**out[-1], "content": _as_blocks(out[-1]["content"]) + _as_blocks(
                made["content"])}  # fmt: skip
            continue
        out.append(made)
    return out


def reply_elements(api: Api, payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request elements that carry a reply body back to the API as it was produced:
    Responses output items and Messages content blocks exactly as received (item ids,
    encrypted reasoning and thinking signatures kept); a Chat reply as its assistant message
    (Chat has no ids besides the tool calls'); a Gemini reply as its first candidate's
    `model` turn, parts as received (thought signatures kept)."""
    if api == "gemini":
        return [{"role": "model", "parts": [dict(p) for p in candidate_parts(payload)]}]
    if api == "responses":
        output = payload.get("output")
        return [dict(item) for item in output or () if isinstance(item, Mapping)]
    if api == "anthropic":
        content = payload.get("content")
        blocks = [dict(b) for b in content or () if isinstance(b, Mapping)]
        return [{"role": "assistant", "content": blocks}]
    output = parse_response(payload, api).output
    return wire_messages(api, output[:1])


def resplice(
    view: BodyView,
    replace: Mapping[int, Sequence[Mapping[str, Any]]],
    append: Sequence[Mapping[str, Any]] = (),
) -> BodyView:
    """`view`'s body with the raw elements of some messages replaced and elements appended,
    read again (the new elements get origins, so `write_view` copies them byte for byte).

    Args:
        view: the body as read.
        replace: message index → the raw elements (Chat messages, Responses items, Messages
            entries) that stand in the body where that message's elements are. A Messages
            replacement that ends with a user entry joins the user entry after it (tool
            results of one turn share one user message).
        append: raw elements added after the last message.

    Raises:
        WireError: when the new body does not read (the caller keeps `view`).
    """
    if view.api == "gemini":
        return resplice_gemini(view, replace, append)
    key = "input" if view.api == "responses" else "messages"
    found = view.body.get(key)
    raw: list[Any] = list(found) if isinstance(found, list) else []
    if isinstance(found, str):
        raw = [{"type": "message", "role": "user", "content": found}]
    out: list[Any] = []
    position = 0
    for index in sorted(replace):
        source = view.sources[index]
        out.extend(raw[position : source.index])
        elements = [dict(e) for e in replace[index]]
        if view.api == "anthropic":
            _keep_client_marks(elements, raw[source.index : source.end])
        position = source.end
        after = raw[position] if position < len(raw) else None
        if (
            view.api == "anthropic"
            and elements
            and elements[-1].get("role") == "user"
            and isinstance(after, Mapping)
            and after.get("role") == "user"
        ):
            joined = _as_blocks(elements[-1].get("content")) + _as_blocks(after.get("content"))
            elements[-1] = {**after, "content": joined}
            position += 1
        out.extend(elements)
    out.extend(raw[position:])
    out.extend(dict(e) for e in append)
    return read_view({**view.body, key: out}, view.api)

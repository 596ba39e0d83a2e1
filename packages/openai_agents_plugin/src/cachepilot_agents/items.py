"""Agents SDK input items <-> cachepilot messages, and the view mapped back to items.

The SDK hands `call_model_input_filter` a list of Responses-shaped input items. They are
grouped into **segments**, each one neutral `Message` or one pass-through run:

- an assistant turn: consecutive `reasoning`, assistant `message` and `function_call` items
  become one assistant message (reasoning and text as parts, calls as `tool_calls`);
- a `function_call_output` item becomes one tool message;
- a user / system / developer message item becomes one user or system message;
- every other item (hosted tool calls, computer / shell / MCP items, item references,
  compaction items, anything unknown) passes through untouched and keeps its position. A
  reasoning item belongs to the item that follows it, so a reasoning item before a
  pass-through item passes through with it.

Every message gets a stable id (`Message.id`), derived from the items' own ids and call ids
(else a content digest plus an ordinal), so the pilot's plan keys survive a process restart.

`Transcript.render` maps the pilot's view back: a message the pilot returned unchanged gives
back the very same item dicts it came from (a byte-identical prefix); an edited tool result
replaces only its item's `output`; a canonicalized user or system message replaces only its
`content`; an assistant turn whose tool-call arguments were reduced replaces only the
`arguments` of the matching `function_call` items (same `call_id`, so pairing holds); a
folded range becomes one user message item, followed by the pass-through items the range held
(they are never dropped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.plan.epochs import FOLD_ID_PREFIX, Plan, fold_message

__all__ = ["Segment", "Transcript", "TranscriptBuilder", "item_kind"]

logger = logging.getLogger(__name__)

_MEMO_MAX = 20_000


def item_kind(item: object) -> str:
    """Classify one input item.

    Returns one of `reasoning`, `assistant`, `call`, `output`, `user`, `system` or `opaque`.
    """
    if not isinstance(item, Mapping):
        return "opaque"
    kind = item.get("type")
    role = item.get("role")
    if kind == "reasoning":
        return "reasoning"
    if kind == "function_call":
        return "call" if isinstance(item.get("call_id"), str) and item.get("call_id") else "opaque"
    if kind == "function_call_output":
        return (
            "output" if isinstance(item.get("call_id"), str) and item.get("call_id") else "opaque"
        )
    if kind in (None, "message"):
        if role == "assistant":
            return "assistant"
        if role == "user":
            return "user"
        if role in ("system", "developer"):
            return "system"
    return "opaque"


@dataclass(frozen=True, slots=True)
class Segment:
    """Items of one message (or one pass-through run), as they came in."""

    start: int
    """Index of the first item in the input list."""
    items: tuple[Any, ...]
    """The items themselves (the very objects of the input list)."""
    message: Message | None
    """The neutral message; None for a pass-through run."""
    kind: str
    """`assistant`, `tool`, `user`, `system` or `opaque`."""


def _digest(payload: object) -> str:
    try:
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # cycles and the like: still deterministic enough
        blob = repr(payload)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _text_of(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _parts(content: object) -> str | tuple[ContentPart, ...]:
    """Item content (string or list of content parts) as neutral content."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list | tuple):
        return str(content)
    parts: list[ContentPart] = []
    for raw in content:
        if not isinstance(raw, Mapping):
            parts.append(TextPart(str(raw)))
            continue
        kind = raw.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append(TextPart(_text_of(raw.get("text"))))
        elif kind == "refusal":
            parts.append(TextPart(_text_of(raw.get("refusal"))))
        elif kind in ("input_image", "image"):
            url = raw.get("image_url") or (
                f"file_id:{raw['file_id']}" if raw.get("file_id") else ""
            )
            detail = raw.get("detail")
            parts.append(
                ImagePart(url=str(url), detail=detail if isinstance(detail, str) else None)
            )
        elif kind in ("input_file", "file"):
            name = raw.get("filename") or raw.get("file_id") or raw.get("file_url") or "file"
            parts.append(TextPart(f"[file {name}]"))
        else:
            parts.append(TextPart(f"[{kind or 'part'}]"))
    return tuple(parts)


def _reasoning_part(item: Mapping[str, Any]) -> ReasoningPart:
    texts: list[str] = []
    for block in (item.get("summary") or [], item.get("content") or []):
        if isinstance(block, list):
            texts.extend(_text_of(s.get("text")) for s in block if isinstance(s, Mapping))
    signature = item.get("encrypted_content")
    return ReasoningPart(text="\n".join(texts), signature=str(signature) if signature else None)


def _assistant_message(items: Sequence[Mapping[str, Any]], ident: str) -> Message:
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    for item in items:
        kind = item_kind(item)
        if kind == "reasoning":
            parts.append(_reasoning_part(item))
        elif kind == "call":
            calls.append(
                ToolCall(
                    id=str(item["call_id"]),
                    name=_text_of(item.get("name")),
                    arguments=_text_of(item.get("arguments")) or "{}",
                )
            )
        else:
            content = _parts(item.get("content"))
            if isinstance(content, str):
                if content:
                    parts.append(TextPart(content))
            else:
                parts.extend(content)
    return Message(role="assistant", content=tuple(parts), tool_calls=tuple(calls), id=ident)


class Transcript:
    """One call's input items as segments and neutral messages (see the module docstring)."""

    def __init__(self, items: Sequence[Any], segments: Sequence[Segment]) -> None:
        self.items = list(items)
        self.segments = list(segments)
        self.messages = [s.message for s in self.segments if s.message is not None]
        self._by_id: dict[str, int] = {}
        for index, segment in enumerate(self.segments):
            if segment.message is not None and segment.message.id is not None:
                self._by_id[segment.message.id] = index

    def render(self, view: Sequence[Message], plan: Plan) -> list[Any]:
        """Map the pilot's view back to input items (see the module docstring).

        Raises:
            ValueError: when a view message cannot be placed (the caller sends the input
                unchanged then).
        """
        folds = {fold_message(edit).id: edit for edit in plan.folds()}
        out: list[Any] = []
        cursor = 0  # next segment not yet accounted for

        def flush_opaque(until: int) -> None:
            nonlocal cursor
            for segment in self.segments[cursor:until]:
                if segment.message is None:
                    out.extend(segment.items)
            cursor = max(cursor, until)

        for message in view:
            ident = message.id or ""
            if ident.startswith(FOLD_ID_PREFIX) and ident in folds:
                edit = folds[ident]
                first = self._segment_of_key(edit.key)
                last = self._segment_of_key(edit.last_key)
                if first is None or last is None or last < first or first < cursor:
                    raise ValueError(f"fold {edit.key}..{edit.last_key} does not map to items")
                flush_opaque(first)
                out.append({"role": "user", "content": message.text})
                # Pass-through items inside the folded range are kept, in order, after it.
                for segment in self.segments[first : last + 1]:
                    if segment.message is None:
                        out.extend(segment.items)
                cursor = last + 1
                continue
            index = self._by_id.get(ident)
            if index is None or index < cursor:
                raise ValueError(f"view message {ident!r} does not map to an input item")
            flush_opaque(index)
            segment = self.segments[index]
            if message is segment.message:
                out.extend(segment.items)
            else:
                out.extend(_edited_items(segment, message))
            cursor = index + 1
        flush_opaque(len(self.segments))
        return out

    def _segment_of_key(self, key: str) -> int | None:
        if not key.startswith("id:"):
            return None
        return self._by_id.get(key[3:])


def _edited_items(segment: Segment, message: Message) -> list[Any]:
    """The segment's items with the edited message's content put back in place."""
    original = segment.message
    if segment.kind == "assistant" and original is not None:
        edited = _arguments_back(segment, original, message)
        if edited is not None:
            return edited
        logger.warning("an edit of a %s message was not applied to its items", segment.kind)
        return list(segment.items)
    if original is None or len(segment.items) != 1 or not isinstance(segment.items[0], Mapping):
        # Only single-item messages (tool results, user and system messages) are ever edited;
        # anything else is sent as it came.
        logger.warning("an edit of a %s message was not applied to its items", segment.kind)
        return list(segment.items)
    item = dict(segment.items[0])
    if segment.kind == "tool":
        item["output"] = _content_back(item.get("output"), original, message)
    elif segment.kind in ("user", "system"):
        item["content"] = _content_back(item.get("content"), original, message)
    else:
        logger.warning("an edit of a %s message was not applied to its items", segment.kind)
        return list(segment.items)
    return [item]


def _arguments_back(segment: Segment, original: Message, edited: Message) -> list[Any] | None:
    """An assistant turn's items with the reduced tool-call arguments of `edited` set on its
    `function_call` items; None when the edit changed anything else (text, reasoning, which
    calls there are), which the plan never does."""
    same_calls = [(c.id, c.name) for c in original.tool_calls] == [
        (c.id, c.name) for c in edited.tool_calls
    ]
    if not same_calls or original.content != edited.content:
        return None
    changed = {
        new.id: new.arguments
        for old, new in zip(original.tool_calls, edited.tool_calls, strict=True)
        if new.arguments != old.arguments
    }
    return [
        {**item, "arguments": changed[str(item["call_id"])]}
        if item_kind(item) == "call" and str(item["call_id"]) in changed
        else item
        for item in segment.items
    ]


def _content_back(raw: object, original: Message, edited: Message) -> object:
    """Edited neutral content in the item's own shape (string, or a list of content parts)."""
    new = edited.content
    if isinstance(new, str):
        return new
    if not isinstance(raw, list):
        return edited.text
    old = original.parts
    text_type = "output_text" if original.role == "assistant" else "input_text"
    out: list[Any] = []
    # The canonicalizer prepends one block part, appends update-note parts, or rewrites text
    # parts in place: align the original parts so every unchanged one keeps its dict.
    offset = 1 if len(new) > len(old) and old and new[0] != old[0] else 0
    for index, part in enumerate(new):
        at = index - offset
        if 0 <= at < len(raw) and at < len(old):
            if part == old[at]:
                out.append(raw[at])
                continue
            base = raw[at]
            if isinstance(part, TextPart) and isinstance(base, Mapping) and "text" in base:
                out.append({**base, "text": part.text})
                continue
            if not isinstance(part, TextPart):
                out.append(base)
                continue
        if isinstance(part, TextPart):
            out.append({"type": text_type, "text": part.text})
        elif isinstance(part, ImagePart):
            image: dict[str, Any] = {"type": "input_image", "image_url": part.url}
            if part.detail is not None:
                image["detail"] = part.detail
            out.append(image)
    return out


class TranscriptBuilder:
    """Builds a `Transcript` per call, reusing `Message` objects for unchanged items.

    Reuse matters: the pilot keys its per-message memos (keys, hashes, token counts) by object
    identity, so a call costs O(new items). One builder per thread; thread-safe.
    """

    def __init__(self) -> None:
        self._memo: OrderedDict[tuple[str, str, str], Message] = OrderedDict()
        self._lock = threading.Lock()

    def build(self, items: Sequence[Any]) -> Transcript:
        """Group `items` into segments and messages."""
        raw_segments: list[tuple[int, list[Any], str]] = []
        kinds = [item_kind(item) for item in items]
        count = len(items)
        side = ("assistant", "call")
        index = 0
        while index < count:
            start = index
            kind = kinds[index]
            if kind in ("reasoning", *side):
                # Reasoning belongs to the item that follows it.
                ahead = index
                while ahead < count and kinds[ahead] == "reasoning":
                    ahead += 1
                follower = kinds[ahead] if ahead < count else None
                if follower == "opaque":
                    raw_segments.append((start, list(items[start : ahead + 1]), "opaque"))
                    index = ahead + 1
                    continue
                if follower not in side:
                    # Reasoning before a result, a user message or the end: its own turn.
                    raw_segments.append((start, list(items[start:ahead]), "assistant"))
                    index = ahead
                    continue
                end = ahead
                while True:
                    while end < count and kinds[end] in side:
                        end += 1
                    probe = end
                    while probe < count and kinds[probe] == "reasoning":
                        probe += 1
                    if probe > end and probe < count and kinds[probe] in side:
                        end = probe  # reasoning between two items of the same turn
                        continue
                    break
                raw_segments.append((start, list(items[start:end]), "assistant"))
                index = end
                continue
            if kind == "output":
                raw_segments.append((start, [items[index]], "tool"))
            elif kind in ("user", "system"):
                raw_segments.append((start, [items[index]], kind))
            else:
                raw_segments.append((start, [items[index]], "opaque"))
            index += 1

        segments: list[Segment] = []
        taken: dict[str, int] = {}
        names: dict[str, str] = {}  # call id -> tool name (tool messages carry it)
        for start, seg_items, kind in raw_segments:
            if kind == "assistant":
                for item in seg_items:
                    if item_kind(item) == "call":
                        names[str(item["call_id"])] = _text_of(item.get("name"))
            if kind == "opaque":
                segments.append(Segment(start, tuple(seg_items), None, kind))
                continue
            base = _base_id(seg_items, kind)
            ordinal = taken.get(base, 0)
            taken[base] = ordinal + 1
            ident = base if ordinal == 0 else f"{base}#{ordinal}"
            name = names.get(str(seg_items[0].get("call_id"))) if kind == "tool" else None
            message = self._message(seg_items, kind, ident, name)
            segments.append(Segment(start, tuple(seg_items), message, kind))
        return Transcript(items, segments)

    def _message(
        self, seg_items: Sequence[Any], kind: str, ident: str, name: str | None
    ) -> Message:
        memo_key = (ident, name or "", _digest(list(seg_items)))
        with self._lock:
            hit = self._memo.get(memo_key)
            if hit is not None:
                self._memo.move_to_end(memo_key)
                return hit
        message = _to_message(seg_items, kind, ident, name)
        with self._lock:
            message = self._memo.setdefault(memo_key, message)
            if len(self._memo) > _MEMO_MAX:
                self._memo.popitem(last=False)
        return message


def _base_id(seg_items: Sequence[Mapping[str, Any]], kind: str) -> str:
    if kind == "tool":
        return f"out:{seg_items[0]['call_id']}"
    if kind == "assistant":
        for item in seg_items:
            if item_kind(item) == "call":
                return f"asst:{item['call_id']}"
        for item in seg_items:
            if isinstance(item.get("id"), str) and item["id"]:
                return f"asst-id:{item['id']}"
        return f"asst-h:{_digest(list(seg_items))}"
    item = seg_items[0]
    if isinstance(item.get("id"), str) and item["id"]:
        return f"{kind}-id:{item['id']}"
    return f"{kind}-h:{_digest(item)}"


def _to_message(
    seg_items: Sequence[Mapping[str, Any]], kind: str, ident: str, name: str | None
) -> Message:
    if kind == "assistant":
        return _assistant_message(seg_items, ident)
    item = seg_items[0]
    if kind == "tool":
        return Message(
            role="tool",
            content=_parts(item.get("output")),
            tool_call_id=str(item["call_id"]),
            name=name or None,
            id=ident,
        )
    if kind == "system":
        return Message(role="system", content=_parts(item.get("content")), id=ident)
    return Message(role="user", content=_parts(item.get("content")), id=ident)

"""Neutral messages <-> OpenAI Responses-API input items (the Agents SDK's input list).

Items are plain dicts shaped like the SDK's `TResponseInputItem`s (no SDK import needed):

- user / system message: `{"role", "content"}` (an easy input message, as
  `ItemHelpers.input_to_new_input_list` makes); content is the string, or a list of
  `input_text` / `input_image` parts.
- assistant message: in part order, `reasoning` items (`summary_text` + `encrypted_content`
  for the signature) and `message` items (`output_text` parts), then one `function_call`
  item per tool call (`call_id`, `name`, verbatim `arguments`).
- tool message: `{"type": "function_call_output", "call_id", "output"}`; output is the string,
  or a list of `input_text` / `input_image` parts.

`to_items` also returns one `ItemSpan` per message. `from_items` uses them to give back the
original `Message` object for every span whose items a filter left untouched, which makes
the round trip exact even for fields the item format cannot hold (tool names, ids, str vs
parts); a changed span is rebuilt from its items and keeps the original's id and tool name.
`items_to_messages` is the span-less, best-effort reverse.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall

__all__ = [
    "ItemSpan",
    "from_items",
    "items_to_messages",
    "message_to_items",
    "to_items",
]

logger = logging.getLogger(__name__)

_ASSISTANT_SIDE = frozenset({"reasoning", "function_call"})


@dataclass(frozen=True, slots=True)
class ItemSpan:
    """The items one message became: `items[start:stop]`, as emitted."""

    message: Message
    start: int
    stop: int
    items: tuple[dict[str, Any], ...]


def _input_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, ImagePart):
        out: dict[str, Any] = {"type": "input_image", "image_url": part.url}
        if part.detail is not None:
            out["detail"] = part.detail
        return out
    return {"type": "input_text", "text": part.text}


def _input_content(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [_input_part(p) for p in content]


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []

    def flush() -> None:
        if texts:
            item: dict[str, Any] = {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": list(texts),
            }
            if message.id:
                item["id"] = message.id
            items.append(item)
            texts.clear()

    if isinstance(message.content, str):
        if message.content:
            texts.append({"type": "output_text", "text": message.content, "annotations": []})
    else:
        for part in message.content:
            if isinstance(part, ReasoningPart):
                flush()
                reasoning: dict[str, Any] = {
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": part.text}],
                }
                if part.signature is not None:
                    reasoning["encrypted_content"] = part.signature
                items.append(reasoning)
            elif isinstance(part, ImagePart):
                # Not valid in a Responses output message; kept so nothing is lost.
                texts.append(_input_part(part))
            else:
                texts.append({"type": "output_text", "text": part.text, "annotations": []})
    flush()
    for call in message.tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }
        )
    return items


def message_to_items(message: Message) -> list[dict[str, Any]]:
    """The Responses input items for one message."""
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": _input_content(message.content),
            }
        ]
    if message.role == "assistant":
        return _assistant_items(message)
    return [{"role": message.role, "content": _input_content(message.content)}]


def to_items(
    messages: Sequence[Message],
    cached: Sequence[Sequence[dict[str, Any]]] | None = None,
) -> tuple[list[dict[str, Any]], list[ItemSpan]]:
    """Messages -> (items, spans).

    Args:
        messages: the transcript.
        cached: optional `message_to_items` results for a prefix of `messages` (reused).
    """
    items: list[dict[str, Any]] = []
    spans: list[ItemSpan] = []
    for index, message in enumerate(messages):
        own = cached[index] if cached is not None and index < len(cached) else None
        produced = list(own) if own is not None else message_to_items(message)
        start = len(items)
        items.extend(produced)
        spans.append(ItemSpan(message, start, len(items), tuple(produced)))
    return items, spans


def _parts_from(content: object) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts: list[ContentPart] = []
    for raw in content:
        if not isinstance(raw, Mapping):
            parts.append(TextPart(str(raw)))
            continue
        kind = raw.get("type")
        if kind in {"input_image", "image"}:
            detail = raw.get("detail")
            parts.append(
                ImagePart(url=str(raw.get("image_url") or raw.get("file_id") or ""), detail=detail)
            )
        elif kind in {"input_text", "output_text", "text"}:
            parts.append(TextPart(str(raw.get("text", ""))))
        elif kind == "refusal":
            parts.append(TextPart(str(raw.get("refusal", ""))))
        else:
            logger.debug("Responses content part %r kept as text", kind)
            parts.append(TextPart(str(raw)))
    return tuple(parts)


class _AssistantBuilder:
    def __init__(self) -> None:
        self.parts: list[ContentPart] = []
        self.calls: list[ToolCall] = []
        self.id: str | None = None
        self.text_items = 0

    @property
    def empty(self) -> bool:
        return not self.parts and not self.calls

    def add(self, item: Mapping[str, Any]) -> None:
        kind = item.get("type")
        if kind == "reasoning":
            summary = item.get("summary") or []
            text = "\n".join(str(s.get("text", "")) for s in summary if isinstance(s, Mapping))
            signature = item.get("encrypted_content")
            self.parts.append(
                ReasoningPart(text=text, signature=str(signature) if signature else None)
            )
        elif kind == "function_call":
            self.calls.append(
                ToolCall(
                    id=str(item.get("call_id") or ""),
                    name=str(item.get("name") or ""),
                    arguments=str(item.get("arguments") or "{}"),
                )
            )
        else:
            self.text_items += 1
            if self.id is None and item.get("id"):
                self.id = str(item["id"])
            content = _parts_from(item.get("content"))
            if isinstance(content, str):
                if content:
                    self.parts.append(TextPart(content))
            else:
                self.parts.extend(content)

    def build(self) -> Message:
        content: str | tuple[ContentPart, ...] = tuple(self.parts)
        if not self.parts:
            content = ""
        elif len(self.parts) == 1 and self.text_items == 1:
            only = self.parts[0]
            if isinstance(only, TextPart):
                content = only.text
        return Message(role="assistant", content=content, tool_calls=tuple(self.calls), id=self.id)


def items_to_messages(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Items -> messages without spans (consecutive assistant-side items form one message)."""
    out: list[Message] = []
    builder = _AssistantBuilder()

    def flush() -> None:
        nonlocal builder
        if not builder.empty:
            out.append(builder.build())
        builder = _AssistantBuilder()

    for item in items:
        kind = item.get("type")
        role = item.get("role")
        if kind in _ASSISTANT_SIDE or (role == "assistant" and kind in {None, "message"}):
            # Calls close an assistant message: text or reasoning after them starts a new one.
            if builder.calls and kind != "function_call":
                flush()
            builder.add(item)
            continue
        flush()
        if kind == "function_call_output":
            out.append(
                Message(
                    role="tool",
                    content=_parts_from(item.get("output")),
                    tool_call_id=str(item.get("call_id") or "unknown"),
                )
            )
        elif role in {"user", "system", "developer"}:
            out.append(
                Message(
                    role="system" if role == "developer" else role,
                    content=_parts_from(item.get("content")),
                )
            )
        else:
            logger.debug("Responses item type %r has no neutral form; dropped", kind)
    flush()
    return out


def _rebuilt(span: ItemSpan, items: Sequence[Mapping[str, Any]]) -> list[Message]:
    rebuilt = items_to_messages(items)
    original = span.message
    if len(rebuilt) != 1 or rebuilt[0].role != original.role:
        return rebuilt
    message = rebuilt[0]
    return [
        Message(
            role=message.role,
            content=message.content,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
            name=original.name,
            id=original.id,
        )
    ]


def from_items(items: Sequence[Mapping[str, Any]], spans: Sequence[ItemSpan]) -> list[Message]:
    """Items (possibly edited by a filter that keeps their number and order) -> messages.

    Falls back to `items_to_messages` when the items no longer line up with `spans`.
    """
    if not spans or spans[-1].stop != len(items):
        if spans or items:
            logger.debug("items do not line up with their spans; converting without them")
        return items_to_messages(items)
    out: list[Message] = []
    for span in spans:
        current = items[span.start : span.stop]
        unchanged = all(a is b or a == b for a, b in zip(current, span.items, strict=True))
        if unchanged:
            out.append(span.message)
        else:
            out.extend(_rebuilt(span, current))
    return out

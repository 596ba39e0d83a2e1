"""Neutral messages <-> LangChain messages, exact in both directions.

Imports `langchain_core` at import time: import this module lazily (only the LangChain peers
do, inside their methods).

Mapping:

- roles: `system` -> `SystemMessage`, `user` -> `HumanMessage`, `assistant` -> `AIMessage`,
  `tool` -> `ToolMessage` (with `tool_call_id` and `name`).
- content: a plain string stays a string; a tuple of parts becomes a list of LangChain
  standard blocks: `{"type": "text"}`, `{"type": "image", "url", "mime_type", "extras":
  {"detail"}}`, `{"type": "reasoning", "reasoning", "extras": {"signature"}}`. Reasoning is
  kept (not dropped) so the peer sees the same request as every other strategy; LangChain's
  approximate counter charges such blocks by their `repr`.
- tool calls: `AIMessage.tool_calls` carries the parsed arguments (LangChain requires a
  dict; `{}` when the text is not a JSON object) and `additional_kwargs["tool_calls"]` the
  verbatim JSON text in OpenAI format, as `ChatOpenAI` keeps it. Back-conversion uses the
  verbatim text while it still parses to the same dict, so untouched calls round-trip byte
  for byte and calls a middleware edited (e.g. `clear_tool_inputs`) show the edit.
- ids: the message's own id, else a deterministic `cachepilot-key:<stable key>` (LangChain
  and LangGraph would otherwise assign random uuids); back-conversion restores `None`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import ToolCall as LcToolCall

from cachepilot.messages import (
    ContentPart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCall,
    content_hash,
)

__all__ = [
    "SYNTHETIC_ID_PREFIX",
    "LcConverter",
    "from_lc",
    "from_lc_message",
    "from_lc_reusing",
    "to_lc",
]

logger = logging.getLogger(__name__)

SYNTHETIC_ID_PREFIX = "cachepilot-key:"
"""Prefix of the ids given to messages that have none (removed again on the way back)."""


def _args_of(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _part_to_block(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        block: dict[str, Any] = {"type": "image", "url": part.url}
        if part.media_type is not None:
            block["mime_type"] = part.media_type
        if part.detail is not None:
            block["extras"] = {"detail": part.detail}
        return block
    out: dict[str, Any] = {"type": "reasoning", "reasoning": part.text}
    if part.signature is not None:
        out["extras"] = {"signature": part.signature}
    return out


def _content_to_lc(content: str | tuple[ContentPart, ...]) -> str | list[str | dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [_part_to_block(p) for p in content]


def _block_to_part(block: object) -> ContentPart:
    if isinstance(block, str):
        return TextPart(block)
    if not isinstance(block, Mapping):
        return TextPart(repr(block))
    kind = block.get("type")
    extras = block.get("extras")
    extras = extras if isinstance(extras, Mapping) else {}
    if kind == "text":
        return TextPart(str(block.get("text", "")))
    if kind == "image":
        url = block.get("url")
        mime = block.get("mime_type")
        if not url and block.get("base64"):
            url = f"data:{mime or 'image/png'};base64,{block['base64']}"
        return ImagePart(
            url=str(url or ""),
            media_type=str(mime) if mime is not None else None,
            detail=str(extras["detail"]) if extras.get("detail") is not None else None,
        )
    if kind == "image_url":
        raw = block.get("image_url")
        spec: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {"url": raw}
        detail = spec.get("detail")
        return ImagePart(url=str(spec.get("url", "")), detail=str(detail) if detail else None)
    if kind == "reasoning":
        signature = extras.get("signature")
        return ReasoningPart(
            text=str(block.get("reasoning", "")),
            signature=str(signature) if signature is not None else None,
        )
    if kind == "thinking":
        signature = block.get("signature")
        return ReasoningPart(
            text=str(block.get("thinking", "")),
            signature=str(signature) if signature is not None else None,
        )
    logger.debug("unknown LangChain content block %r kept as JSON text", kind)
    return TextPart(json.dumps(dict(block), sort_keys=True, ensure_ascii=False, default=str))


def _content_from_lc(content: object) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return tuple(_block_to_part(b) for b in content)
    return repr(content)


class LcConverter:
    """Converts neutral messages to LangChain messages one at a time, with stable ids.

    Messages without an id get `cachepilot-key:<key>`, the key `message_keys` would give
    them in the sequence converted so far (so ids are deterministic and unique).
    """

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def lc_id(self, message: Message) -> str:
        """The id the LangChain copy of `message` gets."""
        if message.id:
            return message.id
        digest = content_hash(message)
        ordinal = self._seen.get(digest, 0)
        self._seen[digest] = ordinal + 1
        return f"{SYNTHETIC_ID_PREFIX}h:{digest}:{ordinal}"

    def convert(self, message: Message) -> AnyMessage:
        """The LangChain message for one neutral message."""
        msg_id = self.lc_id(message)
        content = _content_to_lc(message.content)
        if message.role == "system":
            return SystemMessage(content=content, id=msg_id, name=message.name)
        if message.role == "user":
            return HumanMessage(content=content, id=msg_id, name=message.name)
        if message.role == "tool":
            return ToolMessage(
                content=content,
                tool_call_id=message.tool_call_id or "",
                name=message.name,
                id=msg_id,
            )
        calls = [
            LcToolCall(name=c.name, args=_args_of(c.arguments), id=c.id, type="tool_call")
            for c in message.tool_calls
        ]
        kwargs: dict[str, Any] = {}
        if message.tool_calls:
            kwargs["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ]
        return AIMessage(
            content=content,
            tool_calls=calls,
            additional_kwargs=kwargs,
            id=msg_id,
            name=message.name,
        )

    def convert_all(self, messages: Iterable[Message]) -> list[AnyMessage]:
        """Convert a sequence (continuing this converter's key counters)."""
        return [self.convert(m) for m in messages]


def to_lc(messages: Iterable[Message]) -> list[AnyMessage]:
    """Neutral messages -> LangChain messages (fresh id counters)."""
    return LcConverter().convert_all(messages)


def _raw_arguments(message: AIMessage) -> dict[str, str]:
    raw: dict[str, str] = {}
    for entry in message.additional_kwargs.get("tool_calls") or ():
        if not isinstance(entry, Mapping):
            continue
        function = entry.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("arguments"), str):
            raw[str(entry.get("id"))] = function["arguments"]
    return raw


def _restore_id(msg_id: str | None) -> str | None:
    if msg_id is None or msg_id.startswith(SYNTHETIC_ID_PREFIX):
        return None
    return msg_id


def from_lc_message(message: BaseMessage) -> Message:
    """One LangChain message -> neutral message."""
    msg_id = _restore_id(message.id)
    content = _content_from_lc(message.content)
    name = message.name
    if isinstance(message, ToolMessage):
        return Message(
            role="tool",
            content=content,
            tool_call_id=message.tool_call_id or "unknown",
            name=name,
            id=msg_id,
        )
    if isinstance(message, AIMessage):
        raw = _raw_arguments(message)
        calls: list[ToolCall] = []
        for call in message.tool_calls:
            call_id = str(call.get("id") or "")
            args = call.get("args") or {}
            verbatim = raw.get(call_id)
            if verbatim is not None and _args_of(verbatim) == args:
                arguments = verbatim
            else:
                arguments = json.dumps(args, ensure_ascii=False)
            calls.append(ToolCall(id=call_id, name=call["name"], arguments=arguments))
        for bad in message.invalid_tool_calls:
            calls.append(
                ToolCall(
                    id=str(bad.get("id") or ""),
                    name=str(bad.get("name") or ""),
                    arguments=str(bad.get("args") or "{}"),
                )
            )
        return Message(
            role="assistant", content=content, tool_calls=tuple(calls), name=name, id=msg_id
        )
    if isinstance(message, SystemMessage):
        return Message(role="system", content=content, name=name, id=msg_id)
    if not isinstance(message, HumanMessage):
        logger.debug("LangChain message type %r converted as a user message", message.type)
    return Message(role="user", content=content, name=name, id=msg_id)


def from_lc(messages: Sequence[BaseMessage]) -> list[Message]:
    """LangChain messages -> neutral messages."""
    return [from_lc_message(m) for m in messages]


def _same(a: BaseMessage, b: BaseMessage) -> bool:
    if type(a) is not type(b) or a.content != b.content or a.name != b.name:
        return False
    if isinstance(a, AIMessage) and isinstance(b, AIMessage):
        return a.tool_calls == b.tool_calls and a.invalid_tool_calls == b.invalid_tool_calls
    if isinstance(a, ToolMessage) and isinstance(b, ToolMessage):
        return a.tool_call_id == b.tool_call_id
    return True


def from_lc_reusing(
    messages: Sequence[BaseMessage], known: Mapping[str, tuple[BaseMessage, Message]]
) -> list[Message]:
    """Like `from_lc`, but a message equal to a known original returns that original object.

    Args:
        messages: LangChain messages (e.g. what a middleware handed to the model).
        known: LangChain id -> (the LangChain message we produced, its neutral original).
    """
    out: list[Message] = []
    for message in messages:
        hit = known.get(message.id) if message.id is not None else None
        if hit is not None and (hit[0] is message or _same(hit[0], message)):
            out.append(hit[1])
        else:
            out.append(from_lc_message(message))
    return out

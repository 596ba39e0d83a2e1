"""LangChain messages and tools to and from cachepilot's neutral types.

Conversion is one-way for reading (`to_core`) and minimal for writing (`to_langchain`): a view
message that is the very object converted from a LangChain message maps back to that same
LangChain object, an edited one becomes a same-id copy with new content, and a message that
exists only in the view (a fold summary) becomes a `HumanMessage`. So unchanged history keeps
its exact objects and serialization, and edits persist through `add_messages` by id.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall

__all__ = [
    "MessageConverter",
    "content_text",
    "system_text",
    "to_langchain",
    "tool_schema",
]

logger = logging.getLogger(__name__)

_MEMO_MAX = 20_000


def content_text(content: object) -> str:
    """The text of LangChain message content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out: list[str] = []
        for block in content:
            if isinstance(block, str):
                out.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                out.append(str(block.get("text", "")))
        return "\n".join(out)
    return "" if content is None else str(content)


def system_text(message: SystemMessage | None) -> str | None:
    """The system prompt as text (None when there is none)."""
    if message is None:
        return None
    return content_text(message.content)


def _reasoning_text(block: Mapping[str, Any]) -> str:
    text = block.get("reasoning")
    if isinstance(text, str):
        return text
    summary = block.get("summary")
    if isinstance(summary, list):
        return "\n".join(
            str(s.get("text", "")) for s in summary if isinstance(s, Mapping) and s.get("text")
        )
    return str(block.get("text", "") or block.get("thinking", "") or "")


def _image_part(block: Mapping[str, Any]) -> ImagePart | None:
    if block.get("type") == "image_url":
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        detail = image.get("detail") if isinstance(image, Mapping) else None
        return ImagePart(url=str(url), detail=detail) if url else None
    if block.get("type") == "image":
        mime = block.get("mime_type") or block.get("media_type")
        if block.get("url"):
            return ImagePart(url=str(block["url"]), media_type=mime)
        data = block.get("base64") or block.get("data")
        if data:
            return ImagePart(url=f"data:{mime or 'image/png'};base64,{data}", media_type=mime)
    return None


def _parts(content: object) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts: list[ContentPart] = []
    for block in content:
        if isinstance(block, str):
            parts.append(TextPart(block))
            continue
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(str(block.get("text", ""))))
        elif kind in ("reasoning", "thinking"):
            signature = block.get("signature") or block.get("encrypted_content")
            parts.append(
                ReasoningPart(
                    _reasoning_text(block), str(signature) if signature is not None else None
                )
            )
        elif kind in ("image_url", "image"):
            image = _image_part(block)
            if image is not None:
                parts.append(image)
        # Other blocks (tool_use, function_call, citations…) duplicate structured fields or
        # carry provider metadata: they are not text the model reads back.
    return tuple(parts)


def _arguments(call: Mapping[str, Any]) -> str:
    args = call.get("args")
    try:
        return json.dumps(args if args is not None else {}, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(args), ensure_ascii=False)


def _convert(message: BaseMessage) -> Message:
    """One LangChain message as a cachepilot `Message` (total: odd messages become text)."""
    msg_id = message.id if isinstance(message.id, str) and message.id else None
    if isinstance(message, ToolMessage):
        return Message(
            role="tool",
            content=_parts(message.content),
            tool_call_id=str(message.tool_call_id or "missing-tool-call-id"),
            name=message.name,
            id=msg_id,
        )
    if isinstance(message, AIMessage):
        calls = tuple(
            ToolCall(
                id=str(c.get("id") or ""), name=str(c.get("name", "")), arguments=_arguments(c)
            )
            for c in message.tool_calls
        )
        return Message(
            role="assistant", content=_parts(message.content), tool_calls=calls, id=msg_id
        )
    if isinstance(message, SystemMessage):
        return Message(role="system", content=_parts(message.content), id=msg_id)
    # Human, chat and any other message types read as user text.
    return Message(role="user", content=_parts(message.content), id=msg_id)


class MessageConverter:
    """Converts LangChain messages, memoised by object identity (a growing history costs
    O(new messages)), and maps a view back to LangChain messages."""

    def __init__(self, max_entries: int = _MEMO_MAX) -> None:
        self._memo: OrderedDict[int, tuple[BaseMessage, Message]] = OrderedDict()
        self._back: dict[int, BaseMessage] = {}
        self._max = max_entries
        self._lock = threading.Lock()

    def to_core(self, messages: Iterable[BaseMessage]) -> list[Message]:
        """Convert a history; the same LangChain object always yields the same `Message`."""
        out: list[Message] = []
        with self._lock:
            for message in messages:
                hit = self._memo.get(id(message))
                if hit is not None and hit[0] is message:
                    self._memo.move_to_end(id(message))
                    out.append(hit[1])
                    continue
                converted = _convert(message)
                old = self._memo.pop(id(message), None)
                if old is not None:
                    self._back.pop(id(old[1]), None)
                self._memo[id(message)] = (message, converted)
                self._back[id(converted)] = message
                out.append(converted)
            while len(self._memo) > self._max:
                _, (_, evicted) = self._memo.popitem(last=False)
                self._back.pop(id(evicted), None)
        return out

    def original(self, message: Message) -> BaseMessage | None:
        """The LangChain message `message` was converted from, if it was."""
        with self._lock:
            found = self._back.get(id(message))
            if found is None:
                return None
            memo = self._memo.get(id(found))
            return found if memo is not None and memo[1] is message else None


def _lc_content(content: str | tuple[ContentPart, ...]) -> str | list[str | dict[str, Any]]:
    if isinstance(content, str):
        return content
    blocks: list[str | dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            image: dict[str, Any] = {"url": part.url}
            if part.detail is not None:
                image["detail"] = part.detail
            blocks.append({"type": "image_url", "image_url": image})
        else:
            block: dict[str, Any] = {"type": "reasoning", "reasoning": part.text}
            if part.signature is not None:
                block["signature"] = part.signature
            blocks.append(block)
    return blocks


def to_langchain(
    message: Message,
    converter: MessageConverter,
    by_id: Mapping[str, BaseMessage] | None = None,
) -> BaseMessage:
    """Map a view message back to LangChain.

    The converted original comes back as the same object; an edited message (same id as an
    original in `by_id`) becomes a copy of that original with the new content; anything else
    (a fold summary) becomes a `HumanMessage` with the view message's id.
    """
    original = converter.original(message)
    if original is not None:
        return original
    base = by_id.get(message.id) if by_id is not None and message.id is not None else None
    content = _lc_content(message.content)
    if isinstance(base, AIMessage):
        return _edited_ai(base, message, content)
    if base is not None:
        return base.model_copy(update={"content": content})
    if message.role == "tool":
        return ToolMessage(
            content=content,
            tool_call_id=message.tool_call_id or "",
            name=message.name,
            id=message.id,
        )
    if message.role == "assistant":
        return AIMessage(
            content=content,
            tool_calls=[
                {"name": c.name, "args": c.parsed_arguments(), "id": c.id, "type": "tool_call"}
                for c in message.tool_calls
            ],
            id=message.id,
        )
    if message.role == "system":
        return SystemMessage(content=content, id=message.id)
    return HumanMessage(content=content, id=message.id)


def _edited_ai(base: AIMessage, message: Message, content: Any) -> AIMessage:
    """`base` as the view shows it: its content when that was edited, and the arguments of
    each tool call the view reduced (`args` edits), in every copy a provider may serialize
    (`tool_calls`, the raw `additional_kwargs["tool_calls"]`, `tool_use` / `function_call` /
    `tool_call` content blocks). Ids, names and the calls' order stay, so pairing holds."""
    arguments = {
        c.id: c.arguments
        for c, old in zip(message.tool_calls, base.tool_calls, strict=False)
        if c.id and c.arguments != _arguments(old)
    }
    update: dict[str, Any] = {}
    if message.content != _parts(base.content):
        update["content"] = content
    if not arguments:
        return base.model_copy(update=update) if update else base
    parsed = {k: _parsed(v) for k, v in arguments.items()}
    update["tool_calls"] = [
        {**c, "args": parsed[str(c.get("id"))]} if c.get("id") in parsed else c
        for c in base.tool_calls
    ]
    raw = base.additional_kwargs.get("tool_calls")
    if isinstance(raw, list):
        update["additional_kwargs"] = {
            **base.additional_kwargs,
            "tool_calls": [_raw_call(c, arguments) for c in raw],
        }
    blocks = update.get("content", base.content)
    if isinstance(blocks, list):
        update["content"] = [_call_block(b, arguments, parsed) for b in blocks]
    return base.model_copy(update=update)


def _parsed(arguments: str) -> Any:
    """Reduced arguments as LangChain's `args` (a JSON object; other text as it is)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


def _raw_call(call: object, arguments: Mapping[str, str]) -> object:
    """An OpenAI-style raw tool call with its reduced arguments."""
    if not isinstance(call, Mapping) or call.get("id") not in arguments:
        return call
    function = call.get("function")
    if not isinstance(function, Mapping):
        return call
    return {**call, "function": {**function, "arguments": arguments[str(call["id"])]}}


def _call_block(block: object, arguments: Mapping[str, str], parsed: Mapping[str, Any]) -> object:
    """A provider content block of a tool call with its reduced arguments."""
    if not isinstance(block, Mapping):
        return block
    kind = block.get("type")
    if kind == "tool_use" and block.get("id") in parsed:  # Anthropic
        return {**block, "input": parsed[str(block["id"])]}
    if kind == "tool_call" and block.get("id") in parsed:  # LangChain standard blocks
        return {**block, "args": parsed[str(block["id"])]}
    if kind == "function_call" and block.get("call_id") in arguments:  # OpenAI Responses
        return {**block, "arguments": arguments[str(block["call_id"])]}
    return block


_SCHEMA_MEMO: OrderedDict[int, tuple[object, dict[str, Any]]] = OrderedDict()
_SCHEMA_LOCK = threading.Lock()


def tool_schema(tool: BaseTool | Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI function schema of a LangChain tool (memoised per tool object).

    Provider built-in tools given as dicts without a function shape are returned as copies.
    """
    with _SCHEMA_LOCK:
        hit = _SCHEMA_MEMO.get(id(tool))
        if hit is not None and hit[0] is tool:
            return hit[1]
    if isinstance(tool, Mapping) and "function" not in tool and "name" not in tool:
        schema: dict[str, Any] = dict(tool)
    else:
        try:
            schema = dict(convert_to_openai_tool(tool))
        except Exception:
            logger.warning("cannot convert tool %r to a schema; using its name only", tool)
            name = getattr(tool, "name", None) or (
                tool.get("name") if isinstance(tool, Mapping) else None
            )
            schema = {"type": "function", "function": {"name": str(name or "tool")}}
    with _SCHEMA_LOCK:
        _SCHEMA_MEMO[id(tool)] = (tool, schema)
        while len(_SCHEMA_MEMO) > 2_000:
            _SCHEMA_MEMO.popitem(last=False)
    return schema


def tool_name_of(tool: BaseTool | Mapping[str, Any]) -> str:
    """The name a tool is bound under."""
    if isinstance(tool, BaseTool):
        return tool.name
    from cachepilot.canonical import tool_name

    return tool_name(tool_schema(tool))


def ordered(tools: Sequence[BaseTool | Mapping[str, Any]], names: Sequence[str]) -> list[Any]:
    """`tools` in the order of `names` (unknown names skipped, unnamed tools kept at the end)."""
    by_name: dict[str, BaseTool | Mapping[str, Any]] = {}
    for tool in tools:
        by_name.setdefault(tool_name_of(tool), tool)
    out: list[Any] = [by_name.pop(n) for n in names if n in by_name]
    out.extend(by_name.values())
    return out

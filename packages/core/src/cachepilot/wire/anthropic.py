"""Anthropic Messages bodies read into neutral messages, with their `cache_control` marks;
replies, streams and usage blocks written.

Conversion never raises on odd content: unknown blocks are kept as JSON text (they are part
of the prefix the provider saw); only a body without a `messages` list raises `WireError`.
Writing is deterministic: the same reply and ids give byte-identical bodies and streams.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.usage import Usage
from cachepilot.wire._common import WireError
from cachepilot.wire._common import simplify as join_content
from cachepilot.wire.sse import STREAM_PIECE_CHARS

__all__ = [
    "MAX_CACHE_MARKS",
    "anthropic_blocks",
    "anthropic_events",
    "anthropic_message",
    "anthropic_tool",
    "anthropic_usage",
    "block_marks",
    "cache_mark_count",
    "read_anthropic",
]


def _anthropic_parts(blocks: Sequence[Any]) -> list[ContentPart]:
    parts: list[ContentPart] = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(TextPart(block))
            continue
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(str(block.get("text", ""))))
        elif kind == "image":
            source = block.get("source")
            source = source if isinstance(source, Mapping) else {}
            if source.get("type") == "base64":
                media = str(source.get("media_type") or "image/png")
                url = f"data:{media};base64,{source.get('data', '')}"
                parts.append(ImagePart(url=url, media_type=media))
            else:
                parts.append(ImagePart(url=str(source.get("url", ""))))
        elif kind == "thinking":
            signature = block.get("signature")
            parts.append(
                ReasoningPart(
                    str(block.get("thinking", "")),
                    signature if isinstance(signature, str) else None,
                )
            )
        elif kind == "redacted_thinking":
            parts.append(ReasoningPart("", str(block.get("data", "")) or None))
        else:
            body = {k: v for k, v in block.items() if k != "cache_control"}
            parts.append(TextPart(json.dumps(body, ensure_ascii=False, default=str)))
    return parts


MAX_CACHE_MARKS = 4
"""Breakpoints one Messages request may carry (the API rejects a fifth)."""


def _marked(block: object) -> bool:
    return isinstance(block, Mapping) and bool(block.get("cache_control"))


def block_marks(block: object) -> int:
    """`cache_control` marks one content block carries: its own, plus those of the blocks
    nested in a `tool_result` (the API counts every marked block)."""
    if not isinstance(block, Mapping):
        return 0
    count = 1 if block.get("cache_control") else 0
    inner = block.get("content") if block.get("type") == "tool_result" else None
    if isinstance(inner, list):
        count += sum(1 for b in inner if _marked(b))
    return count


def cache_mark_count(body: Mapping[str, Any]) -> int:
    """`cache_control` marks of a Messages request body, counted as the API counts them:
    every marked system block, tool definition and message content block (blocks nested in a
    `tool_result` too), plus the request-level one (automatic caching takes a slot)."""
    count = 1 if body.get("cache_control") else 0
    for key in ("system", "tools"):
        blocks = body.get(key)
        if isinstance(blocks, list):
            count += sum(1 for b in blocks if _marked(b))
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            count += sum(block_marks(b) for b in content)
    return count


def read_anthropic(
    body: Mapping[str, Any],
) -> tuple[str | None, list[Message], list[int] | None]:
    """System prompt, messages and cache breakpoints of a Messages request body.

    Breakpoints are the indices of the messages carrying a `cache_control` mark (-1 for the
    system prompt). Tool results become tool messages; the other blocks of a user turn stay
    one user message after them.

    Raises:
        WireError: when the body has no `messages` list.
    """
    breakpoints: set[int] = set()
    raw_system = body.get("system")
    system: str | None = None
    if isinstance(raw_system, str):
        system = raw_system
    elif isinstance(raw_system, list):
        texts = []
        for block in raw_system:
            if isinstance(block, Mapping):
                texts.append(str(block.get("text", "")))
                if "cache_control" in block:
                    breakpoints.add(-1)
        system = "\n\n".join(texts)
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise WireError("an Anthropic body needs a 'messages' list", "messages")
    messages: list[Message] = []
    names: dict[str, str] = {}
    for raw in raw_messages:
        if not isinstance(raw, Mapping):
            continue
        role = raw.get("role")
        content = raw.get("content")
        blocks: list[Any] = [content] if isinstance(content, str) else list(content or ())
        marked = any(isinstance(b, Mapping) and "cache_control" in b for b in blocks)
        if role == "assistant":
            calls: list[ToolCall] = []
            others: list[Any] = []
            for block in blocks:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
                    call = ToolCall(str(block.get("id", "")), str(block.get("name", "")), arguments)
                    calls.append(call)
                    names[call.id] = call.name
                else:
                    others.append(block)
            messages.append(
                Message(
                    role="assistant",
                    content=join_content(_anthropic_parts(others)),
                    tool_calls=tuple(calls),
                )
            )
            if marked:
                breakpoints.add(len(messages) - 1)
            continue
        rest: list[Any] = []
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id") or "unknown")
                inner = block.get("content")
                result: str | tuple[ContentPart, ...]
                if isinstance(inner, list):
                    result = join_content(_anthropic_parts(inner))
                else:
                    result = "" if inner is None else str(inner)
                messages.append(
                    Message(
                        role="tool", content=result, tool_call_id=call_id, name=names.get(call_id)
                    )
                )
                if "cache_control" in block:
                    breakpoints.add(len(messages) - 1)
            else:
                rest.append(block)
        if rest or not blocks:
            messages.append(Message(role="user", content=join_content(_anthropic_parts(rest))))
            if any(isinstance(b, Mapping) and "cache_control" in b for b in rest):
                breakpoints.add(len(messages) - 1)
    return system, messages, sorted(breakpoints) or None


# --------------------------------------------------------------------------- writing


def anthropic_blocks(message: Message) -> list[dict[str, Any]]:
    """The content blocks of a neutral message: thinking, text, images, then `tool_use`.

    A tool message is written as its result's content (text and image blocks); wrap it in a
    `tool_result` block to send it.
    """
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ReasoningPart):
            if not part.text and part.signature:
                blocks.append({"type": "redacted_thinking", "data": part.signature})
                continue
            block: dict[str, Any] = {"type": "thinking", "thinking": part.text}
            if part.signature is not None:
                block["signature"] = part.signature
            blocks.append(block)
        elif isinstance(part, ImagePart):
            if part.url.startswith("data:") and ";base64," in part.url:
                media, data = part.url[5:].split(";base64,", 1)
                source: dict[str, Any] = {"type": "base64", "media_type": media, "data": data}
            else:
                source = {"type": "url", "url": part.url}
            blocks.append({"type": "image", "source": source})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _input_of(call)}
        )
    return blocks


def _input_of(call: ToolCall) -> Any:
    """The call's arguments as the JSON value Anthropic carries in `input` (an object)."""
    try:
        value = json.loads(call.arguments)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def anthropic_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function-tool schema (nested or flat) as an Anthropic tool definition."""
    function = schema.get("function")
    spec: Mapping[str, Any] = function if isinstance(function, Mapping) else schema
    out: dict[str, Any] = {"name": str(spec.get("name", ""))}
    if spec.get("description"):
        out["description"] = str(spec["description"])
    parameters = spec.get("parameters")
    out["input_schema"] = (
        dict(parameters) if isinstance(parameters, Mapping) else {"type": "object"}
    )
    return out


def anthropic_usage(usage: Usage) -> dict[str, Any]:
    """Messages `usage` block: `input_tokens` counts only the tokens neither read nor written."""
    return {
        "input_tokens": usage.uncached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.output_tokens,
    }


def _stop_reason(reply: Message) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def anthropic_message(
    reply: Message, *, id: str, model: str, usage: Mapping[str, Any]
) -> dict[str, Any]:
    """A Messages response body carrying `reply` (thinking, text and tool calls, ids kept)."""
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": anthropic_blocks(reply) or [{"type": "text", "text": ""}],
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": dict(usage),
    }


def _pieces(text: str, size: int = STREAM_PIECE_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def anthropic_events(
    reply: Message, *, id: str, model: str, usage: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The Messages streaming events of `reply`.

    `message_start` (the input side of the usage), per content block `content_block_start`,
    its deltas (`thinking_delta` and `signature_delta`, `text_delta`, `input_json_delta`) and
    `content_block_stop`, then `message_delta` (stop reason and the whole usage) and
    `message_stop`.
    """
    final = anthropic_message(reply, id=id, model=model, usage=usage)
    start_usage = {**dict(usage), "output_tokens": 0}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**final, "content": [], "stop_reason": None,
                                              "usage": start_usage}},
    ]  # fmt: skip
    for index, block in enumerate(final["content"]):
        kind = block["type"]
        if kind == "text":
            events.append(
                {"type": "content_block_start", "index": index,
                 "content_block": {"type": "text", "text": ""}}
            )  # fmt: skip
            events.extend(
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "text_delta", "text": piece}}
                for piece in _pieces(block["text"])
            )  # fmt: skip
        elif kind == "thinking":
            events.append(
                {"type": "content_block_start", "index": index,
                 "content_block": {"type": "thinking", "thinking": "", "signature": ""}}
            )  # fmt: skip
            events.extend(
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "thinking_delta", "thinking": piece}}
                for piece in _pieces(block["thinking"])
            )  # fmt: skip
            if block.get("signature"):
                events.append(
                    {"type": "content_block_delta", "index": index,
                     "delta": {"type": "signature_delta", "signature": block["signature"]}}
                )  # fmt: skip
        elif kind == "tool_use":
            events.append(
                {"type": "content_block_start", "index": index,
                 "content_block": {**block, "input": {}}}
            )  # fmt: skip
            arguments = json.dumps(block["input"], ensure_ascii=False, separators=(",", ":"))
            events.extend(
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "input_json_delta", "partial_json": piece}}
                for piece in _pieces(arguments)
            )  # fmt: skip
        else:  # redacted thinking, images: whole in their start event
            events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {"type": "message_delta",
         "delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
         "usage": dict(usage)}
    )  # fmt: skip
    events.append({"type": "message_stop"})
    return events

"""Anthropic Messages bodies read into neutral messages, with their `cache_control` marks.

Conversion never raises on odd content: unknown blocks are kept as JSON text (they are part
of the prefix the provider saw); only a body without a `messages` list raises `WireError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.wire._common import WireError
from cachepilot.wire._common import simplify as join_content

__all__ = ["read_anthropic"]


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

"""Neutral messages rendered as provider request bodies (OpenAI Chat, Anthropic Messages).

The request logs `audit` reads carry such bodies; `cachepilot_bench.request_logs` writes
them from recorded sessions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart

__all__ = ["anthropic_body", "chat_body"]


def _chat_content(message: Message) -> Any:
    if isinstance(message.content, str):
        return message.content
    blocks: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append({"type": "image_url", "image_url": {"url": part.url}})
    return blocks


def chat_body(
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] = (),
    *,
    model: str | None = None,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An OpenAI Chat Completions request body."""
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    for m in messages:
        entry: dict[str, Any] = {"role": m.role, "content": _chat_content(m)}
        reasoning = [p.text for p in m.parts if isinstance(p, ReasoningPart) and p.text]
        if reasoning:
            entry["reasoning_content"] = "\n".join(reasoning)
        if m.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
        if m.role == "tool":
            entry["tool_call_id"] = m.tool_call_id
            if m.name:
                entry["name"] = m.name
        out.append(entry)
    body: dict[str, Any] = {"model": model or "unknown", "messages": out}
    if tools:
        body["tools"] = list(tools)
    if metadata:
        body["metadata"] = dict(metadata)
    return body


def _anthropic_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ReasoningPart):
            block: dict[str, Any] = {"type": "thinking", "thinking": part.text}
            if part.signature:
                block["signature"] = part.signature
            blocks.append(block)
        elif isinstance(part, ImagePart):
            if part.url.startswith("data:") and ";base64," in part.url:
                media, data = part.url[5:].split(";base64,", 1)
                source = {"type": "base64", "media_type": media, "data": data}
            else:
                source = {"type": "url", "url": part.url}
            blocks.append({"type": "image", "source": source})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.parsed_arguments()}
        )
    return blocks


def anthropic_body(
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] = (),
    *,
    model: str | None = None,
    metadata: dict[str, str] | None = None,
    cache_control: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An Anthropic Messages request body (parallel tool results in one user turn).

    Args:
        cache_control: when given, the mark set on the end of the header (the system
            prompt; the last tool when there is none) and on the last block of the last
            message, as Claude Code marks its requests (without it the request asks for no
            caching, and Anthropic caches nothing). A recorded session without its system
            prompt still had one, marked: without the header mark a rewrite of the first
            message would write the whole header again.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            out.append({"role": "assistant", "content": _anthropic_blocks(m)})
            continue
        if m.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content if isinstance(m.content, str) else _anthropic_blocks(m),
            }
            blocks = [block]
        else:
            blocks = _anthropic_blocks(m) or [{"type": "text", "text": ""}]
        previous = out[-1] if out else None
        # Parallel tool results share one user turn; any other message opens a turn of its own.
        if (
            m.role == "tool"
            and previous is not None
            and previous["role"] == "user"
            and all(b.get("type") == "tool_result" for b in previous["content"])
        ):
            previous["content"].extend(blocks)
        else:
            out.append({"role": "user", "content": blocks})
    body: dict[str, Any] = {"model": model or "unknown", "max_tokens": 4096, "messages": out}
    if system is not None:
        body["system"] = system
    if cache_control is not None:
        if system:
            body["system"] = [
                {"type": "text", "text": system, "cache_control": dict(cache_control)}
            ]
        if out and out[-1]["content"]:
            last = out[-1]["content"][-1]
            out[-1]["content"][-1] = {**last, "cache_control": dict(cache_control)}
    if tools:
        body["tools"] = [
            {
                "name": t.get("function", t).get("name"),
                "description": t.get("function", t).get("description", ""),
                "input_schema": t.get("function", t).get("parameters", {}),
            }
            for t in tools
        ]
        if cache_control is not None and not system:
            body["tools"][-1]["cache_control"] = dict(cache_control)
    if metadata:
        body["metadata"] = dict(metadata)
    return body

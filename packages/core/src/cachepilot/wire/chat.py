"""OpenAI Chat Completions bodies: requests read into neutral messages, replies written.

Reading is strict for the replay provider (a body the API would reject raises `WireError`)
and lenient for the audit (`strict=False`: odd roles, parts and calls are read as well as
they can be). Writing is deterministic: the same reply and ids give byte-identical bodies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.sim.render import Request
from cachepilot.usage import Usage
from cachepilot.wire._common import (
    SYSTEM_ROLES,
    Reader,
    WireError,
    as_parts,
    canonical,
    model_of,
    simplify,
    text_of,
)
from cachepilot.wire.sse import STREAM_PIECE_CHARS

__all__ = [
    "chat_chunks",
    "chat_completion",
    "chat_message",
    "chat_messages",
    "chat_usage",
    "read_chat",
    "request_from_chat",
]


# --------------------------------------------------------------------------- reading


def _part(part: Any, where: str, reader: Reader) -> ContentPart | None:
    if isinstance(part, str):
        return TextPart(part)
    data = reader.obj(part, where)
    if data is None:
        return None
    kind = data.get("type")
    if kind == "text" or (not reader.strict and kind in ("input_text", "output_text")):
        return TextPart(reader.string(data.get("text"), f"{where}.text", default=""))
    if kind == "image_url":
        image = data.get("image_url")
        if isinstance(image, str):
            return ImagePart(url=image)
        found = reader.obj(image, f"{where}.image_url")
        if found is None:
            return ImagePart(url="")
        detail = found.get("detail")
        return ImagePart(
            url=reader.string(found.get("url"), f"{where}.image_url.url", default=reader.default),
            detail=detail if isinstance(detail, str) else None,
        )
    if kind == "refusal":
        return TextPart(reader.string(data.get("refusal"), f"{where}.refusal", default=""))
    if not reader.strict and kind in ("reasoning", "thinking"):
        return ReasoningPart(str(data.get("text") or data.get("thinking") or ""))
    # Audio, files and future part types still occupy the prompt: count them as their JSON.
    return TextPart(canonical(data))


def _content(value: Any, where: str, reader: Reader) -> str | tuple[ContentPart, ...]:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [_part(p, f"{where}[{i}]", reader) for i, p in enumerate(value)]
        return simplify([p for p in parts if p is not None])
    reader.fail(f"{where} must be a string or a list of parts", where)
    return canonical(value)


def _tool_calls(value: Any, where: str, reader: Reader) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.fail(f"{where} must be a list", where)
        return ()
    calls = []
    for i, raw in enumerate(value):
        call = reader.obj(raw, f"{where}[{i}]")
        if call is None:
            continue
        function = reader.obj(call.get("function"), f"{where}[{i}].function") or {}
        arguments = function.get("arguments", call.get("arguments", "{}"))
        if not isinstance(arguments, str):  # some clients send an object; keep it as JSON
            arguments = canonical(arguments)
        name = function.get("name", call.get("name")) if not reader.strict else function.get("name")
        call_id = call.get("id")
        if not reader.strict and not call_id:
            call_id = f"call_{i}"
        calls.append(
            ToolCall(
                id=reader.string(call_id, f"{where}[{i}].id"),
                name=reader.string(name, f"{where}[{i}].function.name", default=reader.default),
                arguments=arguments,
            )
        )
    return tuple(calls)


def chat_message(
    data: Mapping[str, Any], where: str, names: dict[str, str], reader: Reader
) -> Message:
    """One Chat Completions message as a neutral message (system/developer keep role system).

    `names` maps the ids of the tool calls seen so far to their tool names (updated).
    """
    role = data.get("role")
    content = _content(data.get("content"), f"{where}.content", reader)
    if role in SYSTEM_ROLES:
        return Message(role="system", content=content)
    if role == "user":
        return Message(role="user", content=content)
    if role == "assistant":
        calls = _tool_calls(data.get("tool_calls"), f"{where}.tool_calls", reader)
        names.update((c.id, c.name) for c in calls)
        reasoning = data.get("reasoning_content")
        if not reader.strict and not reasoning:
            reasoning = data.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            content = (ReasoningPart(reasoning), *as_parts(content))
        return Message(role="assistant", content=content, tool_calls=calls)
    if role == "tool" or (not reader.strict and role == "function"):
        raw_id = data.get("tool_call_id")
        if not reader.strict and not raw_id:
            raw_id = data.get("name") or "unknown"
        call_id = reader.string(raw_id, f"{where}.tool_call_id")
        if not call_id:
            raise WireError(f"{where}.tool_call_id must not be empty", f"{where}.tool_call_id")
        name = names.get(call_id)
        if not reader.strict and isinstance(data.get("name"), str) and data.get("name"):
            name = data["name"]
        return Message(role="tool", content=content, tool_call_id=call_id, name=name)
    reader.fail(f"{where}.role {role!r} is not supported", f"{where}.role")
    return Message(role="user", content=json.dumps(dict(data), ensure_ascii=False, default=str))


def read_chat(
    body: Mapping[str, Any], *, strict: bool = True
) -> tuple[str | None, list[Message], tuple[Mapping[str, Any], ...]]:
    """System prompt, messages and tools of a Chat Completions request body.

    Leading `system`/`developer` messages become the system prompt (joined by a blank line);
    later ones stay in the conversation as system messages. Tool messages get the name of
    the call they answer. Tools are kept as received, in the order received.

    Raises:
        WireError: when the body is not a Chat Completions request (lenient mode: only when
            it has no `messages` list).
    """
    reader = Reader(strict)
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise WireError("messages must be a list of message objects", "messages")
    system: list[str] = []
    messages: list[Message] = []
    names: dict[str, str] = {}
    for i, raw in enumerate(raw_messages):
        where = f"messages[{i}]"
        data = reader.obj(raw, where)
        if data is None:
            continue
        message = chat_message(data, where, names, reader)
        if message.role == "system" and not messages:
            system.append(text_of(message.content))
        else:
            messages.append(message)
    return ("\n\n".join(system) if system else None), messages, reader.tools(body)


def request_from_chat(body: Mapping[str, Any], *, timestamp: float | None = None) -> Request:
    """A Chat Completions request body as the simulator's `Request` (strict reading).

    Raises:
        WireError: when the body is not a Chat Completions request.
    """
    system, messages, tools = read_chat(body)
    return Request(
        system=system, messages=messages, tools=tools, timestamp=timestamp, model=model_of(body)
    )


# --------------------------------------------------------------------------- writing


def _parts_out(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            image: dict[str, Any] = {"url": part.url}
            if part.detail is not None:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def chat_messages(system: str | None, messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Neutral messages as a Chat Completions `messages` list (reasoning parts left out).

    `request_from_chat({"messages": chat_messages(s, m)})` renders the same prompt as
    `Request(s, m)` for messages without reasoning parts.
    """
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    for message in messages:
        content = (
            tuple(p for p in message.content if not isinstance(p, ReasoningPart))
            if isinstance(message.content, tuple)
            else message.content
        )
        entry: dict[str, Any] = {"role": message.role, "content": _parts_out(content)}
        if message.role == "assistant" and message.tool_calls:
            entry["tool_calls"] = [_call_out(call) for call in message.tool_calls]
            if not entry["content"]:
                entry["content"] = None
        if message.role == "tool":
            entry["tool_call_id"] = message.tool_call_id
        out.append(entry)
    return out


def _call_out(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def chat_usage(usage: Usage, *, report_writes: bool = False) -> dict[str, Any]:
    """Chat Completions `usage` block (`prompt_tokens_details.cached_tokens` etc.).

    Args:
        usage: the usage to report.
        report_writes: add `prompt_tokens_details.cache_write_tokens` (for profiles that
            bill cache writes; OpenAI's automatic caching reports none).
    """
    details: dict[str, Any] = {"cached_tokens": usage.cached_tokens, "audio_tokens": 0}
    if report_writes:
        details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": usage.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _pieces(text: str, size: int = STREAM_PIECE_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _finish_reason(reply: Message) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def chat_completion(
    reply: Message, *, id: str, model: str, created: int, usage: Mapping[str, Any]
) -> dict[str, Any]:
    """A `chat.completion` body carrying `reply` (its text and tool calls, ids kept)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text if (reply.text or not reply.tool_calls) else None,
        "refusal": None,
        "annotations": [],
    }
    if reply.tool_calls:
        message["tool_calls"] = [_call_out(call) for call in reply.tool_calls]
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(reply),
            }
        ],
        "usage": dict(usage),
        "service_tier": "default",
        "system_fingerprint": None,
    }


def chat_chunks(
    reply: Message,
    *,
    id: str,
    model: str,
    created: int,
    usage: Mapping[str, Any],
    include_usage: bool,
) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` stream of `reply`.

    A role chunk, text deltas, tool-call deltas (id and name first, then arguments, each
    with its index), a finish chunk. With `include_usage` (`stream_options.include_usage`)
    a last chunk with no choices carries the usage, as OpenAI sends it; without it the
    usage rides on the finish chunk, so clients that never ask for it (LangChain's
    `ChatOpenAI` on a custom base URL) still see what the request cost.
    """

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    out.extend(chunk({"content": piece}) for piece in _pieces(reply.text))
    for index, call in enumerate(reply.tool_calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        out.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(call.arguments)
        )
    finish = chunk({}, _finish_reason(reply))
    if include_usage:
        out.append(finish)
        last = chunk({})
        last["choices"] = []
        last["usage"] = dict(usage)
        out.append(last)
    else:
        finish["usage"] = dict(usage)
        out.append(finish)
    return out

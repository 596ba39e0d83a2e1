"""OpenAI wire formats for the replay provider: request bodies in, reply bodies out.

Reading turns a Chat Completions or Responses request body into the simulator's `Request`
(system prompt, neutral messages, tool schemas as received), so the simulated cache sees
exactly what a framework serialized. Writing builds the reply bodies, streaming events and
usage blocks in the shapes the `openai` client parses.

Everything here is deterministic: the same reply and ids give byte-identical bodies, which
keeps recorded cassettes stable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.sim.render import Request
from cachepilot.usage import Usage

__all__ = [
    "STREAM_PIECE_CHARS",
    "Api",
    "WireError",
    "chat_chunks",
    "chat_completion",
    "chat_messages",
    "chat_usage",
    "dumps",
    "error_body",
    "request_from_chat",
    "request_from_responses",
    "responses_events",
    "responses_input",
    "responses_items",
    "responses_object",
    "responses_usage",
    "sse",
]

Api: TypeAlias = Literal["chat", "responses"]

STREAM_PIECE_CHARS = 48
"""Characters per streamed text or argument delta (fixed, so streams are deterministic)."""

_SYSTEM_ROLES = ("system", "developer")


class WireError(ValueError):
    """A request body the replay provider cannot read (answered with HTTP 400).

    Attributes:
        param: the offending request parameter, when one can be named.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _simplify(parts: Sequence[ContentPart]) -> str | tuple[ContentPart, ...]:
    """A lone text part becomes a plain string (both render the same tokens)."""
    if not parts:
        return ""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


def _text_of(content: str | tuple[ContentPart, ...]) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if isinstance(p, TextPart))


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WireError(f"{where} must be a JSON object, not {type(value).__name__}", where)
    return value


def _string(value: Any, where: str, *, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise WireError(f"{where} must be a string, not {type(value).__name__}", where)
    return value


def _tools(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    raw = body.get("tools")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise WireError("tools must be a list", "tools")
    return tuple(_object(tool, f"tools[{i}]") for i, tool in enumerate(raw))


def _model(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    return model if isinstance(model, str) else None


# --------------------------------------------------------------------------- chat in


def _chat_part(part: Any, where: str) -> ContentPart:
    if isinstance(part, str):
        return TextPart(part)
    data = _object(part, where)
    kind = data.get("type")
    if kind == "text":
        return TextPart(_string(data.get("text"), f"{where}.text", default=""))
    if kind == "image_url":
        image = data.get("image_url")
        if isinstance(image, str):
            return ImagePart(url=image)
        image = _object(image, f"{where}.image_url")
        detail = image.get("detail")
        return ImagePart(
            url=_string(image.get("url"), f"{where}.image_url.url"),
            detail=detail if isinstance(detail, str) else None,
        )
    if kind == "refusal":
        return TextPart(_string(data.get("refusal"), f"{where}.refusal", default=""))
    # Audio, files and future part types still occupy the prompt: count them as their JSON.
    return TextPart(_canonical(data))


def _chat_content(value: Any, where: str) -> str | tuple[ContentPart, ...]:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _simplify([_chat_part(p, f"{where}[{i}]") for i, p in enumerate(value)])
    raise WireError(f"{where} must be a string or a list of parts", where)


def _chat_tool_calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise WireError(f"{where} must be a list", where)
    calls = []
    for i, raw in enumerate(value):
        call = _object(raw, f"{where}[{i}]")
        function = _object(call.get("function"), f"{where}[{i}].function")
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):  # some clients send an object; keep it as JSON
            arguments = _canonical(arguments)
        calls.append(
            ToolCall(
                id=_string(call.get("id"), f"{where}[{i}].id"),
                name=_string(function.get("name"), f"{where}[{i}].function.name"),
                arguments=arguments,
            )
        )
    return tuple(calls)


def request_from_chat(body: Mapping[str, Any], *, timestamp: float | None = None) -> Request:
    """A Chat Completions request body as the simulator's `Request`.

    Leading `system`/`developer` messages become the system prompt (joined by a blank line);
    later ones stay in the conversation as system messages. Tool messages get the name of
    the call they answer. Tools are kept as received, in the order received.

    Raises:
        WireError: when the body is not a Chat Completions request.
    """
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise WireError("messages must be a list of message objects", "messages")
    system: list[str] = []
    messages: list[Message] = []
    names: dict[str, str] = {}
    for i, raw in enumerate(raw_messages):
        where = f"messages[{i}]"
        data = _object(raw, where)
        role = data.get("role")
        content = _chat_content(data.get("content"), f"{where}.content")
        if role in _SYSTEM_ROLES:
            if not messages:
                system.append(_text_of(content))
            else:
                messages.append(Message(role="system", content=content))
        elif role == "user":
            messages.append(Message(role="user", content=content))
        elif role == "assistant":
            calls = _chat_tool_calls(data.get("tool_calls"), f"{where}.tool_calls")
            names.update((c.id, c.name) for c in calls)
            reasoning = data.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                parts = (ReasoningPart(reasoning), *_as_parts(content))
                content = tuple(parts)
            messages.append(Message(role="assistant", content=content, tool_calls=calls))
        elif role == "tool":
            call_id = _string(data.get("tool_call_id"), f"{where}.tool_call_id")
            if not call_id:
                raise WireError(f"{where}.tool_call_id must not be empty", f"{where}.tool_call_id")
            messages.append(
                Message(role="tool", content=content, tool_call_id=call_id, name=names.get(call_id))
            )
        else:
            raise WireError(f"{where}.role {role!r} is not supported", f"{where}.role")
    return Request(
        system="\n\n".join(system) if system else None,
        messages=messages,
        tools=_tools(body),
        timestamp=timestamp,
        model=_model(body),
    )


def _as_parts(content: str | tuple[ContentPart, ...]) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),) if content else ()
    return content


# --------------------------------------------------------------------------- responses in


def _responses_part(part: Any, where: str) -> ContentPart:
    if isinstance(part, str):
        return TextPart(part)
    data = _object(part, where)
    kind = data.get("type")
    if kind in ("input_text", "output_text", "text"):
        return TextPart(_string(data.get("text"), f"{where}.text", default=""))
    if kind == "refusal":
        return TextPart(_string(data.get("refusal"), f"{where}.refusal", default=""))
    if kind == "input_image":
        url = data.get("image_url")
        if not isinstance(url, str):
            file_id = data.get("file_id")
            if not isinstance(file_id, str):
                raise WireError(f"{where} needs image_url or file_id", where)
            url = f"file:{file_id}"
        detail = data.get("detail")
        return ImagePart(url=url, detail=detail if isinstance(detail, str) else None)
    return TextPart(_canonical(data))


def _responses_content(value: Any, where: str) -> str | tuple[ContentPart, ...]:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _simplify([_responses_part(p, f"{where}[{i}]") for i, p in enumerate(value)])
    raise WireError(f"{where} must be a string or a list of parts", where)


def _reasoning_text(item: Mapping[str, Any]) -> str:
    texts: list[str] = []
    for source in ("summary", "content"):
        entries = item.get(source)
        if isinstance(entries, list):
            texts.extend(
                str(e.get("text", "")) for e in entries if isinstance(e, Mapping) and e.get("text")
            )
        if texts:  # the summary is what gets re-sent; raw content only when there is none
            break
    return "\n\n".join(texts)


class _Turn:
    """Consecutive assistant-side items (reasoning, message, calls) of one model turn."""

    def __init__(self) -> None:
        self.parts: list[ContentPart] = []
        self.calls: list[ToolCall] = []

    def empty(self) -> bool:
        return not self.parts and not self.calls

    def message(self) -> Message:
        return Message(
            role="assistant", content=_simplify(self.parts), tool_calls=tuple(self.calls)
        )


def responses_items(items: Any, where: str = "input") -> list[Message]:
    """Responses `input` (a string or a list of items) as neutral messages.

    Consecutive assistant-side items (reasoning, assistant message, function calls) form one
    assistant message, as one model turn produced them; system and developer messages stay
    messages with role `system`. Unknown item types are kept as user text (their JSON), so
    they still occupy the prompt.

    Raises:
        WireError: when an item is malformed.
    """
    if isinstance(items, str):
        return [Message(role="user", content=items)]
    if items is None:
        return []
    if not isinstance(items, list):
        raise WireError(f"{where} must be a string or a list of items", where)
    out: list[Message] = []
    turn = _Turn()
    names: dict[str, str] = {}

    def flush() -> None:
        nonlocal turn
        if not turn.empty():
            out.append(turn.message())
        turn = _Turn()

    for i, raw in enumerate(items):
        at = f"{where}[{i}]"
        item = _object(raw, at)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            content = _responses_content(item.get("content"), f"{at}.content")
            if role == "assistant":
                if turn.calls:
                    flush()
                turn.parts.extend(_as_parts(content))
                continue
            flush()
            if role in _SYSTEM_ROLES:
                out.append(Message(role="system", content=content))
            elif role == "user":
                out.append(Message(role="user", content=content))
            else:
                raise WireError(f"{at}.role {role!r} is not supported", f"{at}.role")
        elif kind == "reasoning":
            if turn.calls:
                flush()
            signature = item.get("encrypted_content")
            turn.parts.append(
                ReasoningPart(
                    text=_reasoning_text(item),
                    signature=signature if isinstance(signature, str) else None,
                )
            )
        elif kind in ("function_call", "custom_tool_call"):
            field = "arguments" if kind == "function_call" else "input"
            arguments = item.get(field, "{}")
            if not isinstance(arguments, str):
                arguments = _canonical(arguments)
            call = ToolCall(
                id=_string(item.get("call_id"), f"{at}.call_id"),
                name=_string(item.get("name"), f"{at}.name"),
                arguments=arguments,
            )
            names[call.id] = call.name
            turn.calls.append(call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            flush()
            call_id = _string(item.get("call_id"), f"{at}.call_id")
            if not call_id:
                raise WireError(f"{at}.call_id must not be empty", f"{at}.call_id")
            out.append(
                Message(
                    role="tool",
                    content=_responses_content(item.get("output"), f"{at}.output"),
                    tool_call_id=call_id,
                    name=names.get(call_id),
                )
            )
        else:
            flush()
            out.append(Message(role="user", content=_canonical(item)))
    flush()
    return out


def request_from_responses(
    body: Mapping[str, Any],
    *,
    history: Sequence[Message] = (),
    timestamp: float | None = None,
) -> Request:
    """A Responses request body as the simulator's `Request`.

    `instructions` and the leading system/developer messages of the conversation form the
    system prompt (joined by a blank line). `history` is the conversation a
    `previous_response_id` stands for (its input and output), placed before `input`.

    Raises:
        WireError: when the body is not a Responses request.
    """
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str | list):
        raise WireError("instructions must be a string", "instructions")
    head: list[str] = []
    conversation = [*history, *responses_items(body.get("input"))]
    if isinstance(instructions, list):  # a list of input items (prompt templates)
        conversation = [*responses_items(instructions, "instructions"), *conversation]
    elif instructions:
        head.append(instructions)
    index = 0
    while index < len(conversation) and conversation[index].role == "system":
        head.append(conversation[index].text)
        index += 1
    return Request(
        system="\n\n".join(head) if head else None,
        messages=conversation[index:],
        tools=_tools(body),
        timestamp=timestamp,
        model=_model(body),
    )


# --------------------------------------------------------------------------- neutral -> wire


def _chat_parts_out(content: str | tuple[ContentPart, ...]) -> str | list[dict[str, Any]]:
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
        entry: dict[str, Any] = {"role": message.role, "content": _chat_parts_out(content)}
        if message.role == "assistant" and message.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
            if not entry["content"]:
                entry["content"] = None
        if message.role == "tool":
            entry["tool_call_id"] = message.tool_call_id
        out.append(entry)
    return out


def _responses_parts_out(content: str | tuple[ContentPart, ...], role: str) -> list[dict[str, Any]]:
    text_type = "output_text" if role == "assistant" else "input_text"
    parts: list[dict[str, Any]] = []
    for part in _as_parts(content):
        if isinstance(part, TextPart):
            entry: dict[str, Any] = {"type": text_type, "text": part.text}
            if role == "assistant":
                entry["annotations"] = []
            parts.append(entry)
        elif isinstance(part, ImagePart):
            parts.append(
                {"type": "input_image", "image_url": part.url, "detail": part.detail or "auto"}
            )
    return parts


def responses_input(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Neutral messages as a Responses `input` item list.

    An assistant message becomes its reasoning items, one assistant message item (when it
    has text) and one `function_call` item per call; a tool message a
    `function_call_output`. `responses_items` reads it back to equivalent messages.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content
                    if isinstance(message.content, str)
                    else _responses_parts_out(message.content, "user"),
                }
            )
            continue
        if message.role != "assistant":
            role = message.role
            content: Any = (
                message.content
                if isinstance(message.content, str)
                else _responses_parts_out(message.content, role)
            )
            out.append({"type": "message", "role": role, "content": content})
            continue
        visible: list[ContentPart] = []
        for part in message.parts:
            if isinstance(part, ReasoningPart):
                if visible:
                    out.append(_assistant_item(visible))
                    visible = []
                item: dict[str, Any] = {
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
                }
                if part.signature is not None:
                    item["encrypted_content"] = part.signature
                out.append(item)
            else:
                visible.append(part)
        if visible:
            out.append(_assistant_item(visible))
        out.extend(
            {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
            for c in message.tool_calls
        )
    return out


def _assistant_item(parts: Sequence[ContentPart]) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": _responses_parts_out(tuple(parts), "assistant"),
    }


# --------------------------------------------------------------------------- usage out


def chat_usage(usage: Usage, *, report_writes: bool = False) -> dict[str, Any]:
    """Chat Completions `usage` block (`prompt_tokens_details.cached_tokens` etc.).

    Args:
        usage: the simulated usage.
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


def responses_usage(usage: Usage) -> dict[str, Any]:
    """Responses `usage` block (`input_tokens_details.cached_tokens` etc.)."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def error_body(
    message: str, *, kind: str = "invalid_request_error", param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-shaped error body (`{"error": {...}}`)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


# --------------------------------------------------------------------------- chat out


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
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
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


# --------------------------------------------------------------------------- responses out


def _output_items(reply: Message, prefix: str) -> list[dict[str, Any]]:
    """The completed output items of `reply`: reasoning, message, function calls."""
    items: list[dict[str, Any]] = []
    for k, part in enumerate(p for p in reply.parts if isinstance(p, ReasoningPart)):
        item: dict[str, Any] = {
            "id": f"rs_{prefix}_{k}",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
            "status": "completed",
        }
        if part.signature is not None:
            item["encrypted_content"] = part.signature
        items.append(item)
    if reply.text or not reply.tool_calls:
        items.append(
            {
                "id": f"msg_{prefix}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    items.extend(
        {
            "id": f"fc_{prefix}_{k}",
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }
        for k, call in enumerate(reply.tool_calls)
    )
    return items


def responses_object(
    reply: Message | None,
    *,
    id: str,
    model: str,
    created: float,
    usage: Mapping[str, Any] | None,
    body: Mapping[str, Any],
) -> dict[str, Any]:
    """A `response` object; `reply=None` gives the in-progress snapshot (no output, no usage)."""
    done = reply is not None
    return {
        "id": id,
        "object": "response",
        "created_at": created,
        "status": "completed" if done else "in_progress",
        "completed_at": created if done else None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": _output_items(reply, id.removeprefix("resp_")) if reply is not None else [],
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": bool(body.get("store", False)),
        "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": list(body.get("tools") or []),
        "top_p": body.get("top_p"),
        "truncation": body.get("truncation", "disabled"),
        "usage": dict(usage) if usage is not None else None,
        "metadata": body.get("metadata") or {},
    }


def responses_events(
    reply: Message,
    *,
    id: str,
    model: str,
    created: float,
    usage: Mapping[str, Any],
    body: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The Responses streaming events of `reply`, numbered by `sequence_number`.

    `response.created`, `response.in_progress`, then per output item `output_item.added`,
    its deltas (reasoning summary text, output text, function-call arguments) and
    `output_item.done`, then `response.completed` with the full response and its usage.
    """
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    snapshot = responses_object(None, id=id, model=model, created=created, usage=None, body=body)
    emit("response.created", response=snapshot)
    emit("response.in_progress", response=snapshot)
    final = responses_object(reply, id=id, model=model, created=created, usage=usage, body=body)
    for index, item in enumerate(final["output"]):
        item_id = item["id"]
        kind = item["type"]
        if kind == "reasoning":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "summary": [], "status": "in_progress"},
            )
            for s, summary in enumerate(item["summary"]):
                where = {"item_id": item_id, "output_index": index, "summary_index": s}
                emit(
                    "response.reasoning_summary_part.added",
                    **where,
                    part={"type": "summary_text", "text": ""},
                )
                for piece in _pieces(summary["text"]):
                    emit("response.reasoning_summary_text.delta", **where, delta=piece)
                emit("response.reasoning_summary_text.done", **where, text=summary["text"])
                emit("response.reasoning_summary_part.done", **where, part=summary)
        elif kind == "message":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "content": [], "status": "in_progress"},
            )
            for c, part in enumerate(item["content"]):
                where = {"item_id": item_id, "output_index": index, "content_index": c}
                emit(
                    "response.content_part.added",
                    **where,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
                for piece in _pieces(part["text"]):
                    emit("response.output_text.delta", **where, delta=piece, logprobs=[])
                emit("response.output_text.done", **where, text=part["text"], logprobs=[])
                emit("response.content_part.done", **where, part=part)
        else:  # function_call
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in _pieces(item["arguments"]):
                emit(
                    "response.function_call_arguments.delta",
                    item_id=item_id,
                    output_index=index,
                    delta=piece,
                )
            emit(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=final)
    return events


def sse(events: Iterable[Mapping[str, Any]], *, named: bool, done: bool) -> bytes:
    """Server-sent events: one `data:` line per event (`event:` too when `named`).

    Args:
        events: the event payloads.
        named: prefix each with `event: <type>` (the Responses stream does).
        done: end with `data: [DONE]` (the Chat Completions stream does).
    """
    lines: list[str] = []
    for event in events:
        if named:
            lines.append(f"event: {event['type']}\n")
        lines.append(f"data: {dumps(event)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode("ascii")


def dumps(value: Any) -> str:
    """Compact JSON, ASCII-escaped (valid UTF-8 even for lone surrogates in the text)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))

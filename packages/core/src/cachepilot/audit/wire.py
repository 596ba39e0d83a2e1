"""Raw API bodies to neutral requests: OpenAI Chat, OpenAI Responses, Anthropic Messages.

`parse_body` turns one request body into a `cachepilot.sim.Request` (system prompt, messages,
tools, model, Anthropic `cache_control` breakpoints) plus what the audit needs besides:
cache-relevant parameters and thread keys. `parse_response` reads the usage, the response id
and the generated output from a response body (JSON or a server-sent event stream).
Conversion never raises on odd content: unknown blocks and items are kept as JSON text (they
are part of the prefix the provider saw); only a body that is not a request raises
`ValueError`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.sim.render import Request
from cachepilot.traces._common import join_content, openai_content, openai_tool_calls
from cachepilot.usage import Usage

__all__ = [
    "APIS",
    "STRONG_KEYS",
    "Api",
    "ParsedBody",
    "ResponseInfo",
    "api_from_path",
    "detect_api",
    "parse_body",
    "parse_response",
    "parse_usage",
]

logger = logging.getLogger(__name__)

Api: TypeAlias = Literal["chat", "responses", "anthropic"]
APIS: tuple[Api, ...] = ("chat", "responses", "anthropic")

_THREAD_METADATA = (
    "thread_id",
    "session_id",
    "conversation_id",
    "thread",
    "session",
    "conversation",
)
STRONG_KEYS: frozenset[str] = frozenset(
    {"conversation", *(f"metadata.{k}" for k in _THREAD_METADATA)}
)
"""Thread keys that name one conversation (the others, `prompt_cache_key`, `user`,
`metadata.user_id`, `safety_identifier`, may be shared by many threads)."""
_WEAK_KEYS = ("prompt_cache_key", "metadata.user_id", "user", "safety_identifier")
_MAX_BREAKPOINTS = 4


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """One request body in neutral form.

    Attributes:
        api: which API the body is for.
        request: the request as the simulator renders it.
        params: cache-relevant parameters as sent (`cachepilot.diagnose.CACHE_PARAMETERS`).
        keys: thread keys found in the body (`prompt_cache_key`, `user`, `metadata.<k>`,
            `conversation`), strongest first.
        previous_response_id: Responses API chaining (the server holds the earlier context).
    """

    api: Api
    request: Request
    params: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    previous_response_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseInfo:
    """What a response body tells: usage, id and the generated messages."""

    usage: Usage | None = None
    response_id: str | None = None
    output: tuple[Message, ...] = ()


def api_from_path(path: str | None) -> Api | None:
    """The API an endpoint path serves (`/v1/chat/completions` → `chat`), or None."""
    if not path:
        return None
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    return None


def detect_api(body: Mapping[str, Any], url_path: str | None = None) -> Api:
    """The API a request body is for: by endpoint path first, else by its shape.

    Raises:
        ValueError: when the body is not a model request (no `messages` and no `input`).
    """
    by_path = api_from_path(url_path)
    if by_path is not None:
        return by_path
    if "input" in body or "instructions" in body or "previous_response_id" in body:
        return "responses"
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ValueError("not a model request body: it has neither 'messages' nor 'input'")
    if "system" in body or "anthropic_version" in body:
        return "anthropic"
    tools = body.get("tools")
    if isinstance(tools, list) and any(
        isinstance(t, Mapping) and "input_schema" in t for t in tools
    ):
        return "anthropic"
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") in (
                    "tool_use",
                    "tool_result",
                    "thinking",
                    "redacted_thinking",
                ):
                    return "anthropic"
    return "chat"


def parse_body(
    body: Mapping[str, Any],
    *,
    api: Api | None = None,
    url_path: str | None = None,
    timestamp: float | None = None,
) -> ParsedBody:
    """Parse one request body.

    Args:
        body: the JSON body as sent.
        api: force the API (else `detect_api`).
        url_path: endpoint path, used to detect the API.
        timestamp: Unix time the request was sent, when known.

    Raises:
        ValueError: when the body is not a model request.
    """
    if not isinstance(body, Mapping):
        raise ValueError(f"a request body must be a JSON object, not {type(body).__name__}")
    api = api or detect_api(body, url_path)
    if api in ("chat", "responses"):
        system, messages = _openai(body, api)
        breakpoints = None
        tools = _tools(body.get("tools"))
    elif api == "anthropic":
        system, messages, breakpoints = _anthropic(body)
        tools = _tools(body.get("tools"))
        if any(isinstance(t, Mapping) and "cache_control" in t for t in body.get("tools") or ()):
            breakpoints = sorted({-1, *(breakpoints or ())})
    else:
        raise ValueError(f"unknown API {api!r}; expected one of {APIS}")
    if breakpoints:
        breakpoints = breakpoints[-_MAX_BREAKPOINTS:]
    model = body.get("model")
    request = Request(
        system=system,
        messages=messages,
        tools=tools,
        timestamp=timestamp,
        model=str(model) if model else None,
        cache_breakpoints=breakpoints or None,
    )
    previous = body.get("previous_response_id")
    return ParsedBody(
        api=api,
        request=request,
        params=_params(body, api),
        keys=_keys(body),
        previous_response_id=str(previous) if previous else None,
    )


# --------------------------------------------------------------------------------------------
# Parameters and keys


def _params(body: Mapping[str, Any], api: Api) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if body.get("prompt_cache_key") is not None:
        out["prompt_cache_key"] = body["prompt_cache_key"]
    if api == "chat" and body.get("response_format") is not None:
        out["response_format"] = body["response_format"]
    text = body.get("text")
    if api == "responses" and isinstance(text, Mapping) and text.get("format") is not None:
        out["text.format"] = text["format"]
    if api == "anthropic":
        for name in ("tool_choice", "thinking"):
            if body.get(name) is not None:
                out[name] = body[name]
    return out


def _keys(body: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        for name in _THREAD_METADATA:
            value = metadata.get(name)
            if isinstance(value, str | int) and str(value):
                found[f"metadata.{name}"] = str(value)
        user_id = metadata.get("user_id")
        if isinstance(user_id, str | int) and str(user_id):
            found["metadata.user_id"] = str(user_id)
    conversation = body.get("conversation")
    if isinstance(conversation, Mapping):
        conversation = conversation.get("id")
    if isinstance(conversation, str) and conversation:
        found["conversation"] = conversation
    for name in ("prompt_cache_key", "user", "safety_identifier"):
        value = body.get(name)
        if isinstance(value, str) and value:
            found[name] = value
    order = [k for k in found if k in STRONG_KEYS] + [k for k in _WEAK_KEYS if k in found]
    return {k: found[k] for k in order}


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    """Tool schemas as sent, without Anthropic `cache_control` marks (not prompt content)."""
    if not isinstance(raw, list):
        return ()
    out: list[dict[str, Any]] = []
    for tool in raw:
        if isinstance(tool, Mapping):
            out.append({k: v for k, v in tool.items() if k != "cache_control"})
    return tuple(out)


def _openai(body: Mapping[str, Any], api: Api) -> tuple[str | None, list[Message]]:
    """System and messages of an OpenAI body, read as the replay provider reads them.

    The replay provider's reader (`cachepilot.sim.wire`) is strict: it rejects what the API
    would reject. A log may hold bodies a real endpoint accepted anyway (extra roles, odd
    parts), so those fall back to the lenient readers below.
    """
    try:
        from cachepilot.sim import wire

        if api == "chat":
            strict = wire.request_from_chat(body)
        else:
            strict = wire.request_from_responses(body)
        return strict.system, list(strict.messages)
    except (ImportError, ValueError, TypeError, KeyError):
        logger.debug("lenient reading of a %s body", api, exc_info=True)
    if api == "chat":
        system, messages, _ = _chat(body)
        return system, messages
    return _responses(body)


# --------------------------------------------------------------------------------------------
# OpenAI Chat


def _text_of(content: Any) -> str:
    converted = openai_content(content)
    if isinstance(converted, str):
        return converted
    return "\n".join(p.text for p in converted if isinstance(p, TextPart))


def _chat_message(raw: Mapping[str, Any], names: dict[str, str]) -> Message | None:
    role = raw.get("role")
    content = openai_content(raw.get("content"))
    if role in ("system", "developer"):
        return Message(role="system", content=content)
    if role == "user":
        return Message(role="user", content=content)
    if role == "assistant":
        calls = openai_tool_calls(raw.get("tool_calls"))
        names.update((c.id, c.name) for c in calls)
        reasoning = raw.get("reasoning_content") or raw.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            parts: list[ContentPart] = [ReasoningPart(reasoning)]
            parts.extend((TextPart(content),) if isinstance(content, str) else content)
            content = tuple(p for p in parts if not (isinstance(p, TextPart) and not p.text))
        return Message(role="assistant", content=content, tool_calls=tuple(calls))
    if role in ("tool", "function"):
        call_id = str(raw.get("tool_call_id") or raw.get("name") or "unknown")
        name = raw.get("name") or names.get(call_id)
        return Message(role="tool", content=content, tool_call_id=call_id, name=name)
    logger.debug("chat message with unknown role %r kept as user text", role)
    return Message(role="user", content=json.dumps(dict(raw), ensure_ascii=False, default=str))


def _chat(body: Mapping[str, Any]) -> tuple[str | None, list[Message], list[int] | None]:
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise ValueError("a chat body needs a 'messages' list")
    names: dict[str, str] = {}
    converted = [
        m
        for raw in raw_messages
        if isinstance(raw, Mapping)
        for m in (_chat_message(raw, names),)
        if m is not None
    ]
    head: list[str] = []
    index = 0
    while index < len(converted) and converted[index].role == "system":
        head.append(converted[index].text)
        index += 1
    return ("\n\n".join(head) if head else None), converted[index:], None


# --------------------------------------------------------------------------------------------
# OpenAI Responses


class _Turns:
    """Builds messages from Responses items: assistant-side items merge into one turn."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.system: list[str] = []
        self.names: dict[str, str] = {}
        self._parts: list[ContentPart] = []
        self._calls: list[ToolCall] = []
        self._open = False

    def _flush(self) -> None:
        if self._open and (self._parts or self._calls):
            self.messages.append(
                Message(
                    role="assistant",
                    content=join_content(self._parts),
                    tool_calls=tuple(self._calls),
                )
            )
        self._parts, self._calls, self._open = [], [], False

    def assistant_parts(self, parts: Sequence[ContentPart]) -> None:
        self._open = True
        self._parts.extend(parts)

    def call(self, call: ToolCall) -> None:
        self._open = True
        self._calls.append(call)
        self.names[call.id] = call.name

    def add(self, message: Message) -> None:
        self._flush()
        if message.role == "system" and not self.messages:
            self.system.append(message.text)
            return
        self.messages.append(message)

    def done(self) -> list[Message]:
        self._flush()
        return self.messages


def _response_items(items: Sequence[Any], turns: _Turns) -> None:
    for raw in items:
        if isinstance(raw, str):
            turns.add(Message(role="user", content=raw))
            continue
        if not isinstance(raw, Mapping):
            continue
        kind = raw.get("type") or ("message" if "role" in raw else None)
        if kind == "message":
            role = raw.get("role")
            content = openai_content(raw.get("content"))
            if role == "assistant":
                turns.assistant_parts(
                    [TextPart(content)] if isinstance(content, str) else list(content)
                )
            elif role in ("system", "developer"):
                turns.add(Message(role="system", content=content))
            else:
                turns.add(Message(role="user", content=content))
        elif kind in ("function_call", "custom_tool_call"):
            arguments = raw.get("arguments", raw.get("input", "{}"))
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            call_id = str(raw.get("call_id") or raw.get("id") or "call")
            turns.call(ToolCall(id=call_id, name=str(raw.get("name") or ""), arguments=arguments))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = str(raw.get("call_id") or "unknown")
            output = raw.get("output")
            content = output if isinstance(output, str) else openai_content(output)
            turns.add(
                Message(
                    role="tool",
                    content=content,
                    tool_call_id=call_id,
                    name=turns.names.get(call_id),
                )
            )
        elif kind == "reasoning":
            texts = [
                str(s.get("text", ""))
                for key in ("summary", "content")
                for s in raw.get(key) or ()
                if isinstance(s, Mapping)
            ]
            signature = raw.get("encrypted_content")
            turns.assistant_parts(
                [ReasoningPart("\n".join(texts), signature if isinstance(signature, str) else None)]
            )
        else:
            # Built-in tool calls, item references…: their bytes are part of the prompt.
            turns.assistant_parts(
                [TextPart(json.dumps(dict(raw), ensure_ascii=False, default=str))]
            )


def _responses(body: Mapping[str, Any]) -> tuple[str | None, list[Message]]:
    turns = _Turns()
    instructions = body.get("instructions")
    head: list[str] = []
    if isinstance(instructions, str) and instructions:
        head.append(instructions)
    raw = body.get("input")
    if isinstance(raw, str):
        turns.add(Message(role="user", content=raw))
    elif isinstance(raw, list):
        _response_items(raw, turns)
    messages = turns.done()
    head.extend(turns.system)
    return ("\n\n".join(head) if head else None), messages


# --------------------------------------------------------------------------------------------
# Anthropic Messages


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


def _anthropic(body: Mapping[str, Any]) -> tuple[str | None, list[Message], list[int] | None]:
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
        raise ValueError("an Anthropic body needs a 'messages' list")
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


# --------------------------------------------------------------------------------------------
# Responses and usage


def parse_usage(raw: Any, api: Api) -> Usage | None:
    """Normalized usage from a response's `usage` object (None when there is none)."""
    if not isinstance(raw, Mapping) or not raw:
        return None
    try:
        if api == "anthropic" or "cache_read_input_tokens" in raw:
            return Usage.from_anthropic(raw)
        if "prompt_tokens" in raw:
            return Usage.from_openai_chat(raw)
        return Usage.from_openai_responses(raw)
    except ValueError as exc:
        logger.warning("ignoring an inconsistent usage record: %s", exc)
        return None


def _events(text: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == "[DONE]":
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def _output_messages(api: Api, body: Mapping[str, Any]) -> tuple[Message, ...]:
    try:
        if api == "responses" and isinstance(body.get("output"), list):
            turns = _Turns()
            _response_items(body["output"], turns)
            return tuple(turns.done())
        if api == "chat":
            choices = body.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
                message = choices[0].get("message")
                if isinstance(message, Mapping):
                    parsed = _chat_message({**message, "role": "assistant"}, {})
                    return () if parsed is None else (parsed,)
        if api == "anthropic" and isinstance(body.get("content"), list):
            _, messages, _ = _anthropic({"messages": [{"role": "assistant", **body}]})
            return tuple(messages)
    except (ValueError, TypeError):
        logger.debug("could not read the output of a %s response", api, exc_info=True)
    return ()


def parse_response(body: Any, api: Api) -> ResponseInfo:
    """Usage, id and output of one response body (JSON object, JSON text or an SSE stream)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        text = body.strip()
        if not text:
            return ResponseInfo()
        if text.startswith("{"):
            try:
                body = json.loads(text)
            except ValueError:
                return ResponseInfo()
        else:
            return _stream(_events(text), api)
    if not isinstance(body, Mapping):
        return ResponseInfo()
    rid = body.get("id")
    return ResponseInfo(
        usage=parse_usage(body.get("usage"), api),
        response_id=str(rid) if rid else None,
        output=_output_messages(api, body),
    )


def _stream(events: Sequence[Mapping[str, Any]], api: Api) -> ResponseInfo:
    usage: dict[str, Any] = {}
    rid: str | None = None
    final: Mapping[str, Any] | None = None
    for event in events:
        kind = event.get("type")
        if api == "responses":
            response = event.get("response")
            if isinstance(response, Mapping):
                rid = str(response.get("id") or rid or "") or None
                if kind in ("response.completed", "response.incomplete", "response.failed"):
                    final = response
        elif api == "anthropic":
            if kind == "message_start" and isinstance(event.get("message"), Mapping):
                rid = str(event["message"].get("id") or "") or None
                usage.update(event["message"].get("usage") or {})
            elif kind == "message_delta" and isinstance(event.get("usage"), Mapping):
                usage.update({k: v for k, v in event["usage"].items() if v is not None})
        else:
            rid = str(event.get("id") or rid or "") or None
            if isinstance(event.get("usage"), Mapping):
                usage = dict(event["usage"])
    if final is not None:
        return parse_response(dict(final), api)
    return ResponseInfo(usage=parse_usage(usage, api), response_id=rid)

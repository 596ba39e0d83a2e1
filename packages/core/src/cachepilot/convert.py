"""Provider message lists to cachepilot messages and back.

`CachePilot.prepare` takes a system prompt and a list of `cachepilot.Message`. An agent loop
that keeps its history as provider dicts converts it on the way in and the prepared view on
the way out:

```python
from cachepilot import CachePilot, from_openai_chat, to_openai_chat

history = [
    {"role": "system", "content": "You are a coder."},
    {"role": "user", "content": "Run the tests."},
]
pilot = CachePilot()
system, transcript = from_openai_chat(history)
system, view, tools = pilot.prepare(system, transcript, thread="t1")
request_messages = to_openai_chat(system, view)  # what to send to the API
```

Formats: OpenAI Chat Completions `messages`, OpenAI Responses `input` items (with
`instructions`), Anthropic Messages `messages` (with `system`). `to_messages` detects the format
of a list. Leading system (or developer) messages become the system prompt; tool results keep
the id of the call they answer and get its tool name. Malformed input raises `ValueError`
naming the offending field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeAlias

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall

__all__ = [
    "Conversation",
    "MessageFormat",
    "detect_format",
    "from_anthropic",
    "from_openai_chat",
    "from_responses",
    "to_anthropic",
    "to_messages",
    "to_openai_chat",
    "to_responses",
]

MessageFormat: TypeAlias = Literal["openai-chat", "responses", "anthropic", "cachepilot"]

_RESPONSES_ITEMS = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "reasoning",
    }
)
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file"})
_ANTHROPIC_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}
)


class Conversation(NamedTuple):
    """A system prompt and the conversation after it, as `CachePilot.prepare` takes them."""

    system: str | None
    messages: list[Message]


def from_openai_chat(messages: Sequence[Mapping[str, Any]]) -> Conversation:
    """OpenAI Chat Completions `messages` as a `Conversation`.

    Leading `system`/`developer` messages form the system prompt (joined by a blank line);
    later ones stay in the conversation.

    Raises:
        ValueError: when a message is malformed or has an unsupported role.
    """
    from cachepilot.wire import request_from_chat

    request = request_from_chat({"messages": _as_list(messages, "messages")})
    return Conversation(request.system, list(request.messages))


def from_responses(
    input: str | Sequence[Mapping[str, Any]], *, instructions: str | None = None
) -> Conversation:
    """OpenAI Responses `input` (a string or a list of items) and `instructions`.

    Consecutive assistant-side items (reasoning, an assistant message, function calls) form one
    assistant message; `instructions` and leading system/developer messages form the system
    prompt.

    Raises:
        ValueError: when an item is malformed.
    """
    from cachepilot.wire import request_from_responses

    items: Any = input if isinstance(input, str) else _as_list(input, "input")
    body: dict[str, Any] = {"input": items}
    if instructions is not None:
        body["instructions"] = instructions
    request = request_from_responses(body)
    return Conversation(request.system, list(request.messages))


def from_anthropic(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> Conversation:
    """Anthropic Messages `messages` and `system` as a `Conversation`.

    `tool_use` blocks become the assistant message's tool calls (arguments as JSON text);
    each `tool_result` block becomes a tool message, followed by a user message holding the
    turn's other blocks, if any. `cache_control` markers are dropped (cachepilot decides what
    is cached by keeping prefixes stable).

    Raises:
        ValueError: when a message or block is malformed or a role is not user/assistant.
    """
    out: list[Message] = []
    names: dict[str, str] = {}  # call id -> tool name, for the results that answer them
    for index, raw in enumerate(_as_list(messages, "messages")):
        where = f"messages[{index}]"
        data = _mapping(raw, where)
        role = data.get("role")
        content = data.get("content")
        if isinstance(content, str):
            blocks = [_mapping({"type": "text", "text": content}, where)]
        else:
            blocks = [
                _mapping(b, f"{where}.content[{i}]")
                for i, b in enumerate(_as_list(content, f"{where}.content"))
            ]
        if role == "assistant":
            out.append(_anthropic_assistant(blocks, where, names))
        elif role == "user":
            out.extend(_anthropic_user(blocks, where, names))
        else:
            raise ValueError(f"{where}.role {role!r} is not supported (user or assistant)")
    return Conversation(_anthropic_system(system), out)


def detect_format(messages: Sequence[Any]) -> MessageFormat:
    """Which format a message list is in (plain role/content lists read as `openai-chat`).

    Raises:
        ValueError: when the list mixes `Message` objects with dicts or is not a list.
    """
    items = _as_list(messages, "messages")
    if items and all(isinstance(m, Message) for m in items):
        return "cachepilot"
    if any(isinstance(m, Message) for m in items):
        raise ValueError("messages mixes cachepilot Message objects with other items")
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") in _RESPONSES_ITEMS:
            return "responses"
        if "tool_calls" in item or "tool_call_id" in item or item.get("role") == "tool":
            return "openai-chat"
        content = item.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind in _RESPONSES_PARTS:
                return "responses"
            if kind in _ANTHROPIC_BLOCKS or (kind == "image" and "source" in part):
                return "anthropic"
            if kind == "image_url":
                return "openai-chat"
    return "openai-chat"


def to_messages(
    messages: str | Sequence[Any],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    format: MessageFormat | None = None,
) -> Conversation:
    """Any supported message list as a `Conversation` (format detected unless given).

    `system` is the Anthropic `system` or the Responses `instructions`; for a Chat list it is
    put before the list's own leading system messages. A string is a Responses `input`.

    Raises:
        ValueError: on malformed input or an unknown `format`.
    """
    if isinstance(messages, str):
        if format not in (None, "responses"):
            raise ValueError(f"a string is a Responses input, not {format!r} messages")
        format = "responses"
    kind = format or detect_format(messages)
    if kind == "responses":
        if system is not None and not isinstance(system, str):
            raise ValueError("instructions for a Responses input must be a string")
        return from_responses(messages, instructions=system)
    items: list[Any] = _as_list(messages, "messages")
    if kind == "anthropic":
        return from_anthropic(items, system=system)
    if kind == "openai-chat":
        if system is not None and not isinstance(system, str):
            raise ValueError("system for Chat messages must be a string")
        head = [] if system is None else [{"role": "system", "content": system}]
        return from_openai_chat([*head, *items])
    if kind == "cachepilot":
        lead: list[str] = [] if system is None else [_anthropic_system(system) or ""]
        while items and isinstance(items[0], Message) and items[0].role == "system":
            lead.append(items.pop(0).text)
        if not all(isinstance(m, Message) for m in items):
            raise ValueError("format 'cachepilot' needs a list of Message objects")
        return Conversation("\n\n".join(lead) if lead else None, items)
    raise ValueError(
        f"unknown format {format!r}; use 'openai-chat', 'responses', 'anthropic' or 'cachepilot'"
    )


def to_openai_chat(system: str | None, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A prepared view as OpenAI Chat Completions `messages` (reasoning parts left out)."""
    from cachepilot.wire import chat_messages

    return chat_messages(system, messages)


def to_responses(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A prepared view as OpenAI Responses `input` items (send the system as `instructions`)."""
    from cachepilot.wire import responses_input

    return responses_input(messages)


def to_anthropic(system: str | None, messages: Sequence[Message]) -> dict[str, Any]:
    """A prepared view as the `system` and `messages` of an Anthropic Messages request.

    Parallel tool results share one user turn, as the API requires.
    """
    from cachepilot.audit.convert import anthropic_body

    body = anthropic_body(system, messages)
    out: dict[str, Any] = {"messages": body["messages"]}
    if system is not None:
        out["system"] = system
    return out


# --------------------------------------------------------------------------------------------
# Helpers


def _as_list(value: Any, where: str) -> list[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ValueError(f"{where} must be a list, not {type(value).__name__}")
    return list(value)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be an object, not {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, not {type(value).__name__}")
    return value


def _content(parts: Sequence[ContentPart]) -> str | tuple[ContentPart, ...]:
    """One text part as a plain string (how the other converters give text)."""
    if not parts:
        return ""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


def _anthropic_part(block: Mapping[str, Any], where: str) -> ContentPart:
    kind = block.get("type")
    if kind == "text":
        return TextPart(_text(block.get("text", ""), f"{where}.text"))
    if kind == "image":
        source = _mapping(block.get("source"), f"{where}.source")
        if source.get("type") == "base64":
            media = _text(source.get("media_type", "image/png"), f"{where}.source.media_type")
            data = _text(source.get("data"), f"{where}.source.data")
            return ImagePart(url=f"data:{media};base64,{data}", media_type=media)
        return ImagePart(url=_text(source.get("url"), f"{where}.source.url"))
    if kind == "thinking":
        signature = block.get("signature")
        return ReasoningPart(
            _text(block.get("thinking", ""), f"{where}.thinking"),
            signature if isinstance(signature, str) else None,
        )
    if kind == "redacted_thinking":
        return ReasoningPart("", _text(block.get("data", ""), f"{where}.data") or None)
    # Documents, search results and future block types still occupy the prompt: their JSON.
    body = {k: v for k, v in block.items() if k != "cache_control"}
    return TextPart(json.dumps(body, ensure_ascii=False, sort_keys=True, default=str))


def _anthropic_assistant(
    blocks: Sequence[Mapping[str, Any]], where: str, names: dict[str, str]
) -> Message:
    calls: list[ToolCall] = []
    parts: list[ContentPart] = []
    for number, block in enumerate(blocks):
        at = f"{where}.content[{number}]"
        if block.get("type") != "tool_use":
            parts.append(_anthropic_part(block, at))
            continue
        call = ToolCall(
            id=_text(block.get("id"), f"{at}.id"),
            name=_text(block.get("name"), f"{at}.name"),
            arguments=json.dumps(block.get("input", {}), ensure_ascii=False),
        )
        names[call.id] = call.name
        calls.append(call)
    return Message(role="assistant", content=_content(parts), tool_calls=tuple(calls))


def _anthropic_user(
    blocks: Sequence[Mapping[str, Any]], where: str, names: Mapping[str, str]
) -> list[Message]:
    """A user turn: one tool message per `tool_result`, then the other blocks, if any."""
    out: list[Message] = []
    rest: list[ContentPart] = []
    for number, block in enumerate(blocks):
        at = f"{where}.content[{number}]"
        if block.get("type") != "tool_result":
            rest.append(_anthropic_part(block, at))
            continue
        call_id = _text(block.get("tool_use_id"), f"{at}.tool_use_id")
        if not call_id:
            raise ValueError(f"{at}.tool_use_id must not be empty")
        inner = block.get("content")
        result: str | tuple[ContentPart, ...]
        if inner is None or isinstance(inner, str):
            result = inner or ""
        else:
            result = _content(
                [
                    _anthropic_part(_mapping(b, f"{at}.content[{i}]"), f"{at}.content[{i}]")
                    for i, b in enumerate(_as_list(inner, f"{at}.content"))
                ]
            )
        out.append(
            Message(role="tool", content=result, tool_call_id=call_id, name=names.get(call_id))
        )
    if rest or not blocks:
        out.append(Message(role="user", content=_content(rest)))
    return out


def _anthropic_system(system: str | Sequence[Mapping[str, Any]] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system
    texts = []
    for index, block in enumerate(_as_list(system, "system")):
        entry = _mapping(block, f"system[{index}]")
        texts.append(_text(entry.get("text", ""), f"system[{index}].text"))
    return "\n\n".join(texts)

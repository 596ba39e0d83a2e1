"""OpenAI Responses bodies: `input` items read into neutral messages, replies written.

Reading is strict for the replay provider and lenient for the audit (`strict=False`), as in
`cachepilot.wire.chat`. Writing is deterministic: the same reply and ids give byte-identical
bodies and event streams.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
)
from cachepilot.wire.sse import STREAM_PIECE_CHARS

__all__ = [
    "read_responses",
    "request_from_responses",
    "responses_events",
    "responses_input",
    "responses_items",
    "responses_object",
    "responses_usage",
]


# --------------------------------------------------------------------------- reading


def _part(part: Any, where: str, reader: Reader) -> ContentPart | None:
    if isinstance(part, str):
        return TextPart(part)
    data = reader.obj(part, where)
    if data is None:
        return None
    kind = data.get("type")
    if kind in ("input_text", "output_text", "text"):
        return TextPart(reader.string(data.get("text"), f"{where}.text", default=""))
    if kind == "refusal":
        return TextPart(reader.string(data.get("refusal"), f"{where}.refusal", default=""))
    if kind == "input_image":
        url = data.get("image_url")
        if not isinstance(url, str):
            file_id = data.get("file_id")
            if not isinstance(file_id, str):
                reader.fail(f"{where} needs image_url or file_id", where)
                file_id = ""
            url = f"file:{file_id}"
        detail = data.get("detail")
        return ImagePart(url=url, detail=detail if isinstance(detail, str) else None)
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
        return Message(role="assistant", content=simplify(self.parts), tool_calls=tuple(self.calls))


def responses_items(
    items: Any,
    where: str = "input",
    *,
    strict: bool = True,
    spans: list[tuple[int, int]] | None = None,
) -> list[Message]:
    """Responses `input` (a string or a list of items) as neutral messages.

    Consecutive assistant-side items (reasoning, assistant message, function calls) form one
    assistant message, as one model turn produced them; system and developer messages stay
    messages with role `system`. Unknown item types are kept as user text (their JSON), so
    they still occupy the prompt.

    Args:
        items: the `input` value.
        where: its name in error messages.
        strict: raise on what the API would reject.
        spans: when given, receives for each returned message the range of item indices
            (start, end) it was read from (a string `input` is `(0, 1)`).

    Raises:
        WireError: when an item is malformed (strict mode).
    """
    reader = Reader(strict)
    found: list[tuple[int, int]] = spans if spans is not None else []
    if isinstance(items, str):
        found.append((0, 1))
        return [Message(role="user", content=items)]
    if items is None:
        return []
    if not isinstance(items, list):
        reader.fail(f"{where} must be a string or a list of items", where)
        return []
    out: list[Message] = []
    turn = _Turn()
    names: dict[str, str] = {}
    turn_start = 0
    position = 0

    def flush() -> None:
        nonlocal turn
        nonlocal turn_start
        if not turn.empty():
            out.append(turn.message())
            found.append((turn_start, position))
        turn = _Turn()
        turn_start = position

    def add(message: Message) -> None:
        out.append(message)
        found.append((position, position + 1))

    for i, raw in enumerate(items):
        at = f"{where}[{i}]"
        position = i
        if turn.empty():
            turn_start = i
        if isinstance(raw, str) and not strict:
            flush()
            add(Message(role="user", content=raw))
            continue
        item = reader.obj(raw, at)
        if item is None:
            continue
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            content = _content(item.get("content"), f"{at}.content", reader)
            if role == "assistant":
                if turn.calls:
                    flush()
                turn.parts.extend(as_parts(content))
                continue
            flush()
            if role in SYSTEM_ROLES:
                add(Message(role="system", content=content))
            elif role == "user":
                add(Message(role="user", content=content))
            else:
                reader.fail(f"{at}.role {role!r} is not supported", f"{at}.role")
                add(Message(role="user", content=content))
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
                arguments = canonical(arguments)
            call_id = item.get("call_id")
            if not strict and not call_id:
                call_id = item.get("id") or "call"
            call = ToolCall(
                id=reader.string(call_id, f"{at}.call_id"),
                name=reader.string(item.get("name"), f"{at}.name", default=reader.default),
                arguments=arguments,
            )
            names[call.id] = call.name
            turn.calls.append(call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            flush()
            call_id = item.get("call_id")
            if not strict and not call_id:
                call_id = "unknown"
            call_id = reader.string(call_id, f"{at}.call_id")
            if not call_id:
                raise WireError(f"{at}.call_id must not be empty", f"{at}.call_id")
            add(
                Message(
                    role="tool",
                    content=_content(item.get("output"), f"{at}.output", reader),
                    tool_call_id=call_id,
                    name=names.get(call_id),
                )
            )
        else:
            flush()
            add(Message(role="user", content=canonical(item)))
    position = len(items)
    flush()
    return out


def read_responses(
    body: Mapping[str, Any],
    *,
    history: Sequence[Message] = (),
    strict: bool = True,
) -> tuple[str | None, list[Message], tuple[Mapping[str, Any], ...]]:
    """System prompt, messages and tools of a Responses request body.

    `instructions` and the leading system/developer messages of the conversation form the
    system prompt (joined by a blank line). `history` is the conversation a
    `previous_response_id` stands for (its input and output), placed before `input`.

    Raises:
        WireError: when the body is not a Responses request (strict mode).
    """
    reader = Reader(strict)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str | list):
        reader.fail("instructions must be a string", "instructions")
        instructions = None
    head: list[str] = []
    conversation = [*history, *responses_items(body.get("input"), strict=strict)]
    if isinstance(instructions, list):  # a list of input items (prompt templates)
        items = responses_items(instructions, "instructions", strict=strict)
        conversation = [*items, *conversation]
    elif instructions:
        head.append(instructions)
    index = 0
    while index < len(conversation) and conversation[index].role == "system":
        head.append(conversation[index].text)
        index += 1
    return ("\n\n".join(head) if head else None), conversation[index:], reader.tools(body)


def request_from_responses(
    body: Mapping[str, Any],
    *,
    history: Sequence[Message] = (),
    timestamp: float | None = None,
) -> Request:
    """A Responses request body as the simulator's `Request` (strict reading).

    Raises:
        WireError: when the body is not a Responses request.
    """
    system, messages, tools = read_responses(body, history=history)
    return Request(
        system=system, messages=messages, tools=tools, timestamp=timestamp, model=model_of(body)
    )


# --------------------------------------------------------------------------- writing


def _parts_out(content: str | tuple[ContentPart, ...], role: str) -> list[dict[str, Any]]:
    text_type = "output_text" if role == "assistant" else "input_text"
    parts: list[dict[str, Any]] = []
    for part in as_parts(content):
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
                    else _parts_out(message.content, "user"),
                }
            )
            continue
        if message.role != "assistant":
            role = message.role
            content: Any = (
                message.content
                if isinstance(message.content, str)
                else _parts_out(message.content, role)
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
        "content": _parts_out(tuple(parts), "assistant"),
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


def _pieces(text: str, size: int = STREAM_PIECE_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


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

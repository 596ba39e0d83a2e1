"""Server-sent event streams read as they arrive: event framing and the reply they add up to.

`EventSplitter` cuts a byte stream into whole events (each with its exact bytes, so a proxy
can forward them untouched, and its JSON payload); `StreamReply` folds the events of one
Chat Completions, Responses or Messages stream into the reply they carry: the assistant
message (text, reasoning, tool calls with their ids and arguments), the usage and the id.
Gemini chunks are folded by `cachepilot.wire.gemini_stream.GeminiReply`. Both are total:
junk lines and unknown events are skipped, never raised on.

"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cachepilot.messages import ContentPart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.usage import Usage
from cachepilot.wire._common import Api
from cachepilot.wire._common import simplify as join_content
from cachepilot.wire.gemini_stream import GeminiReply
from cachepilot.wire.response import parse_response, parse_usage

__all__ = ["EventSplitter", "SSEEvent", "StreamReply"]

_MAX_EVENT_BYTES = 64 * 1024 * 1024
"""Largest single event kept (a complete Responses object can be large; beyond this the
stream is not an SSE stream we can read)."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One whole server-sent event.

    Attributes:
        raw: its exact bytes, blank-line terminator included.
        name: the `event:` field, when present.
        data: the `data:` payload as JSON (None for `[DONE]`, comments and non-JSON data).
        done: the Chat Completions end marker (`data: [DONE]`).
    """

    raw: bytes
    name: str | None
    data: dict[str, Any] | None
    done: bool = False


class EventSplitter:
    """Cuts a byte stream into whole SSE events (`feed` as bytes arrive, `close` at the end).

    Raises:
        ValueError: from `feed` when one event grows past 64 MiB (not an event stream).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by `chunk`."""
        self._buffer.extend(chunk)
        out: list[SSEEvent] = []
        start = 0
        buffer = self._buffer
        while True:
            end, size = _boundary(buffer, start)
            if end < 0:
                break
            out.append(_event(bytes(buffer[start : end + size])))
            start = end + size
        del buffer[:start]
        if len(buffer) > _MAX_EVENT_BYTES:
            raise ValueError("an event stream event exceeds 64 MiB")
        return out

    def close(self) -> list[SSEEvent]:
        """The last event when the stream ended without a blank line."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return [_event(rest)] if rest.strip() else []


def _boundary(buffer: bytearray, start: int) -> tuple[int, int]:
    """Position and size of the first blank-line terminator at or after `start` (-1 if none)."""
    best, size = -1, 0
    for marker in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = buffer.find(marker, start)
        if at >= 0 and (best < 0 or at < best):
            best, size = at, len(marker)
    return best, size


def _event(raw: bytes) -> SSEEvent:
    name: str | None = None
    data: list[str] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    payload = "\n".join(data).strip()
    if payload == "[DONE]":
        return SSEEvent(raw, name, None, done=True)
    try:
        parsed = json.loads(payload) if payload else None
    except ValueError:
        parsed = None
    return SSEEvent(raw, name, parsed if isinstance(parsed, dict) else None)


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Block:
    kind: str
    text: list[str] = field(default_factory=list)
    signature: str | None = None
    call: _Call | None = None
    data: dict[str, Any] = field(default_factory=dict)


class StreamReply:
    """The reply a stream of one API adds up to, event by event (`add`).

    Attributes:
        api: the stream's API.
        response_id: the completion / response / message id, once seen.
        final: Responses only: the response object of `response.completed` (or `failed`,
            `incomplete`), once seen.
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        self.response_id: str | None = None
        self.final: dict[str, Any] | None = None
        self._usage: dict[str, Any] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._blocks: dict[int, _Block] = {}
        self._gemini = GeminiReply()

    def add(self, event: Mapping[str, Any]) -> None:
        """Fold one event's payload in."""
        if self.api == "gemini":
            self._gemini.add(event)
            self.response_id = self._gemini.response_id
        elif self.api == "chat":
            self._chat(event)
        elif self.api == "responses":
            response = event.get("response")
            if isinstance(response, Mapping):
                self.response_id = str(response.get("id") or self.response_id or "") or None
                if event.get("type") in (
                    "response.completed",
                    "response.incomplete",
                    "response.failed",
                ):
                    self.final = dict(response)
        else:
            self._anthropic(event)

    def _chat(self, event: Mapping[str, Any]) -> None:
        if event.get("id"):
            self.response_id = str(event["id"])
        if isinstance(event.get("usage"), Mapping):
            self._usage = dict(event["usage"])
        choices = event.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if not isinstance(delta, Mapping):
                continue
            if isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            reasoning = delta.get("reasoning_content")
            if isinstance(reasoning, str):
                self._reasoning.append(reasoning)
            for raw in delta.get("tool_calls") or ():
                if not isinstance(raw, Mapping):
                    continue
                index = raw.get("index", 0)
                call = self._calls.setdefault(index if isinstance(index, int) else 0, _Call())
                if raw.get("id"):
                    call.id = str(raw["id"])
                function = raw.get("function")
                if isinstance(function, Mapping):
                    if function.get("name"):
                        call.name += str(function["name"])
                    if isinstance(function.get("arguments"), str):
                        call.arguments.append(function["arguments"])

    def _anthropic(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), Mapping):
            message = event["message"]
            self.response_id = str(message.get("id") or "") or None
            if isinstance(message.get("usage"), Mapping):
                self._usage.update(message["usage"])
        elif kind == "message_delta" and isinstance(event.get("usage"), Mapping):
            self._usage.update({k: v for k, v in event["usage"].items() if v is not None})
        elif kind == "content_block_start" and isinstance(event.get("content_block"), Mapping):
            block = event["content_block"]
            index = event.get("index")
            if not isinstance(index, int):
                return
            found = _Block(str(block.get("type")), data=dict(block))
            if found.kind == "tool_use":
                found.call = _Call(str(block.get("id", "")), str(block.get("name", "")))
                if block.get("input"):
                    found.call.arguments.append(json.dumps(block["input"], ensure_ascii=False))
            elif found.kind == "text":
                found.text.append(str(block.get("text") or ""))
            elif found.kind == "thinking":
                found.text.append(str(block.get("thinking") or ""))
                found.signature = block.get("signature") or None
            self._blocks[index] = found
        elif kind == "content_block_delta" and isinstance(event.get("delta"), Mapping):
            index = event.get("index")
            current = self._blocks.get(index) if isinstance(index, int) else None
            if current is None:
                return
            self._block_delta(current, event["delta"])

    @staticmethod
    def _block_delta(found: _Block, delta: Mapping[str, Any]) -> None:
        dtype = delta.get("type")
        if dtype == "text_delta":
            found.text.append(str(delta.get("text", "")))
        elif dtype == "thinking_delta":
            found.text.append(str(delta.get("thinking", "")))
        elif dtype == "signature_delta":
            found.signature = str(delta.get("signature", ""))
        elif dtype == "input_json_delta" and found.call is not None:
            found.call.arguments.append(str(delta.get("partial_json", "")))

    @property
    def usage(self) -> Usage | None:
        """The usage the stream reported (None when it carried none)."""
        if self.api == "gemini":
            return self._gemini.usage
        if self.api == "responses":
            return parse_response(self.final, "responses").usage if self.final else None
        return parse_usage(self._usage, self.api)

    @property
    def usage_block(self) -> dict[str, Any]:
        """The usage fields as the stream reported them (Messages: start and delta merged;
        Gemini: the last `usageMetadata`)."""
        if self.api == "gemini":
            return dict(self._gemini.usage_block)
        if self.api == "responses":
            found = (self.final or {}).get("usage")
            return dict(found) if isinstance(found, Mapping) else {}
        return dict(self._usage)

    def payload(self) -> dict[str, Any]:
        """The reply body the stream adds up to, in the non-streamed shape the wire readers
        take (`cachepilot.wire.reply_elements`): Responses, the final response object;
        Messages, the content blocks as streamed (start block, deltas joined: thinking
        signatures and every field kept); Chat, one choice with the assembled message;
        Gemini, the response the chunks add up to (`cachepilot.wire.gemini_stream`)."""
        if self.api == "gemini":
            return self._gemini.payload()
        if self.api == "responses":
            return dict(self.final or {})
        if self.api == "anthropic":
            blocks = [_whole_block(b) for _, b in sorted(self._blocks.items())]
            return {"id": self.response_id, "type": "message", "role": "assistant",
                    "content": blocks}  # fmt: skip
        message = self.message()
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if calls:
            entry["tool_calls"] = calls
        return {"id": self.response_id, "object": "chat.completion",
                "choices": [{"index": 0, "message": entry}]}  # fmt: skip

    def message(self) -> Message:
        """The assistant message the stream carried so far."""
        if self.api == "gemini":
            return self._gemini.message()
        if self.api == "responses":
            if self.final is None:
                return Message(role="assistant")
            output = parse_response(self.final, "responses").output
            parts: list[ContentPart] = []
            calls: list[ToolCall] = []
            for message in output:
                parts.extend(message.parts)
                calls.extend(message.tool_calls)
            return Message(role="assistant", content=join_content(parts), tool_calls=tuple(calls))
        if self.api == "chat":
            found: list[ContentPart] = []
            if self._reasoning:
                found.append(ReasoningPart("".join(self._reasoning)))
            if self._text:
                found.append(TextPart("".join(self._text)))
            chat_calls = tuple(
                ToolCall(c.id, c.name, "".join(c.arguments) or "{}")
                for _, c in sorted(self._calls.items())
            )
            return Message(role="assistant", content=join_content(found), tool_calls=chat_calls)
        blocks: list[ContentPart] = []
        anthropic_calls: list[ToolCall] = []
        for _, block in sorted(self._blocks.items()):
            if block.kind == "text":
                blocks.append(TextPart("".join(block.text)))
            elif block.kind == "thinking":
                blocks.append(ReasoningPart("".join(block.text), block.signature))
            elif block.kind == "redacted_thinking":
                blocks.append(ReasoningPart("", str(block.data.get("data", "")) or None))
            elif block.kind == "tool_use" and block.call is not None:
                arguments = "".join(block.call.arguments) or "{}"
                anthropic_calls.append(ToolCall(block.call.id, block.call.name, arguments))
        return Message(
            role="assistant", content=join_content(blocks), tool_calls=tuple(anthropic_calls)
        )


def _whole_block(block: _Block) -> dict[str, Any]:
    """A streamed Messages content block as the non-streamed reply would carry it."""
    out = dict(block.data)
    if block.kind == "text":
        out["text"] = "".join(block.text)
    elif block.kind == "thinking":
        out["thinking"] = "".join(block.text)
        if block.signature is not None:
            out["signature"] = block.signature
    elif block.kind == "tool_use" and block.call is not None:
        arguments = "".join(block.call.arguments)
        try:
            value = json.loads(arguments) if arguments else {}
        except ValueError:
            value = {}
        out["input"] = value if isinstance(value, dict) else {}
    return out

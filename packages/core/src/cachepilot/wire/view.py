"""Request bodies read with provenance: for each neutral message, where in the body it came from.

`read_view` reads a body with the wire readers and remembers, for each neutral message, the
element it came from (`Source`), so `cachepilot.wire.rewrite.write_view` can write a changed
view back into the client's own body, copying everything else as received.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachepilot.messages import Message
from cachepilot.wire._common import Api, Reader, WireError, text_of
from cachepilot.wire.anthropic import read_anthropic
from cachepilot.wire.body_view import BodyView, Source
from cachepilot.wire.chat import chat_message
from cachepilot.wire.gemini_view import read_gemini_view
from cachepilot.wire.responses import responses_items

__all__ = ["BodyView", "Source", "read_view"]

_SEP = "\n\n"


def read_view(body: Mapping[str, Any], api: Api) -> BodyView:
    """Read a request body strictly, remembering where each message came from.

    Raises:
        WireError: when the body is not a request of `api` (what the API would reject).
    """
    if not isinstance(body, Mapping):
        raise WireError("a request body must be a JSON object")
    if api == "chat":
        return _read_chat(body)
    if api == "responses":
        return _read_responses(body)
    if api == "gemini":
        return read_gemini_view(body)
    return _read_anthropic(body)


def _read_chat(body: Mapping[str, Any]) -> BodyView:
    reader = Reader(strict=True)
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise WireError("messages must be a list of message objects", "messages")
    system: list[str] = []
    messages: list[Message] = []
    sources: list[Source] = []
    names: dict[str, str] = {}
    head = 0
    for i, entry in enumerate(raw):
        data = reader.obj(entry, f"messages[{i}]")
        assert data is not None  # strict: obj raises instead
        message = chat_message(data, f"messages[{i}]", names, reader)
        if message.role == "system" and not messages:
            system.append(text_of(message.content))
            head = i + 1
            continue
        messages.append(message)
        sources.append(Source(i, i + 1))
    return BodyView(
        api="chat",
        body=body,
        system=_SEP.join(system) if system else None,
        system_texts=tuple(system),
        head=head,
        messages=messages,
        sources=sources,
        tools=reader.tools(body),
    )


def _read_responses(body: Mapping[str, Any]) -> BodyView:
    reader = Reader(strict=True)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise WireError("instructions must be a string", "instructions")
    spans: list[tuple[int, int]] = []
    items = responses_items(body.get("input"), spans=spans)
    pieces: list[str] = [instructions] if instructions else []
    head = 0
    index = 0
    while index < len(items) and items[index].role == "system":
        pieces.append(items[index].text)
        head = spans[index][1]
        index += 1
    stateful = body.get("previous_response_id") is not None or body.get("conversation") is not None
    return BodyView(
        api="responses",
        body=body,
        system=_SEP.join(pieces) if pieces else None,
        system_texts=tuple(pieces),
        head=head,
        messages=items[index:],
        sources=[Source(a, b) for a, b in spans[index:]],
        tools=reader.tools(body),
        stateful=stateful,
    )


def _read_anthropic(body: Mapping[str, Any]) -> BodyView:
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise WireError("an Anthropic body needs a 'messages' list", "messages")
    raw_system = body.get("system")
    if raw_system is not None and not isinstance(raw_system, str | list):
        raise WireError("system must be a string or a list of text blocks", "system")
    system, _, marks = read_anthropic({"system": raw_system, "messages": []})
    texts: tuple[str, ...] = ()
    if isinstance(raw_system, str):
        texts = (raw_system,)
    elif isinstance(raw_system, list):
        texts = tuple(str(b.get("text", "")) for b in raw_system if isinstance(b, Mapping))
    breakpoints: set[int] = set(marks or ())
    tools = Reader(strict=True).tools(body)
    if any("cache_control" in t for t in tools):
        breakpoints.add(-1)
    messages: list[Message] = []
    sources: list[Source] = []
    names: dict[str, str] = {}
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise WireError(f"messages[{i}] must be a JSON object", f"messages[{i}]")
        role = entry.get("role")
        if role not in ("user", "assistant"):
            raise WireError(f"messages[{i}].role must be 'user' or 'assistant'", f"messages[{i}]")
        content = entry.get("content")
        if not isinstance(content, str | list):
            raise WireError(f"messages[{i}].content must be a string or a list", f"messages[{i}]")
        _, found, local = read_anthropic({"messages": [entry]})
        blocks = content if isinstance(content, list) else []
        results = [
            k
            for k, b in enumerate(blocks)
            if isinstance(b, Mapping) and b.get("type") == "tool_result"
        ]
        rest = tuple(k for k in range(len(blocks)) if k not in set(results))
        offset = len(messages)
        for n, message in enumerate(found):
            if message.role == "assistant":
                names.update((c.id, c.name) for c in message.tool_calls)
                source = Source(i, i + 1, tuple(range(len(blocks))))
            elif message.role == "tool":
                message = Message(  # noqa: PLW2901 - the name is known from earlier turns only
                    role="tool",
                    content=message.content,
                    tool_call_id=message.tool_call_id,
                    name=names.get(str(message.tool_call_id)),
                )
                source = Source(i, i + 1, (results[n],))
            else:
                source = Source(i, i + 1, rest)
            messages.append(message)
            sources.append(source)
        breakpoints.update(offset + k for k in local or ())
    return BodyView(
        api="anthropic",
        body=body,
        system=system,
        system_texts=texts,
        head=0,
        messages=messages,
        sources=sources,
        tools=tools,
        breakpoints=sorted(breakpoints) or None,
    )


# --------------------------------------------------------------------------- alignment

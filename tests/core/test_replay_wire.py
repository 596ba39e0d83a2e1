"""Wire formats of the replay provider: request bodies in, reply bodies out.

Parsing is checked on hand-written bodies in the shapes LangChain, the Agents SDK and the
`openai` client send; writing is validated with the `openai` package's own models; the
round trips (neutral messages -> wire -> neutral) are hypothesis properties on the rendered
prompt, which is what the cache simulator compares.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage
from openai.types.responses import Response, ResponseStreamEvent, ResponseUsage
from pydantic import TypeAdapter

from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.sim import Request, render_request
from cachepilot.tokens import TokenCounter
from cachepilot.usage import Usage
from cachepilot.wire import (
    WireError,
    chat_chunks,
    chat_completion,
    chat_messages,
    chat_usage,
    request_from_chat,
    request_from_responses,
    responses_events,
    responses_input,
    responses_items,
    responses_object,
    responses_usage,
    sse,
)


class CharEncoding:
    """One token per character (fast, and any text encodes)."""

    name = "chars"

    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


COUNTER = TokenCounter(CharEncoding())
EVENTS = TypeAdapter(ResponseStreamEvent)

FLAT_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "strict": False,
}
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def keys(request: Request) -> list[int]:
    return list(render_request(request, COUNTER).keys)


# --------------------------------------------------------------------------- chat in


def test_chat_body_to_request() -> None:
    body = {
        "model": "gpt-5.4-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x/cat.png", "detail": "low"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"},
            {"role": "system", "content": "Mid-conversation note."},
        ],
        "tools": [CHAT_TOOL],
    }
    request = request_from_chat(body, timestamp=5.0)
    assert request.system == "You are terse.\n\nUse tools."
    assert request.model == "gpt-5.4-mini"
    assert request.timestamp == 5.0
    assert request.tools == (CHAT_TOOL,)
    user, assistant, tool, note = request.messages
    assert user.content == (
        TextPart("What is in this picture?"),
        ImagePart(url="https://x/cat.png", detail="low"),
    )
    assert assistant == Message(
        "assistant", "", tool_calls=(ToolCall("call_1", "read_file", '{"path": "a.py"}'),)
    )
    assert tool == Message("tool", "print(1)", tool_call_id="call_1", name="read_file")
    assert note == Message("system", "Mid-conversation note.")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [], "tools": {"a": 1}}, "tools"),
    ],
)
def test_chat_body_errors_name_the_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(WireError) as info:
        request_from_chat(body)
    assert info.value.param == param


# --------------------------------------------------------------------------- responses in


def test_responses_items_merge_one_turn() -> None:
    items = [
        {"role": "developer", "content": "Be careful."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Plan: read."}],
            "encrypted_content": "opaque",
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "content": [{"type": "output_text", "text": "Reading.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "grep", "arguments": '{"p": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "two"}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}],
        },
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    request = request_from_responses(
        {"instructions": "You are Forge.", "input": items, "tools": [FLAT_TOOL]}
    )
    assert request.system == "You are Forge.\n\nBe careful."
    assert request.tools == (FLAT_TOOL,)
    user, turn, out1, out2, image, unknown = request.messages
    assert user == Message("user", "Go")
    assert turn == Message(
        "assistant",
        (ReasoningPart("Plan: read.", signature="opaque"), TextPart("Reading.")),
        tool_calls=(ToolCall("c1", "read_file", "{}"), ToolCall("c2", "grep", '{"p": 1}')),
    )
    assert out1 == Message("tool", "one", tool_call_id="c1", name="read_file")
    assert out2 == Message("tool", "two", tool_call_id="c2", name="grep")
    assert image.content == (ImagePart(url="data:image/png;base64,AA"),)
    assert unknown.role == "user" and '"web_search_call"' in unknown.text


def test_responses_string_input_and_history() -> None:
    history = [Message("user", "first"), Message("assistant", "reply")]
    request = request_from_responses({"input": "second"}, history=history)
    assert request.system is None
    assert request.messages == (*history, Message("user", "second"))


def test_a_reasoning_item_after_calls_starts_a_new_turn() -> None:
    items = [
        {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
    ]
    first, second = responses_items(items)
    assert [c.id for c in first.tool_calls] == ["c1"]
    assert [c.id for c in second.tool_calls] == ["c2"]
    assert second.content == (ReasoningPart(""),)


@pytest.mark.parametrize(
    "body",
    [
        {"input": 3},
        {"input": [{"type": "function_call", "name": "a"}]},
        {"input": [{"type": "function_call_output", "call_id": "", "output": "x"}]},
        {"input": [{"type": "message", "role": "robot", "content": "x"}]},
        {"input": [{"type": "message", "role": "user", "content": [{"type": "input_image"}]}]},
        {"input": "x", "instructions": 7},
    ],
)
def test_responses_body_errors(body: dict[str, Any]) -> None:
    with pytest.raises(WireError):
        request_from_responses(body)


# --------------------------------------------------------------------------- round trips

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_IMAGE = st.builds(
    ImagePart,
    url=st.sampled_from(["https://x/a.png", "data:image/png;base64,AAAA", "https://x/b.jpg"]),
    detail=st.sampled_from([None, "low", "high"]),
)


@st.composite
def conversations(draw: st.DrawFn, *, reasoning: bool) -> list[Message]:
    """User turns, each followed by assistant turns and their tool results."""
    out: list[Message] = []
    call_no = 0
    for _ in range(draw(st.integers(1, 3))):
        parts = draw(st.lists(st.one_of(_TEXT.map(TextPart), _IMAGE), min_size=1, max_size=3))
        out.append(Message("user", draw(st.one_of(_TEXT, st.just(tuple(parts))))))
        for _ in range(draw(st.integers(0, 3))):
            calls = []
            for _ in range(draw(st.integers(0, 3))):
                call_no += 1
                name = draw(st.sampled_from(["read_file", "bash", "grep"]))
                calls.append(ToolCall(f"call_{call_no}", name, json.dumps({"x": draw(_TEXT)})))
            text = draw(_TEXT)
            content: str | tuple[Any, ...] = text
            if reasoning and draw(st.booleans()):
                content = (ReasoningPart(draw(_TEXT), draw(st.none() | _TEXT)), TextPart(text))
            if not calls and not text and isinstance(content, str):
                content = "ok"
            out.append(Message("assistant", content, tool_calls=tuple(calls)))
            for call in calls:
                result = draw(st.one_of(_TEXT, st.tuples(_TEXT.map(TextPart), _IMAGE)))
                out.append(Message("tool", result, tool_call_id=call.id, name=call.name))
            if not calls:  # a reply without calls ends the turn: the user speaks next
                break
    return out


@settings(max_examples=80, deadline=None)
@given(conversations(reasoning=False), st.none() | _TEXT)
def test_chat_round_trip_renders_the_same_prompt(
    messages: list[Message], system: str | None
) -> None:
    body = {"messages": chat_messages(system, messages), "tools": [CHAT_TOOL]}
    parsed = request_from_chat(json.loads(json.dumps(body)))
    assert keys(parsed) == keys(Request(system, messages, [CHAT_TOOL]))


@settings(max_examples=80, deadline=None)
@given(conversations(reasoning=True), st.none() | _TEXT.filter(bool))
def test_responses_round_trip_renders_the_same_prompt(
    messages: list[Message], system: str | None
) -> None:
    body = {"input": responses_input(messages), "tools": [FLAT_TOOL]}
    if system is not None:
        body["instructions"] = system
    parsed = request_from_responses(json.loads(json.dumps(body)))
    assert keys(parsed) == keys(Request(system, messages, [FLAT_TOOL]))


# --------------------------------------------------------------------------- usage out

_USAGE = st.builds(
    lambda total, cached, write, out, reasoning: Usage(
        total, min(cached, total), min(write, total - min(cached, total)), out, min(reasoning, out)
    ),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**5),
    st.integers(0, 10**5),
)


@given(_USAGE)
def test_usage_blocks_parse_back(usage: Usage) -> None:
    chat = chat_usage(usage, report_writes=True)
    CompletionUsage.model_validate(chat)
    assert Usage.from_openai_chat(chat) == usage
    without_writes = Usage.from_openai_chat(chat_usage(usage))
    assert without_writes.cache_write_tokens == 0
    assert without_writes.cached_tokens == usage.cached_tokens
    responses = responses_usage(usage)
    ResponseUsage.model_validate(responses)
    assert Usage.from_openai_responses(responses) == usage


# --------------------------------------------------------------------------- replies out

REPLY = Message(
    "assistant",
    (ReasoningPart("Think about it. " * 5, signature="enc"), TextPart("Calling two tools. " * 4)),
    tool_calls=(
        ToolCall("call_a", "read_file", json.dumps({"path": "inventory/service.py" * 4})),
        ToolCall("call_b", "bash", '{"command": "pytest -q"}'),
    ),
)
USAGE = Usage(2000, 1920, 0, 80, 10)


@pytest.mark.parametrize("reply", [REPLY, Message("assistant", "Done."), Message("assistant", "")])
def test_chat_completion_validates(reply: Message) -> None:
    body = chat_completion(reply, id="chatcmpl-1", model="m", created=1, usage=chat_usage(USAGE))
    parsed = ChatCompletion.model_validate(body)
    choice = parsed.choices[0]
    assert choice.message.content == (reply.text if reply.text or not reply.tool_calls else None)
    assert [
        (c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []
    ] == [(c.id, c.name, c.arguments) for c in reply.tool_calls]
    assert choice.finish_reason == ("tool_calls" if reply.tool_calls else "stop")


@pytest.mark.parametrize("include_usage", [True, False])
def test_chat_chunks_reassemble(include_usage: bool) -> None:
    chunks = [
        ChatCompletionChunk.model_validate(c)
        for c in chat_chunks(
            REPLY,
            id="c",
            model="m",
            created=1,
            usage=chat_usage(USAGE),
            include_usage=include_usage,
        )
    ]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls: dict[int, list[str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(delta.index, ["", "", ""])
            entry[0] += delta.id or ""
            entry[1] += (delta.function and delta.function.name) or ""
            entry[2] += (delta.function and delta.function.arguments) or ""
    assert text == REPLY.text
    assert [tuple(calls[i]) for i in sorted(calls)] == [
        (c.id, c.name, c.arguments) for c in REPLY.tool_calls
    ]
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1
    assert Usage.from_openai_chat(with_usage[0].usage) == Usage(2000, 1920, 0, 80, 10)
    assert (with_usage[0].choices == []) is include_usage


def test_responses_object_and_events_validate() -> None:
    body = {"model": "m", "tools": [FLAT_TOOL], "instructions": "Be brief.", "input": "x"}
    final = responses_object(
        REPLY, id="resp_1", model="m", created=1.0, usage=responses_usage(USAGE), body=body
    )
    parsed = Response.model_validate(final)
    assert parsed.status == "completed"
    kinds = [item.type for item in parsed.output]
    assert kinds == ["reasoning", "message", "function_call", "function_call"]
    assert parsed.output_text == REPLY.text
    assert [
        (i.call_id, i.name, i.arguments) for i in parsed.output if i.type == "function_call"
    ] == [(c.id, c.name, c.arguments) for c in REPLY.tool_calls]
    assert Usage.from_openai_responses(parsed.usage) == USAGE

    events = [
        EVENTS.validate_python(e)
        for e in responses_events(
            REPLY, id="resp_1", model="m", created=1.0, usage=responses_usage(USAGE), body=body
        )
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == REPLY.text
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert summary == REPLY.parts[0].text
    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert args == [c.arguments for c in REPLY.tool_calls]
    assert events[-1].response.model_dump() == parsed.model_dump()


def test_sse_framing() -> None:
    payload = sse([{"type": "a", "text": "é\ud800"}], named=True, done=False).decode("ascii")
    assert payload.startswith("event: a\ndata: {")
    assert payload.endswith("}\n\n")
    assert json.loads(payload.split("data: ", 1)[1])["text"] == "é\ud800"
    assert sse([], named=False, done=True) == b"data: [DONE]\n\n"

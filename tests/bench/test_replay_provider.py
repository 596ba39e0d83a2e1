"""The replay provider over real HTTP, driven by the real `openai` client.

Every request goes through loopback HTTP; replies, tool call ids and usage are read back
with the client's own models. The demo session gives realistic bodies (a ~1,150-token
first request, 58 turns, a 735 s idle gap before call `TASK2_FIRST_CALL`).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import OpenAI
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from cachepilot.messages import Message, ReasoningPart, TextPart, ToolCall
from cachepilot.sim import LOGICAL_STEP_SECONDS
from cachepilot.usage import Usage
from cachepilot.wire import chat_messages, responses_input
from cachepilot_bench.demo_workload import (
    DEMO_TOOL_SCHEMAS,
    TASK2_FIRST_CALL,
    build_demo_session,
    call_timestamp,
    volatile_system_prompt,
)
from cachepilot_bench.replay import (
    FINISHED_TEXT,
    ReplayProvider,
    ReplayRecord,
    ReplayScript,
    ReplayTurn,
)
from cachepilot_bench.traces.session import Session

SESSION = build_demo_session()
SCRIPT = ReplayScript.from_session(SESSION)
ASSISTANT_AT = SESSION.assistant_indices
FLAT_TOOLS = [{"type": "function", **t["function"]} for t in DEMO_TOOL_SCHEMAS]


def history(call: int) -> list[Message]:
    """The demo conversation (system prompt excluded) before model call `call`."""
    return SESSION.messages[1 : ASSISTANT_AT[call]]


def client(provider: ReplayProvider) -> OpenAI:
    return OpenAI(base_url=provider.base_url, api_key=provider.api_key, max_retries=0)


def chat_call(
    api: OpenAI, call: int, *, stream: bool, system: str | None = None
) -> tuple[Message, Any]:
    """Send demo call `call` over Chat Completions; the reply as a Message, and the usage."""
    kwargs: dict[str, Any] = {
        "model": "gpt-5.4-mini",
        "messages": chat_messages(system or SCRIPT.system, history(call)),
        "tools": DEMO_TOOL_SCHEMAS,
    }
    if not stream:
        done = api.chat.completions.create(**kwargs)
        message = done.choices[0].message
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()
        )
        return Message("assistant", message.content or "", tool_calls=calls), done.usage
    text, usage = "", None
    parts: dict[int, list[str]] = {}
    finish = None
    for chunk in api.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        text += choice.delta.content or ""
        for delta in choice.delta.tool_calls or ():
            entry = parts.setdefault(delta.index, ["", "", ""])
            entry[0] += delta.id or ""
            entry[1] += (delta.function and delta.function.name) or ""
            entry[2] += (delta.function and delta.function.arguments) or ""
    calls = tuple(ToolCall(*parts[i]) for i in sorted(parts))
    assert finish == ("tool_calls" if calls else "stop")
    return Message("assistant", text, tool_calls=calls), usage


def responses_call(api: OpenAI, call: int, *, stream: bool) -> tuple[Message, Any]:
    """Send demo call `call` over the Responses API; the reply as a Message, and the usage."""
    kwargs: dict[str, Any] = {
        "model": "gpt-5.4-mini",
        "instructions": SCRIPT.system,
        "input": responses_input(history(call)),
        "tools": FLAT_TOOLS,
    }
    if stream:
        with api.responses.stream(**kwargs) as events:
            seen = [event.type for event in events]
            response = events.get_final_response()
        assert seen[0] == "response.created" and seen[-1] == "response.completed"
    else:
        response = api.responses.create(**kwargs)
    assert response.status == "completed"
    calls = tuple(
        ToolCall(item.call_id, item.name, item.arguments)
        for item in response.output
        if item.type == "function_call"
    )
    return Message("assistant", response.output_text, tool_calls=calls), response.usage


def same_reply(served: Message, turn: ReplayTurn) -> bool:
    expected = turn.message
    return served.text == expected.text and served.tool_calls == expected.tool_calls


@pytest.fixture
def provider() -> Iterator[ReplayProvider]:
    with ReplayProvider(SCRIPT) as running:
        yield running


# --------------------------------------------------------------------------- replies and usage


@pytest.mark.parametrize("stream", [False, True])
def test_chat_replays_the_script_and_the_cache_grows(
    provider: ReplayProvider, stream: bool
) -> None:
    api = client(provider)
    cached = []
    for call in range(6):
        reply, usage = chat_call(api, call, stream=stream)
        assert same_reply(reply, SCRIPT.turns[call])
        record = provider.records[call]
        assert Usage.from_openai_chat(usage) == record.usage
        assert usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens
        assert record.prefix_extends and record.turn == call and record.stream is stream
        cached.append(usage.prompt_tokens_details.cached_tokens)
    assert cached[0] == 0
    assert all(b >= a for a, b in itertools.pairwise(cached))
    assert cached[-1] > cached[1] > 0
    assert provider.remaining == len(SCRIPT) - 6


@pytest.mark.parametrize("stream", [False, True])
def test_responses_replays_the_script_and_the_cache_grows(
    provider: ReplayProvider, stream: bool
) -> None:
    api = client(provider)
    cached = []
    for call in range(6):
        reply, usage = responses_call(api, call, stream=stream)
        assert same_reply(reply, SCRIPT.turns[call])
        record = provider.records[call]
        assert record.api == "responses" and record.prefix_extends
        assert Usage.from_openai_responses(usage) == record.usage
        cached.append(usage.input_tokens_details.cached_tokens)
    assert cached[0] == 0
    assert all(b >= a for a, b in itertools.pairwise(cached))
    assert cached[-1] > cached[1] > 0


def test_changing_the_system_prompt_breaks_the_prefix(provider: ReplayProvider) -> None:
    api = client(provider)
    chat_call(api, 0, stream=False)
    _, warm = chat_call(api, 1, stream=False)
    assert warm.prompt_tokens_details.cached_tokens > 1000
    # The demo agent's prompt carries the current time: call 2's rendering differs early.
    _, cold = chat_call(api, 2, stream=False, system=volatile_system_prompt(2))
    assert cold.prompt_tokens_details.cached_tokens == 0
    record = provider.records[2]
    assert not record.prefix_extends
    assert provider.simulator.last is not None
    assert provider.simulator.last.divergence == "system"


def test_recorded_timestamps_expire_the_cache_across_the_idle_gap(
    provider: ReplayProvider,
) -> None:
    api = client(provider)
    for call in range(TASK2_FIRST_CALL + 2):
        assert provider.clock() == call_timestamp(call)
        chat_call(api, call, stream=False)
    records = provider.records
    assert [r.timestamp for r in records] == [call_timestamp(c) for c in range(len(records))]
    before, gap, after = records[TASK2_FIRST_CALL - 1 : TASK2_FIRST_CALL + 2]
    assert gap.timestamp - before.timestamp > provider.simulator.profile.ttl_seconds
    assert before.usage.cached_tokens > 10_000
    assert gap.prefix_extends and gap.usage.cached_tokens == 0  # same prefix, cache expired
    assert after.usage.cached_tokens > 10_000


def test_logical_clock_without_timestamps() -> None:
    script = ReplayScript([ReplayTurn(Message("assistant", f"t{i}")) for i in range(3)])
    with ReplayProvider(script) as provider:
        api = client(provider)
        clocks = []
        for _ in range(3):
            clocks.append(provider.clock())
            api.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert clocks == [0.0, LOGICAL_STEP_SECONDS, 2 * LOGICAL_STEP_SECONDS]
        assert [r.timestamp for r in provider.records] == clocks


def test_reasoning_turns_report_reasoning_tokens() -> None:
    turn = ReplayTurn(
        Message(
            "assistant",
            (ReasoningPart("First check the tests.", signature="enc-1"), TextPart("Running.")),
            tool_calls=(ToolCall("call_9", "bash", '{"command": "pytest"}'),),
        ),
        output_tokens=40,
    )
    with ReplayProvider(ReplayScript([turn, turn])) as provider:
        api = client(provider)
        response = api.responses.create(model="m", input="go")
        reasoning = response.output[0]
        assert reasoning.type == "reasoning"
        assert reasoning.encrypted_content == "enc-1"
        assert [s.text for s in reasoning.summary] == ["First check the tests."]
        assert response.usage is not None
        assert response.usage.output_tokens == 40
        assert 0 < response.usage.output_tokens_details.reasoning_tokens < 40
        chat = api.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
        assert chat.choices[0].message.content == "Running."
        assert chat.usage is not None and chat.usage.completion_tokens_details is not None
        assert chat.usage.completion_tokens_details.reasoning_tokens > 0


def test_previous_response_id_prepends_the_stored_conversation(
    provider: ReplayProvider,
) -> None:
    api = client(provider)
    first = api.responses.create(
        model="m", instructions=SCRIPT.system, input=responses_input(history(0)), tools=FLAT_TOOLS
    )
    outputs = [
        {"type": "function_call_output", "call_id": item.call_id, "output": "listing"}
        for item in first.output
        if item.type == "function_call"
    ]
    assert outputs
    second = api.responses.create(
        model="m",
        instructions=SCRIPT.system,
        previous_response_id=first.id,
        input=outputs,
        tools=FLAT_TOOLS,
    )
    record = provider.records[1]
    assert record.request.messages[0] == SESSION.messages[1]
    assert record.request.messages[1].tool_calls == SCRIPT.turns[0].message.tool_calls
    assert record.request.messages[2].role == "tool"
    assert record.prefix_extends
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens > 1000
    assert second.previous_response_id == first.id
    with pytest.raises(openai.BadRequestError, match="previous response"):
        api.responses.create(model="m", previous_response_id="resp_unknown", input="x")
    assert len(provider.records) == 2


def test_anthropic_profile_reports_cache_writes() -> None:
    with ReplayProvider(SCRIPT, profile="anthropic") as provider:
        api = client(provider)
        _, usage = chat_call(api, 0, stream=False)
        details = usage.prompt_tokens_details
        assert details.cache_write_tokens == usage.prompt_tokens
        assert Usage.from_openai_chat(usage).cache_write_tokens == usage.prompt_tokens
        _, usage = chat_call(api, 1, stream=False)
        assert usage.prompt_tokens_details.cached_tokens > 0


# --------------------------------------------------------------------------- end of script, errors


def test_exhausted_script_ends_agent_loops(caplog: pytest.LogCaptureFixture) -> None:
    script = ReplayScript(
        [ReplayTurn(Message("assistant", "", tool_calls=(ToolCall("c1", "bash", "{}"),)))]
    )
    with ReplayProvider(script) as provider, caplog.at_level(logging.WARNING):
        api = client(provider)
        body = [{"role": "user", "content": "go"}]
        first = api.chat.completions.create(model="m", messages=body)
        assert first.choices[0].finish_reason == "tool_calls"
        for _ in range(2):
            done = api.chat.completions.create(model="m", messages=body)
            assert done.choices[0].message.content == FINISHED_TEXT
            assert done.choices[0].message.tool_calls is None
            assert done.choices[0].finish_reason == "stop"
        streamed = api.responses.create(model="m", input="go", stream=True)
        final = next(e for e in streamed if e.type == "response.completed").response
        assert final.output_text == FINISHED_TEXT
        assert provider.remaining == 0
        assert [r.turn for r in provider.records] == [0, None, None, None]
    warnings = [r for r in caplog.records if "recorded turns served" in r.getMessage()]
    assert len(warnings) == 1


def test_errors_are_openai_shaped(provider: ReplayProvider) -> None:
    api = client(provider)
    raw = httpx.post(f"{provider.base_url}/chat/completions", content=b"{not json")
    assert raw.status_code == 400
    assert raw.json()["error"]["type"] == "invalid_request_error"
    raw = httpx.post(f"{provider.base_url}/responses", json=[1, 2])
    assert raw.status_code == 400
    with pytest.raises(openai.NotFoundError, match="unknown path"):
        api.post("/embeddings", cast_to=object, body={"input": "x"})
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "x"}])
    assert "messages[0].role" in str(info.value)
    assert httpx.get(f"{provider.base_url}/chat/completions").status_code == 405
    # Rejected requests consume no turn.
    assert provider.records == [] and provider.remaining == len(SCRIPT)
    assert [m.id for m in api.models.list()] == ["cachepilot-replay"]


def test_not_started_provider_says_so() -> None:
    provider = ReplayProvider(SCRIPT)
    with pytest.raises(RuntimeError, match="not serving"):
        _ = provider.base_url
    provider.start()
    try:
        assert provider.base_url.startswith("http://127.0.0.1:")
    finally:
        provider.close()
    provider.close()  # idempotent


# --------------------------------------------------------------------------- log, load, threads


def test_write_log_and_load(provider: ReplayProvider, tmp_path: Path) -> None:
    api = client(provider)
    chat_call(api, 0, stream=True)
    responses_call(api, 1, stream=False)
    path = provider.write_log(tmp_path / "requests.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["api"], x["url_path"], x["stream"]) for x in lines] == [
        ("chat", "/v1/chat/completions", True),
        ("responses", "/v1/responses", False),
    ]
    assert lines[0]["request"]["messages"][0] == {"role": "system", "content": SCRIPT.system}
    assert Usage.from_openai_chat(lines[0]["usage"]) == provider.records[0].usage
    assert Usage.from_openai_responses(lines[1]["usage"]) == provider.records[1].usage
    assert lines[1]["timestamp"] == call_timestamp(1)
    completion = ChatCompletion.model_validate(lines[0]["response"])  # the stream, added up
    assert completion.choices[0].message.content == SCRIPT.turns[0].message.text
    assert Response.model_validate(lines[1]["response"]).id == provider.records[1].response_id
    provider.load(SCRIPT)
    assert provider.records == [] and provider.remaining == len(SCRIPT)
    reply, usage = chat_call(api, 0, stream=False)
    assert same_reply(reply, SCRIPT.turns[0])
    assert usage.prompt_tokens_details.cached_tokens == 0  # fresh simulator


def test_concurrent_requests_each_get_one_turn(provider: ReplayProvider) -> None:
    api = client(provider)
    replies: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(5):
            done = api.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "go"}]
            )
            with lock:
                replies.append(done.choices[0].message.content or "")

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = provider.records
    assert [r.index for r in records] == list(range(30))
    assert [r.turn for r in records] == list(range(30))
    assert sorted(replies) == sorted(r.reply.text for r in records)


# --------------------------------------------------------------------------- scripts


def test_script_from_session_and_schemas() -> None:
    assert len(SCRIPT) == len(ASSISTANT_AT)
    assert SCRIPT.turns[0].timestamp == call_timestamp(0)
    assert SCRIPT.system == SESSION.messages[0].text
    assert [at for at, _ in SCRIPT.prompts] == [0, TASK2_FIRST_CALL]
    first_call = SCRIPT.turns[0].message.tool_calls[0]
    assert SCRIPT.output_for(first_call.id) == SESSION.messages[ASSISTANT_AT[0] + 1].text
    assert SCRIPT.output_for("nope") is None
    assert SCRIPT.tool_schemas() == DEMO_TOOL_SCHEMAS
    flat = ReplayScript([], tools=FLAT_TOOLS)
    assert flat.tool_schemas() == DEMO_TOOL_SCHEMAS

    bare = Session(id="s", source="test", messages=SESSION.messages[:8])
    inferred = ReplayScript.from_session(bare)
    names = [t["function"]["name"] for t in inferred.tool_schemas()]
    used = [c.name for m in SESSION.messages[:8] for c in m.tool_calls]
    assert names == list(dict.fromkeys(used))
    params = inferred.tool_schemas()[0]["function"]["parameters"]
    assert params["additionalProperties"] is True and "path" in params["properties"]
    assert inferred.turns[0].timestamp is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: ReplayTurn(Message("user", "x")),
        lambda: ReplayTurn(Message("assistant", "x"), timestamp=float("nan")),
        lambda: ReplayTurn(Message("assistant", "x"), output_tokens=-1),
        lambda: ReplayScript(["not a turn"]),
        lambda: ReplayScript([], tool_outputs={"c": 3}),
        lambda: ReplayProvider(SCRIPT, profile="no-such-provider"),
    ],
)
def test_bad_configuration_fails_fast(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


# --------------------------------------------------------------------------- property

_WORD = st.text("abcdefghij klmnop", min_size=0, max_size=30)


@st.composite
def scripts(draw: st.DrawFn) -> ReplayScript:
    turns = []
    call_no = 0
    for _ in range(draw(st.integers(1, 6))):
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            call_no += 1
            args = json.dumps({"q": draw(_WORD)})
            calls.append(ToolCall(f"call_{call_no}", draw(st.sampled_from(["a", "b"])), args))
        text = draw(_WORD) * draw(st.integers(1, 80))
        stamp = draw(st.none() | st.floats(0, 1e6))
        turns.append(ReplayTurn(Message("assistant", text, tool_calls=tuple(calls)), stamp))
    return ReplayScript(turns)


@pytest.fixture(scope="module")
def shared_provider() -> Iterator[ReplayProvider]:
    with ReplayProvider(ReplayScript([])) as running:
        yield running


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts(), modes=st.lists(st.sampled_from(["chat", "chat-stream", "responses"])))
def test_served_replies_follow_the_script(
    shared_provider: ReplayProvider, script: ReplayScript, modes: list[str]
) -> None:
    provider = shared_provider
    provider.load(script)
    api = client(provider)
    conversation: list[Message] = [Message("user", "Please work. " * 150)]
    served: list[ReplayRecord] = []
    for k in range(len(script)):
        mode = modes[k % len(modes)] if modes else "chat"
        if mode == "responses":
            response = api.responses.create(model="m", input=responses_input(conversation))
            assert response.usage is not None
            usage = Usage.from_openai_responses(response.usage)
            calls = tuple(
                ToolCall(i.call_id, i.name, i.arguments)
                for i in response.output
                if i.type == "function_call"
            )
            reply = Message("assistant", response.output_text, tool_calls=calls)
        else:
            body = {"messages": chat_messages(None, conversation), "model": "m"}
            if mode == "chat":
                done = api.chat.completions.create(**body)
                assert done.usage is not None
                usage = Usage.from_openai_chat(done.usage)
                message = done.choices[0].message
                reply = Message(
                    "assistant",
                    message.content or "",
                    tool_calls=tuple(
                        ToolCall(c.id, c.function.name, c.function.arguments)
                        for c in message.tool_calls or ()
                    ),
                )
            else:
                chunks = list(api.chat.completions.create(**body, stream=True))
                usage = Usage.from_openai_chat(next(c for c in chunks if c.usage).usage)
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                reply = Message("assistant", text, tool_calls=provider.records[-1].reply.tool_calls)
        turn = script.turns[k]
        assert same_reply(reply, turn)
        assert usage.cached_tokens <= usage.input_tokens
        assert usage == provider.records[-1].usage
        served.append(provider.records[-1])
        conversation.append(turn.message)
        conversation.extend(
            Message("tool", "result", tool_call_id=c.id, name=c.name)
            for c in turn.message.tool_calls
        )
    assert [r.turn for r in served] == list(range(len(script)))
    assert provider.remaining == 0

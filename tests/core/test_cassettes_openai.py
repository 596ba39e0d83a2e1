"""Record/replay of real HTTP traffic from the `openai` client and LangChain's `ChatOpenAI`.

The cassettes in ``tests/cassettes/*.yaml`` were recorded against the replay provider (the
embedded OpenAI-compatible endpoint): the requests are what the real clients serialized,
the responses what the provider answered. In CI they replay offline: a cassette that exists
is played with record mode ``none`` (no network; a request that matches nothing fails), a
missing one is recorded with ``once``. Requests match on method, path and body; host and
port are ignored, because the replay provider binds a random port.

Re-recording
    Delete the cassette(s) and run ``uv run pytest tests/core/test_cassettes_openai.py``:
    missing cassettes are recorded against the replay provider. ``CACHEPILOT_RECORD_MODE``
    overrides the mode (``once``, ``new_episodes``, ``all``, ``none``).

Recording against the real API
    Set ``OPENAI_API_KEY`` and ``CACHEPILOT_LIVE_BASE_URL=https://api.openai.com/v1``
    (optionally ``CACHEPILOT_LIVE_MODEL``, default ``gpt-5.4-mini``), delete the cassettes,
    and run the module with ``CACHEPILOT_RECORD_MODE=once``. Checks that only hold for a
    replay (exact replies, cache hits on the second call) are skipped for live responses.
    The ``authorization`` header is removed before a cassette is written
    (``filter_headers=["authorization"]``), so no key ever lands in a cassette; the other
    headers the clients send carry no secret.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vcr
from openai import OpenAI

from cachepilot.messages import Message, ToolCall
from cachepilot.usage import Usage
from cachepilot.wire import chat_messages, responses_input
from cachepilot_bench.demo_workload import DEMO_TOOL_SCHEMAS, build_demo_session
from cachepilot_bench.replay import ReplayProvider, ReplayScript

CASSETTES = Path(__file__).resolve().parents[1] / "cassettes"
LIVE_BASE_URL = os.environ.get("CACHEPILOT_LIVE_BASE_URL")
MODEL = os.environ.get("CACHEPILOT_LIVE_MODEL", "gpt-5.4-mini") if LIVE_BASE_URL else "gpt-5.4-mini"

SESSION = build_demo_session()
SCRIPT = ReplayScript.from_session(SESSION)
ASSISTANT_AT = SESSION.assistant_indices
FLAT_TOOLS = [{"type": "function", **t["function"]} for t in DEMO_TOOL_SCHEMAS]


def history(call: int) -> list[Message]:
    return SESSION.messages[1 : ASSISTANT_AT[call]]


def cassette(name: str) -> Any:
    """A vcrpy context for `tests/cassettes/<name>.yaml` (mode: see the module docstring)."""
    path = CASSETTES / f"{name}.yaml"
    mode = os.environ.get("CACHEPILOT_RECORD_MODE") or ("none" if path.exists() else "once")
    return vcr.VCR(
        cassette_library_dir=str(CASSETTES),
        record_mode=mode,
        match_on=("method", "path", "body"),
        filter_headers=["authorization"],
        decode_compressed_response=True,
    ).use_cassette(f"{name}.yaml")


@pytest.fixture
def endpoint() -> Iterator[tuple[str, str]]:
    """(base URL, API key): the replay provider, or the live API when configured."""
    if LIVE_BASE_URL:
        yield LIVE_BASE_URL, os.environ.get("OPENAI_API_KEY", "")
        return
    with ReplayProvider(SCRIPT) as provider:
        yield provider.base_url, provider.api_key


def replayed(response_id: str | None) -> bool:
    """The response came from the replay provider (its ids carry a `replay` marker)."""
    return bool(response_id) and "replay" in str(response_id)


def expect_turn(call: int, text: str, calls: list[ToolCall], response_id: str | None) -> None:
    if not replayed(response_id):
        return
    turn = SCRIPT.turns[call].message
    assert text == turn.text
    assert calls == list(turn.tool_calls)


def test_chat_completions_cassette(endpoint: tuple[str, str]) -> None:
    base_url, key = endpoint
    api = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    cached = []
    with cassette("openai_chat_completions"):
        for call in range(2):
            done = api.chat.completions.create(
                model=MODEL,
                messages=chat_messages(SCRIPT.system, history(call)),
                tools=DEMO_TOOL_SCHEMAS,
            )
            message = done.choices[0].message
            calls = [
                ToolCall(c.id, c.function.name, c.function.arguments)
                for c in message.tool_calls or ()
            ]
            expect_turn(call, message.content or "", calls, done.id)
            assert done.usage is not None
            usage = Usage.from_openai_chat(done.usage)
            assert usage.cached_tokens <= usage.input_tokens
            cached.append(usage.cached_tokens)
    if replayed(done.id):
        assert cached[0] == 0 and cached[1] > 1000


def test_chat_completions_streaming_cassette(endpoint: tuple[str, str]) -> None:
    base_url, key = endpoint
    api = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    with cassette("openai_chat_completions_stream"):
        chunks = list(
            api.chat.completions.create(
                model=MODEL,
                messages=chat_messages(SCRIPT.system, history(0)),
                tools=DEMO_TOOL_SCHEMAS,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    ids = [d.id for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or () if d.id]
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0].choices == []
    assert Usage.from_openai_chat(usage_chunks[0].usage).input_tokens > 0
    if replayed(chunks[0].id):
        assert text == SCRIPT.turns[0].message.text
        assert ids == [c.id for c in SCRIPT.turns[0].message.tool_calls]


def test_responses_cassette(endpoint: tuple[str, str]) -> None:
    base_url, key = endpoint
    api = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    with cassette("openai_responses"):
        first = api.responses.create(
            model=MODEL,
            instructions=SCRIPT.system,
            input=responses_input(history(0)),
            tools=FLAT_TOOLS,
        )
        events = list(
            api.responses.create(
                model=MODEL,
                instructions=SCRIPT.system,
                input=responses_input(history(1)),
                tools=FLAT_TOOLS,
                stream=True,
            )
        )
    for call, response in ((0, first), (1, events[-1].response)):
        calls = [
            ToolCall(i.call_id, i.name, i.arguments)
            for i in response.output
            if i.type == "function_call"
        ]
        expect_turn(call, response.output_text, calls, response.id)
        assert response.usage is not None
        usage = Usage.from_openai_responses(response.usage)
        assert usage.cached_tokens <= usage.input_tokens
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_chat_openai_cassette(endpoint: tuple[str, str]) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, SystemMessage

    base_url, key = endpoint
    prompt = [SystemMessage(SCRIPT.system or ""), HumanMessage(history(0)[0].text)]
    with cassette("langchain_chat_openai"):
        chat = langchain_openai.ChatOpenAI(
            base_url=base_url, api_key=key, model=MODEL, max_retries=0
        ).bind_tools(DEMO_TOOL_SCHEMAS)
        first = chat.invoke(prompt)
        streamed: Any = None
        for chunk in chat.stream(prompt):
            streamed = chunk if streamed is None else streamed + chunk
        responses = langchain_openai.ChatOpenAI(
            base_url=base_url, api_key=key, model=MODEL, max_retries=0, use_responses_api=True
        ).bind_tools(DEMO_TOOL_SCHEMAS)
        third = responses.invoke(prompt)
    for message in (first, streamed, third):
        assert message.usage_metadata is not None
        usage = Usage.from_langchain(message.usage_metadata)
        assert usage.cached_tokens <= usage.input_tokens
    if replayed(first.id):
        for call, message in enumerate((first, streamed, third)):
            expected = SCRIPT.turns[call].message
            assert [c["id"] for c in message.tool_calls] == [c.id for c in expected.tool_calls]
        assert first.usage_metadata["input_token_details"]["cache_read"] == 0
        assert streamed.usage_metadata["input_token_details"]["cache_read"] > 1000

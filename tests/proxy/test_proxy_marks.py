"""Anthropic `cache_control` marks through the proxy, counted per block as the API counts them.

The proxy keeps every mark the client placed (same block, same value) and adds its own only
in the slots the client left: the body it sends never carries more than four. Bodies here
are generated (system blocks, tool definitions, text, tool use and tool result blocks) with
marks anywhere; the real `anthropic` client then runs a Claude Code shaped session (both
system blocks and the last two messages marked) against the replay provider, which refuses
a fifth mark as the API does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, CALL, FINAL, plain_script

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.proxy import ProxyConfig, ProxyEngine
from cachepilot.proxy.memory import ThreadMemory
from cachepilot.wire import read_view
from cachepilot.wire.anthropic import MAX_CACHE_MARKS, cache_mark_count
from cachepilot_bench.replay import ReplayProvider

FILLER = " ".join(f"rule{i} keep the build green" for i in range(400))  # > 1024 tokens
CONTROLS = (
    {"type": "ephemeral"},
    {"type": "ephemeral", "ttl": "1h"},
    {"type": "ephemeral", "ttl": "5m"},
)
_threads = itertools.count()


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"The {name} tool.", "input_schema": {"type": "object"}}


@st.composite
def bodies(draw: st.DrawFn, *, over: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a Messages body with client marks, {tag: mark} of every mark placed)."""
    system: list[dict[str, Any]] = [
        {"type": "text", "text": f"S{i} system part {i}. {FILLER if i == 0 else ''}".strip()}
        for i in range(draw(st.integers(1, 3)))
    ]
    if draw(st.booleans()):
        # A volatile value: the system prompt is canonicalized, the value moves to a context
        # block in the first user message.
        system[-1]["text"] += "\nToday's date: 2026-11-27. Working directory: /home/ann/proj"
    tools = [_tool(f"tool{i}") for i in range(draw(st.integers(0, 3)))]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "U0.0 Build the project."}]}
    ]
    for turn in range(draw(st.integers(0, 3))):
        calls = draw(st.integers(1, 2))
        content: list[dict[str, Any]] = []
        if draw(st.booleans()):
            content.append({"type": "text", "text": f"A{turn}.text Looking."})
        content.extend(
            {"type": "tool_use", "id": f"toolu_{turn}_{c}", "name": "bash",
             "input": {"command": f"ls {turn} {c}"}}
            for c in range(calls)
        )  # fmt: skip
        messages.append({"role": "assistant", "content": content})
        results: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": f"toolu_{turn}_{c}",
             "content": f"R{turn}.{c} file{c}.txt"}
            for c in range(calls)
        ]  # fmt: skip
        if draw(st.booleans()):
            results.append({"type": "text", "text": f"U{turn + 1}.note go on"})
        messages.append({"role": "user", "content": results})
    # Every block that can carry a mark, by a tag that finds it again in the output.
    slots: list[tuple[str, dict[str, Any]]] = [(f"system:{i}", b) for i, b in enumerate(system)]
    slots += [(f"tool:{t['name']}", t) for t in tools]
    for message in messages:
        for block in message["content"]:
            slots.append((_tag(block), block))
    low, high = (MAX_CACHE_MARKS + 1, MAX_CACHE_MARKS + 2) if over else (0, MAX_CACHE_MARKS)
    if len(slots) < low:
        slots += [(f"tool:extra{i}", _tool(f"extra{i}")) for i in range(low - len(slots))]
        tools += [b for tag, b in slots if tag.startswith("tool:extra")]
    chosen = draw(
        st.lists(st.sampled_from(range(len(slots))), unique=True, min_size=low, max_size=high)
    )
    placed: dict[str, Any] = {}
    for k in chosen:
        tag, block = slots[k]
        block["cache_control"] = dict(draw(st.sampled_from(CONTROLS)))
        placed[tag] = block["cache_control"]
    body: dict[str, Any] = {"model": "claude-test", "max_tokens": 256, "system": system,
                            "messages": messages}  # fmt: skip
    if tools:
        body["tools"] = tools
    return json.loads(json.dumps(body)), placed


def _tag(block: dict[str, Any]) -> str:
    if block["type"] == "text":
        # The block's own tag, also after a rewrite put a context block's text before it.
        found = re.search(r"(?<!\S)([UA]\d+\.\w+)", block["text"])
        return "text:" + (found.group(1) if found else block["text"][:20])
    if block["type"] == "tool_use":
        return "use:" + block["id"]
    return "result:" + block["tool_use_id"]


def _marks(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(tag, mark) of every marked block of a body as sent."""
    system = body.get("system")
    for i, block in enumerate(system if isinstance(system, list) else ()):
        if "cache_control" in block:
            yield f"system:{i}", block["cache_control"]
    for tool in body.get("tools") or ():
        if "cache_control" in tool:
            yield f"tool:{tool['name']}", tool["cache_control"]
    for message in body["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else ():
            if "cache_control" in block:
                yield _tag(block), block["cache_control"]


@pytest.fixture(scope="module")
def engine() -> ProxyEngine:
    config = ProxyConfig(upstream="http://127.0.0.1:9", provider="anthropic")
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    return ProxyEngine(config, pilot=pilot)


def _prepare(engine: ProxyEngine, body: dict[str, Any]) -> dict[str, Any]:
    memory = ThreadMemory(f"marks-{next(_threads)}")
    return engine.pipeline.prepare(read_view(body, "anthropic"), memory).body


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=bodies())
def test_client_marks_stay_and_the_total_never_exceeds_four(
    engine: ProxyEngine, case: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    body, placed = case
    sent = _prepare(engine, body)
    found = dict(_marks(sent))
    assert cache_mark_count(sent) <= MAX_CACHE_MARKS
    for tag, mark in placed.items():
        assert found.get(tag) == mark, f"the client's mark on {tag} moved or changed"
    assert cache_mark_count(sent) >= len(placed)
    last = sent["messages"][-1]["content"]
    last_tags = {_tag(b) for b in last} if isinstance(last, list) else set()
    if len(placed) < MAX_CACHE_MARKS and not last_tags & set(placed):
        # A free slot goes first to the last message (far above the minimum length).
        assert any("cache_control" in b for b in last)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=bodies(over=True))
def test_more_than_four_client_marks_pass_untouched_and_none_is_added(
    engine: ProxyEngine, case: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    body, placed = case
    sent = _prepare(engine, body)
    assert dict(_marks(sent)) == placed
    assert cache_mark_count(sent) == len(placed) > MAX_CACHE_MARKS


def test_a_request_level_mark_takes_a_slot(engine: ProxyEngine) -> None:
    body = {
        "model": "claude-test",
        "max_tokens": 256,
        "cache_control": {"type": "ephemeral"},
        "system": [
            {"type": "text", "text": FILLER, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Part two.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hi.", "cache_control": {"type": "ephemeral"}}
                ],
            },
        ],
    }
    sent = _prepare(engine, body)
    assert cache_mark_count(sent) == MAX_CACHE_MARKS
    assert sent["system"] == body["system"] and sent["messages"] == body["messages"]


def _claude_code_request(
    system: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Claude Code's marks: the last two messages' last blocks (copies, the rest unmarked)."""
    out = json.loads(json.dumps(messages))
    for message in out[-2:]:
        content = message["content"]
        if isinstance(content, str):
            content = message["content"] = [{"type": "text", "text": content}]
        content[-1]["cache_control"] = {"type": "ephemeral"}
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_a_claude_code_shaped_session_is_never_refused(stream: bool) -> None:
    """Both system blocks and the last two messages marked (four marks, Anthropic's
    maximum): the proxy adds none, and the upstream that refuses a fifth serves every
    request; with three client marks it adds exactly one."""
    system = [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": FILLER, "cache_control": {"type": "ephemeral"}},
    ]
    turns = [
        {"role": "user", "content": "Build the project."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the build."},
                {"type": "tool_use", "id": CALL.id, "name": "bash", "input": {"command": "make"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": CALL.id, "content": "ok"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": FINAL}]},
        {"role": "user", "content": "Thanks"},
    ]
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        api = anthropic.Anthropic(base_url=proxy.root, api_key="sk-ant-test", max_retries=0)
        for end in (1, 3, 5):
            kwargs: dict[str, Any] = {
                "model": "claude-test", "max_tokens": 256, "system": system,
                "messages": _claude_code_request(system, turns[:end]), "tools": [ANTHROPIC_BASH],
            }  # fmt: skip
            if stream:
                with api.messages.stream(**kwargs) as events:
                    events.get_final_message()
            else:
                api.messages.create(**kwargs)
        records = upstream.records
    assert len(records) == 3
    # One message: three client marks, nothing left to gain; later: four, no slot left.
    assert [cache_mark_count(r.body) for r in records] == [3, 4, 4]
    for record, end in zip(records, (1, 3, 5), strict=True):
        sent_marks = dict(_marks(record.body))
        assert sent_marks["system:0"] == sent_marks["system:1"] == {"type": "ephemeral"}
        assert record.body["system"] == system
        if end > 1:
            assert len(sent_marks) == MAX_CACHE_MARKS  # the client's four, nothing added
    assert all(r.prefix_extends for r in records)


def test_an_upstream_refusing_cachepilots_marks_gets_the_request_without_them() -> None:
    """An upstream that counts differently from the proxy (here: a limit of two) refuses the
    request; the proxy sends it again with the client's marks only, and adds none to the
    thread afterwards."""
    seen: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        found = cache_mark_count(body)
        if found > 2:
            message = f"A maximum of 2 blocks with cache_control may be provided. Found {found}."
            error = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": message},
            }
            return httpx.Response(400, json=error)
        reply = {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1},
        }  # fmt: skip
        return httpx.Response(200, json=reply)

    config = ProxyConfig(upstream="http://upstream.test", provider="anthropic")
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    engine = ProxyEngine(config, pilot=pilot, transport=httpx.MockTransport(upstream))
    system = [
        {"type": "text", "text": "Agent.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": FILLER, "cache_control": {"type": "ephemeral"}},
    ]
    client_body = {
        "model": "m",
        "max_tokens": 64,
        "system": system,
        "messages": [{"role": "user", "content": "Build it."}],
    }
    headers = {"content-type": "application/json", "x-cachepilot-thread": "refused"}

    async def run() -> list[int]:
        statuses = []
        for _ in range(2):
            answer = await engine.handle(
                "POST", "/v1/messages", "", headers, json.dumps(client_body).encode()
            )
            statuses.append(answer.status)
        await engine.aclose()
        return statuses

    assert asyncio.run(run()) == [200, 200]
    assert [cache_mark_count(b) for b in seen] == [3, 2, 2]  # refused, resent, then none added
    assert seen[1]["system"] == system
    assert seen[1]["messages"] == client_body["messages"]

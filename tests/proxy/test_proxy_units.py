"""Thread identification, body rewriting, persistence across restarts and the CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_helpers import running_proxy
from scripts import BASH, BIG, CALL, SYSTEM, plain_script

from cachepilot.artifacts import SQLiteArtifactStore
from cachepilot.diagnose.inspect import load_threads
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.proxy import ProxyConfig, identify
from cachepilot.proxy.secret import Secret, load_secret
from cachepilot.proxy.threads import key_scope
from cachepilot.state.base import SQLiteStateStore
from cachepilot.wire import read_view, split_like, write_view
from cachepilot_bench.replay import ReplayProvider

CHAT = {
    "model": "m",
    "temperature": 0,
    "messages": [
        {"role": "system", "content": "A"},
        {"role": "developer", "content": "B"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ],
}  # fmt: skip
RESPONSES = {
    "model": "m",
    "instructions": "A",
    "input": [
        {"role": "developer", "content": "B"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "out"},
    ],
}
ANTHROPIC = {
    "model": "m",
    "max_tokens": 10,
    "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B",
                                                "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "sig"},
            {"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "out", "is_error": True},
            {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("api", "body"), [("chat", CHAT), ("responses", RESPONSES), ("anthropic", ANTHROPIC)]
)
def test_an_unchanged_view_writes_back_the_same_body(api: Any, body: dict[str, Any]) -> None:
    view = read_view(body, api)
    assert view.system == "A\n\nB"
    assert write_view(view, view.system, view.messages, None) == body


@pytest.mark.parametrize(
    ("api", "body"), [("chat", CHAT), ("responses", RESPONSES), ("anthropic", ANTHROPIC)]
)
def test_a_changed_tool_result_keeps_its_element(api: Any, body: dict[str, Any]) -> None:
    view = read_view(body, api)
    messages = [
        m if m.role != "tool" else dataclasses.replace(m, content="short") for m in view.messages
    ]
    system = "A2\n\nB2"
    out = write_view(view, system, messages, None)
    assert read_view(out, api).messages == messages
    assert read_view(out, api).system == system
    if api == "anthropic":
        result = out["messages"][2]["content"][0]
        assert result == {"type": "tool_result", "tool_use_id": "c1", "content": "short",
                          "is_error": True}  # fmt: skip
        assert out["system"][1]["cache_control"] == {"type": "ephemeral"}
    if api == "responses":
        assert out["input"][2:4] == body["input"][2:4]  # reasoning and call items, ids kept
    assert body == json.loads(json.dumps(body))  # the original is never mutated


def test_split_like_finds_the_pieces_by_their_newlines() -> None:
    pieces = ["Today is 2025-01-02.\n", "cwd /home/a\n\nmore"]
    assert split_like("Today is {{date_1}}.\n\n\ncwd {{path_1}}\n\nmore", pieces) == [
        "Today is {{date_1}}.\n",
        "cwd {{path_1}}\n\nmore",
    ]
    assert split_like("one piece only", pieces) is None


SECRET = Secret(b"s" * 32)


def test_thread_rule() -> None:
    view = read_view(CHAT, "chat")
    rule = {"header": "x-cachepilot-thread", "secret": SECRET}
    by_hash = identify({}, view, scoped=True, **rule)
    assert by_hash.source == "hash" and by_hash.name.startswith("h-")
    named = identify({"x-cachepilot-thread": "job-7"}, view, scoped=False, **rule)
    assert named.name == "job-7"
    keyed = read_view({**CHAT, "user": "u1"}, "chat")
    by_key = identify({}, keyed, scoped=False, **rule)
    assert by_key.source == "key:user" and "u1" not in by_key.name
    one = identify({"authorization": "Bearer k1"}, view, scoped=True, **rule)
    two = identify({"authorization": "Bearer k2"}, view, scoped=True, **rule)
    assert one.name != two.name and one.name.endswith(by_hash.name)
    assert "k1" not in one.name


def test_reserved_thread_names_are_not_a_clients() -> None:
    view = read_view(CHAT, "chat")
    headers = {"x-cachepilot-thread": "cachepilot:secret"}
    found = identify(headers, view, header="x-cachepilot-thread", scoped=False, secret=SECRET)
    assert found.source == "hash" and found.name != "cachepilot:secret"


def test_key_scope_is_the_keys_whichever_header_carries_it() -> None:
    same = {
        key_scope({"authorization": "Bearer sk-ant-1"}, SECRET),
        key_scope({"authorization": "bearer  sk-ant-1 "}, SECRET),
        key_scope({"x-api-key": "sk-ant-1"}, SECRET),
        key_scope({"api-key": "sk-ant-1"}, SECRET),
    }
    assert len(same) == 1 and None not in same
    assert key_scope({"x-api-key": "sk-ant-2"}, SECRET) not in same
    assert key_scope({}, SECRET) is None


def test_key_scope_is_salted_by_the_store_secret() -> None:
    headers = {"x-api-key": "sk-guessable"}
    scope = key_scope(headers, SECRET)
    assert scope is not None and scope != key_scope(headers, Secret(b"t" * 32))
    # Nobody without the secret can recompute it from a guessed key.
    unsalted = hashlib.sha256(b"sk-guessable").hexdigest()
    assert scope[1:] not in unsalted and "sk-guessable" not in scope


def test_the_secret_is_kept_in_the_state_store(tmp_path: Path) -> None:
    store = SQLiteStateStore(tmp_path / "s.sqlite")
    first = asyncio.run(load_secret(store))
    again = asyncio.run(load_secret(SQLiteStateStore(tmp_path / "s.sqlite")))
    assert first.label("t") == again.label("t")
    assert asyncio.run(load_secret(None)).label("t") != first.label("t")


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="http"):
        ProxyConfig(upstream="api.openai.com")
    with pytest.raises(ValueError, match="provider profile"):
        ProxyConfig(upstream="http://x", provider="nope")
    assert ProxyConfig(upstream="http://h/v1").target("/v1/messages") == "http://h/v1/messages"


def _body() -> dict[str, Any]:
    return {
        "model": "m",
        "tools": [BASH],
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Build the project."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": CALL.id, "type": "function",
                 "function": {"name": "bash", "arguments": CALL.arguments}}]},
            {"role": "tool", "tool_call_id": CALL.id, "content": BIG},
        ],
    }  # fmt: skip


def test_a_restarted_proxy_sends_the_same_bytes_and_inspect_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sqlite"
    sent = []
    for _ in range(2):
        pilot = CachePilot(Config(), store=SQLiteArtifactStore(path))
        with (
            ReplayProvider(plain_script()) as upstream,
            running_proxy(
                upstream.base_url, pilot=pilot, state_store=SQLiteStateStore(path)
            ) as proxy,
        ):
            reply = httpx.post(f"{proxy.base_url}/chat/completions", json=_body(), timeout=30)
            assert reply.status_code == 200
            sent.append(upstream.records[0].body)
    assert sent[0] == sent[1]
    threads = load_threads(path)
    assert len(threads) == 1 and threads[0].state.usage["input_tokens"] > 0
    assert threads[0].state.views  # the reduced view is recorded


def test_cli_help_and_bad_arguments() -> None:
    run = [sys.executable, "-m", "cachepilot.cli", "proxy"]
    shown = subprocess.run(
        [*run, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert shown.returncode == 0
    for needle in ("/v1/chat/completions", "/v1/responses", "/v1/messages", "--upstream"):
        assert needle in shown.stdout
    bad = subprocess.run(
        [*run, "--upstream", "nope"], capture_output=True, text=True, timeout=60, check=False
    )
    assert bad.returncode == 2 and "http(s) URL" in bad.stderr


def test_threads_beyond_the_memory_cap_leave_the_pilot() -> None:
    import asyncio as _asyncio

    from cachepilot import CachePilot as _Pilot
    from cachepilot.artifacts import InMemoryArtifactStore as _Store
    from cachepilot.proxy.memory import Threads

    pilot = _Pilot(store=_Store())
    threads = Threads(pilot, max_threads=2)

    async def touch() -> None:
        for name in ("a", "b", "c"):
            await threads.get(name)
            pilot.state(name).calls += 1

    _asyncio.run(touch())
    assert pilot.state("a").calls == 0  # dropped, then recreated empty on this access
    assert pilot.state("c").calls == 1


def test_serve_freezes_the_heap_only_while_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve` moves the startup heap out of the collector's reach while the server runs; a
    host that calls it with its own engine gets its collector back as it was once it stops."""
    import gc

    import uvicorn

    from cachepilot.proxy.app import serve

    frozen_while_serving: list[int] = []
    monkeypatch.setattr(
        uvicorn, "run", lambda app, **options: frozen_while_serving.append(gc.get_freeze_count())
    )
    before = gc.get_freeze_count()
    try:
        serve(ProxyConfig(upstream="http://upstream.invalid", provider="anthropic", port=0))
        assert frozen_while_serving and frozen_while_serving[0] > before
        assert gc.get_freeze_count() == before
    finally:
        if gc.get_freeze_count() > before:
            gc.unfreeze()

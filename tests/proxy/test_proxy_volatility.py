"""A per-call value no built-in pattern knows, through the real proxy: one thread, and the
system prompt reaches the upstream byte-identical from the second call on."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import anthropic
import pytest
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BIG, CALL, FINAL, plain_script

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.diagnose.inspect import load_threads
from cachepilot.proxy.families import FAMILY_DOC_KEY
from cachepilot.state.base import MemoryStateStore, SQLiteStateStore, StateStore
from cachepilot_bench.replay import ReplayProvider

RULES = "Follow the house rules and keep every answer short. " * 120
SESSIONS = ("9f0c2e41-77aa", "9f1c2e41-77aa", "9f2c2e41-77aa")


def system_for(session: str, build: int) -> str:
    return (
        "You are a careful build assistant.\n"
        f"Session {session}\n"
        f"Sandbox build {build} is ready for you.\n" + RULES
    )


def tool_for(build: int) -> dict[str, Any]:
    return {**ANTHROPIC_BASH, "description": f"Run a shell command in sandbox build r{build}x."}


def turns() -> list[list[dict[str, Any]]]:
    first = [{"role": "user", "content": "Build the project."}]
    second = [
        *first,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the build."},
                {"type": "tool_use", "id": CALL.id, "name": "bash", "input": {"command": "make"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": CALL.id, "content": BIG}],
        },
    ]
    third = [
        *second,
        {"role": "assistant", "content": FINAL},
        {"role": "user", "content": "Thanks"},
    ]
    return [first, second, third]


def run(
    upstream: str,
    *,
    metadata: dict[str, str] | None,
    store: StateStore,
    calls: range = range(3),
) -> list[str]:
    """Three calls of one session (or those of `calls`), each with a new session id and build
    number; the thread names the proxy held."""
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    with running_proxy(upstream, provider="anthropic", pilot=pilot, state_store=store) as proxy:
        api = anthropic.Anthropic(
            base_url=proxy.root, api_key="sk-ant-test", max_retries=0, timeout=30
        )
        for i, messages in enumerate(turns()):
            if i not in calls:
                continue
            kwargs: dict[str, Any] = {
                "model": "claude-test",
                "max_tokens": 512,
                "system": system_for(SESSIONS[i], 4711 + i),
                "messages": messages,
                "tools": [tool_for(20250 + 7 * i)],
            }
            if metadata is not None:
                kwargs["metadata"] = metadata
            api.messages.create(**kwargs)
        return proxy.engine.threads.names()


@pytest.mark.parametrize("keyed", [True, False])
def test_a_per_call_session_id_keeps_one_thread_and_a_stable_prefix(keyed: bool) -> None:
    store = MemoryStateStore()
    metadata = {"user_id": "user_abc_account__session_42"} if keyed else None
    with ReplayProvider(plain_script(), profile="anthropic") as upstream:
        names = run(upstream.base_url, metadata=metadata, store=store)
        records = upstream.records
    assert len(names) == 1  # one session, one thread
    systems = [r.body["system"] for r in records]
    tools = [r.body["tools"] for r in records]
    # The first call cannot know the value is volatile; from the second on, the same bytes.
    assert systems[1] == systems[2] and tools[1] == tools[2]
    text = systems[1] if isinstance(systems[1], str) else systems[1][0]["text"]
    assert "Session {{learned_" in text and "9f1c" not in text and "build {{learned_" in text
    assert "{{learned_" in tools[1][0]["description"]
    # The values reach the model in the context block, frozen at the second call.
    first_user = records[2].body["messages"][0]["content"]
    block = first_user if isinstance(first_user, str) else first_user[0]["text"]
    assert "9f1c2e41-77aa" in block and "4712" in block and "r20257x" in block
    assert "9f2c" not in block and "r20264x" not in block
    assert records[2].prefix_extends and not records[1].prefix_extends
    state = asyncio.run(store.load(names[0]))
    assert state is not None and '"learned"' in state


def test_a_restarted_proxy_keeps_the_family(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    metadata = {"user_id": "user_abc_account__session_42"}
    with ReplayProvider(plain_script(), profile="anthropic") as upstream:
        first = run(
            upstream.base_url, metadata=metadata, store=SQLiteStateStore(path), calls=range(2)
        )
    with sqlite3.connect(path) as conn:
        docs = [row[0] for row in conn.execute("SELECT state FROM cachepilot_state")]
    assert sum(d.startswith(f'{{"{FAMILY_DOC_KEY}"') for d in docs) == 1
    # `cachepilot inspect` lists the thread, not the family document.
    assert [t.thread for t in load_threads(path)] == first
    with ReplayProvider(plain_script(), profile="anthropic") as upstream:
        second = run(
            upstream.base_url, metadata=metadata, store=SQLiteStateStore(path), calls=range(2, 3)
        )
    # The conversation goes on in the same thread after the restart, whatever the session id.
    assert second == first


def test_a_genuine_instruction_change_is_a_thread_of_its_own() -> None:
    store = MemoryStateStore()
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(
            upstream.base_url, provider="anthropic", pilot=pilot, state_store=store
        ) as proxy,  # fmt: skip
    ):
        api = anthropic.Anthropic(base_url=proxy.root, api_key="k", max_retries=0, timeout=30)
        metadata = {"user_id": "user_abc_account__session_42"}
        base = system_for(SESSIONS[0], 1)
        for system in (base, base + "\nNew rule: answer in French, and only in French.\n"):
            api.messages.create(
                model="m",
                max_tokens=64,
                system=system,
                messages=[{"role": "user", "content": "Build the project."}],
                tools=[ANTHROPIC_BASH],
                metadata=metadata,
            )
        records = upstream.records
        names = proxy.engine.threads.names()
    assert len(names) == 2
    assert "answer in French" in str(records[1].body["system"])
    assert "{{learned" not in str(records[1].body["system"])

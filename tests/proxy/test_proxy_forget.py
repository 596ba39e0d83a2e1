"""Forgetting a thread: the library (`CachePilot.forget`), the proxy and `cachepilot forget`
leave no state, view or archived original of it; a later recall says it was removed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from proxy_helpers import running_proxy
from scripts import BASH, BIG, CALL, SYSTEM, plain_script

from cachepilot import CachePilot, Config, InMemoryArtifactStore, SQLiteArtifactStore
from cachepilot.artifacts.base import REMOVED_BY_FORGET
from cachepilot.state.base import SQLiteStateStore
from cachepilot_bench.replay import ReplayProvider

KEEP = "keep-this-thread"
GONE = "forget-this-thread"


def _body() -> dict[str, object]:
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


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_forget_leaves_nothing_and_recall_says_removed(kind: str, tmp_path: Path) -> None:
    store = InMemoryArtifactStore() if kind == "memory" else SQLiteArtifactStore(tmp_path / "a")
    pilot = CachePilot(Config(), store=store)
    for thread in (KEEP, GONE):
        text = pilot.ingest("bash", {"command": "make"}, BIG, call_id="c1", thread=thread)
    ref = text.split('recall(ref="')[1][:12]
    assert "was removed" not in pilot.recall(ref, thread=GONE)
    pilot.forget(GONE)
    assert store.list(GONE) == [] and store.list(KEEP)
    assert GONE not in pilot._states and GONE not in pilot._views
    answer = pilot.recall(ref, thread=GONE)
    assert "was removed" in answer and REMOVED_BY_FORGET in answer and "make" not in answer
    assert "was removed" not in pilot.recall(ref, thread=KEEP)
    asyncio.run(pilot.aforget(KEEP))
    assert store.list(KEEP) == []


def test_the_proxy_and_the_cli_forget_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "proxy.sqlite"
    pilot = CachePilot(Config(), store=SQLiteArtifactStore(path))
    states = SQLiteStateStore(path)
    with (
        ReplayProvider(plain_script()) as upstream,
        running_proxy(upstream.base_url, pilot=pilot, state_store=states) as proxy,
    ):
        for thread in (KEEP, GONE):
            headers = {"x-cachepilot-thread": thread, "x-api-key": "sk-team-key"}
            reply = httpx.post(
                f"{proxy.base_url}/chat/completions", json=_body(), headers=headers, timeout=30
            )
            assert reply.status_code == 200
        names = proxy.engine.threads.names()
    assert len(names) == 2
    gone = next(n for n in names if n.endswith(GONE))
    assert asyncio.run(states.load(gone)) and pilot.store.list(gone)
    run = [sys.executable, "-m", "cachepilot.cli", "forget", "--store", str(path)]
    env = {"PATH": "/usr/bin:/bin", "TEAM_KEY": "sk-team-key"}
    missing = subprocess.run(
        [*run, GONE], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert missing.returncode == 1  # unscoped name: the key is needed to find it
    done = subprocess.run(
        [*run, GONE, "--api-key-env", "TEAM_KEY"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert asyncio.run(states.load(gone)) is None and pilot.store.list(gone) == []
    keep = next(n for n in names if n.endswith(KEEP))
    assert asyncio.run(states.load(keep)) and pilot.store.list(keep)
    again = subprocess.run(
        [*run, keep, "--stored-name"], capture_output=True, text=True, timeout=60, check=False
    )
    assert again.returncode == 0 and asyncio.run(states.load(keep)) is None

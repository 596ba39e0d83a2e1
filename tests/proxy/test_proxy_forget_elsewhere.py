"""`cachepilot forget`, run while a proxy process serves the thread: the running process stops
using its copy (its memory, the pilot's caches, its family) on the thread's next request,
and sends what a process that never saw the forgotten thread sends. On SQLite, PostgreSQL and
Redis (real servers; skipped without them)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fault_helpers import API_KEY, HoldingUpstream, leaks, post, proxy_process
from test_proxy_faults import CALLS, STORES, _thread_names, forbidden, fresh_store, stored_thread
from test_proxy_replicas import session

from cachepilot.proxy.stores import open_stores
from cachepilot.state.base import MemoryStateStore, SQLiteStateStore

FORGET_AT = 6


def _forget(store: str, *args: str) -> None:
    """`cachepilot forget` in a process of its own (the store from the environment)."""
    env = {**os.environ, "CACHEPILOT_STORE": store, "TEST_KEY": API_KEY}
    command = [sys.executable, "-m", "cachepilot.cli", "forget", *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr


def _refs(store: str) -> set[str]:
    """The refs archived for the session's thread."""
    artifacts, states = open_stores(store)

    async def go() -> set[str]:
        try:
            names = [n for n in await _thread_names(states, store) if n.endswith("/team-session")]
            found: set[str] = set()
            for name in names:
                found |= {info.ref for info in await artifacts.alist(name)}
            return found
        finally:
            close = getattr(states, "aclose", None)
            if close is not None:
                await close()

    try:
        return asyncio.run(go())
    finally:
        artifacts.close()


@pytest.mark.parametrize("kind", STORES)
def test_a_running_proxy_drops_a_thread_forgotten_elsewhere(kind: str, tmp_path: Path) -> None:
    """Proxy A serves 6 requests of a session; `cachepilot forget` removes the thread from
    another process; a new session under the same thread name goes to proxy B for 6 requests
    (the stored thread is then at as many saves as A's copy was), then to A. The upstream
    receives what one fresh process receives for the new session alone, the thread counts
    only its calls, every original is archived again, and no log line shows the key, the
    thread or a call id; the stored thread holds nothing of the forgotten one."""
    old, new = session(FORGET_AT), session(CALLS, "n")
    upstream = HoldingUpstream()
    try:
        with fresh_store(kind, tmp_path) as ref_store:
            with proxy_process(upstream.url, ref_store, tmp_path / "ref.log") as proxy:
                for body in new:
                    assert post(proxy.root, body).status_code == 200
            expected = list(upstream.bodies)
            expected_refs = _refs(ref_store)
        upstream.bodies.clear()
        logs = tmp_path / "proxy.log"
        with (
            fresh_store(kind, tmp_path) as store,
            proxy_process(upstream.url, store, logs) as a,
        ):
            for body in old:
                assert post(a.root, body).status_code == 200
            _forget(store, "team-session", "--api-key-env", "TEST_KEY")
            with proxy_process(upstream.url, store, logs) as b:
                for body in new[:FORGET_AT]:
                    assert post(b.root, body).status_code == 200
            for body in new[FORGET_AT:]:
                assert post(a.root, body).status_code == 200
            got = list(upstream.bodies)[FORGET_AT:]
            saved = stored_thread(store)
            refs = _refs(store)
    finally:
        upstream.close()
    assert got == expected
    text = json.dumps(saved)
    assert [f"s-c{n}" for n in range(FORGET_AT) if f"s-c{n}" in text] == []  # nothing forgotten
    assert saved["calls"] == CALLS
    assert saved["usage"]["input_tokens"] == CALLS * 1000
    assert refs == expected_refs and refs
    assert leaks(logs, [*forbidden(), *(f"n-c{n}" for n in range(CALLS))]) == []


def _conversation(name: str, first: str) -> list[dict[str, Any]]:
    """A session whose first user message is `first` (so sessions share a family)."""
    bodies = session(4, name)
    for body in bodies:
        body["messages"][1] = {"role": "user", "content": first}
    return bodies


def _send(root: str, body: dict[str, Any]) -> None:
    headers = {"authorization": f"Bearer {API_KEY}", "connection": "close"}
    with httpx.Client(timeout=60) as client:
        reply = client.post(f"{root}/v1/chat/completions", json=body, headers=headers)
    assert reply.status_code == 200, reply.text


def test_a_running_proxy_never_stores_a_forgotten_member_again(tmp_path: Path) -> None:
    """Two conversations of one family (same system prompt and first message, no thread
    header) on one proxy; the second is forgotten from another process; the first goes on
    through the same proxy. The family's stored document never names the forgotten thread
    again, and the first conversation's bytes are a process's that never saw the second."""
    store = str(tmp_path / "proxy.sqlite")
    first = "Fix the failing build of the shared tree."
    kept, gone = _conversation("x", first), _conversation("z", first)
    upstream = HoldingUpstream()
    try:
        with proxy_process(upstream.url, str(tmp_path / "ref.sqlite"), tmp_path / "r.log") as p:
            for body in kept:
                _send(p.root, body)
        expected = list(upstream.bodies)[-1]
        logs = tmp_path / "proxy.log"
        with proxy_process(upstream.url, store, logs) as proxy:
            for body in kept[:3]:
                _send(proxy.root, body)
            for body in gone[:3]:
                _send(proxy.root, body)
            names = asyncio.run(_thread_names(SQLiteStateStore(store), store))
            [forgotten] = [n for n in names if "~" in n]  # the family's second member
            _forget(store, forgotten, "--stored-name")
            _send(proxy.root, kept[3])
        got = list(upstream.bodies)[-1]
    finally:
        upstream.close()
    import sqlite3

    conn = sqlite3.connect(store)
    try:
        rows = [
            str(r[0]) + str(r[1])
            for r in conn.execute("SELECT thread, state FROM cachepilot_state")
        ]
    finally:
        conn.close()
    assert any("cachepilot_family" in r for r in rows)  # the kept conversation's family
    assert not [r for r in rows if forgotten in r or forgotten.rsplit("~", 1)[1] in r]
    assert got == expected
    ids = [f"{name}-c{n}" for name in "xz" for n in range(4)]
    assert leaks(logs, [API_KEY, forgotten, *ids]) == []


@pytest.mark.parametrize("kind", ["memory", *STORES])
def test_versions_of_a_deleted_thread_are_not_reused(kind: str, tmp_path: Path) -> None:
    """A thread deleted and made again never shows a version a process saw before (a
    process holding the deleted thread's copy compares versions only)."""

    async def go(states: Any) -> None:
        seen = set()
        for _ in range(3):
            version = await states.save_if("t", "a", 0)
            assert version is not None and version not in seen
            seen.add(version)
            assert await states.save_if("t", "b", version) == version + 1
            await states.save("t", "c")
            assert await states.version("t") == version + 2
            seen |= {version + 1, version + 2}
            await states.delete("t")
            assert await states.load_versioned("t") == (None, 0)
            await states.save("t", "d")  # an unconditional save of a new document too
            assert await states.version("t") not in seen
            await states.delete("t")
        close = getattr(states, "aclose", None)
        if close is not None:
            await close()

    if kind == "memory":
        asyncio.run(go(MemoryStateStore()))
        return
    with fresh_store(kind, tmp_path) as store:
        artifacts, states = open_stores(store)
        try:
            asyncio.run(go(states))
        finally:
            artifacts.close()

"""The proxy under faults an operator meets: processes killed (SIGKILL) while a request waits
for the upstream or while a stream is relayed, requests dropped and sent again, the store
down for a while, a replica starting during the outage, `--workers 2`, forgetting a
thread (bad input at the boundary: `test_proxy_boundary.py`). On SQLite, PostgreSQL and
Redis (real servers; skipped without them, see `.ci/services.sh`).

Each test compares what the upstream received with what it receives from one undisturbed
process serving the same session: the same bytes, request by request (a request sent again
after a fault is the same call, counted once); nothing is lost (every call counted once in
the stored state); no log line at INFO or above, in any process, shows the API key, the
thread's name or a call id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fault_helpers import (
    API_KEY,
    HEADERS,
    USAGE,
    HoldingUpstream,
    leaks,
    post,
    proxy_process,
    stream,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_proxy_replicas import session

from cachepilot import CachePilot, InMemoryArtifactStore
from cachepilot.proxy import ProxyConfig, ProxyEngine
from cachepilot.proxy.engine import proxy_pilot_config
from cachepilot.proxy.secret import SECRET_THREAD, Secret, SecretUnavailableError, load_secret
from cachepilot.proxy.stores import open_stores
from cachepilot.state.base import MemoryStateStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from server_helpers import PrivatePostgres, PrivateRedis, database, postgres_url_or_skip

CALLS = 14  # the session's first maintenance point comes at its 12th call
THREAD = "team-session"


def forbidden() -> list[str]:
    """What no log line at INFO or above may show."""
    return [API_KEY, THREAD, *(f"s-c{n}" for n in range(CALLS))]


@contextlib.contextmanager
def fresh_store(kind: str, tmp: Path) -> Iterator[str]:
    """A new, empty store of `kind` (its URL or path)."""
    if kind == "sqlite":
        folder = Path(tempfile.mkdtemp(dir=tmp))
        yield str(folder / "proxy.sqlite")
    elif kind == "postgres":
        with database(postgres_url_or_skip()) as url:
            yield url
    else:
        server = PrivateRedis()
        try:
            yield server.url
        finally:
            server.stop()


def stored_thread(store: str) -> dict[str, Any]:
    """The stored document of the session's thread (there is exactly one)."""
    artifacts, states = open_stores(store)

    async def go() -> dict[str, Any]:
        try:
            names = await _thread_names(states, store)
            mine = [n for n in names if n.endswith("/" + THREAD)]
            assert len(mine) == 1, names  # one thread, under one scope
            return dict(json.loads(await states.load(mine[0]) or "{}"))
        finally:
            close = getattr(states, "aclose", None)
            if close is not None:
                await close()

    try:
        return asyncio.run(go())
    finally:
        artifacts.close()


async def _thread_names(states: Any, store: str) -> list[str]:
    """Every thread name the state store holds (each store kind lists them its own way)."""
    if store.startswith("redis"):
        import redis

        client = redis.Redis.from_url(store)
        try:
            keys = [k.decode() for k in client.scan_iter("*")]
        finally:
            client.close()
        prefix, suffix = "cachepilot:proxy:", ":cachepilot_state"  # the proxy's state keys
        return [k[len(prefix) : -len(suffix)] for k in keys
                if k.startswith(prefix) and k.endswith(suffix)]  # fmt: skip
    if store.startswith("postgres"):
        import psycopg

        with psycopg.connect(store) as conn:
            return [str(r[0]) for r in conn.execute("SELECT thread FROM cachepilot_state")]
    import sqlite3

    conn = sqlite3.connect(store)
    try:
        return [str(r[0]) for r in conn.execute("SELECT thread FROM cachepilot_state")]
    finally:
        conn.close()


def reference(
    kind: str, tmp: Path, bodies: list[dict[str, Any]], streamed: bool = False
) -> list[bytes]:
    """What the upstream receives from one undisturbed process serving `bodies`."""
    upstream = HoldingUpstream()
    try:
        with (
            fresh_store(kind, tmp) as store,
            proxy_process(upstream.url, store, tmp / "ref.log") as proxy,
        ):
            for body in bodies:
                _one(proxy.root, body, streamed)
        return list(upstream.bodies)
    finally:
        upstream.close()


def _one(root: str, body: dict[str, Any], streamed: bool) -> None:
    if streamed:
        assert b"[DONE]" in stream(root, body)
    else:
        reply = post(root, body)
        assert reply.status_code == 200, reply.text


def _send_in_background(root: str, body: dict[str, Any], streamed: bool) -> threading.Thread:
    def go() -> None:
        with contextlib.suppress(httpx.HTTPError):
            if streamed:
                stream(root, body)
            else:
                post(root, body)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


STORES = ["sqlite", "postgres", "redis"]


@pytest.mark.parametrize("streamed", [False, True], ids=["mid-request", "mid-stream"])
@pytest.mark.parametrize("kind", STORES)
def test_a_process_killed_mid_request_changes_no_byte(
    kind: str, streamed: bool, tmp_path: Path
) -> None:
    """SIGKILL while the upstream holds request 7 (mid-request: before it answered; mid-stream:
    after its first event reached the client); the client sends it again to a new process on
    the same store, then goes on. Every request the upstream gets is the undisturbed one's,
    the lost request's resend is the same call, and the stored thread counts each call once."""
    if kind == "postgres":
        postgres_url_or_skip()
    bodies = session(CALLS)
    expected = reference(kind, tmp_path, bodies, streamed)
    killed = 7
    upstream = HoldingUpstream()
    logs = tmp_path / "faults.log"
    try:
        with fresh_store(kind, tmp_path) as store:
            with proxy_process(upstream.url, store, logs) as first:
                for body in bodies[:killed]:
                    _one(first.root, body, streamed)
                upstream.hold(killed)
                waiting = _send_in_background(first.root, bodies[killed], streamed)
                assert upstream.holding.wait(60)
                first.kill()
                waiting.join(30)
                upstream.release()
            with proxy_process(upstream.url, store, logs) as second:
                for body in bodies[killed:]:
                    _one(second.root, body, streamed)
            saved = stored_thread(store)
    finally:
        upstream.close()
    got = list(upstream.bodies)
    assert len(got) == CALLS + 1
    assert got[killed] == got[killed + 1]  # the resend is the very same request
    assert got[:killed] + got[killed + 1 :] == expected
    assert saved["calls"] == CALLS  # counted when answered: the lost one once
    assert saved["usage"]["input_tokens"] == CALLS * 1000
    assert leaks(logs, forbidden()) == []


class _Upstream:
    """In-process upstream (httpx MockTransport) that drops chosen requests once."""

    def __init__(self, drop: set[int]) -> None:
        self.bodies: list[bytes] = []
        self.drop = set(drop)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        index = len(self.bodies)
        self.bodies.append(json.dumps(json.loads(request.content), sort_keys=True).encode())
        if index in self.drop:
            raise httpx.ReadError("connection dropped")
        message = {"role": "assistant", "content": "ok"}
        reply = {"id": "r", "object": "chat.completion", "created": 0, "model": "m",
                 "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                 "usage": USAGE}  # fmt: skip
        return httpx.Response(200, json=reply)


def _engine(store: str, upstream: _Upstream) -> ProxyEngine:
    config = ProxyConfig(upstream="http://upstream.invalid", provider="anthropic", store=store)
    return ProxyEngine(config, transport=httpx.MockTransport(upstream))


async def _send(engine: ProxyEngine, body: dict[str, Any]) -> int:
    answer = await engine.handle(
        "POST", "/v1/chat/completions", "", HEADERS, json.dumps(body).encode()
    )
    return answer.status


@pytest.mark.parametrize("kind", STORES)
def test_dropped_requests_sent_again_are_the_same_calls(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream connection drops twice (502 to the client); the client sends the same
    request again, once to the same process and once to the other one. One process counted
    30 calls for 30 answers, not 32; the bytes are the undisturbed process's."""
    if kind == "postgres":
        postgres_url_or_skip()
    bodies = session(CALLS)

    def run(store: str, processes: int, drop: set[int]) -> tuple[list[bytes], _Upstream]:
        upstream = _Upstream(drop)

        async def go() -> None:
            engines = [_engine(store, upstream) for _ in range(processes)]
            n = 0
            for body in bodies:
                while (status := await _send(engines[n % processes], body)) != 200:
                    assert status == 502
                    n += 1  # the resend reaches the next process
                n += 1
            for engine in engines:
                await engine.aclose()

        asyncio.run(go())
        return upstream.bodies, upstream

    with fresh_store(kind, tmp_path) as one:
        expected, _ = run(one, 1, set())
    with fresh_store(kind, tmp_path) as store, caplog.at_level(logging.INFO):
        got, _ = run(store, 2, {5, 11})
        saved = stored_thread(store)
    _no_leak(caplog)
    assert got[5] == got[6] and got[11] == got[12]
    assert [b for n, b in enumerate(got) if n not in (5, 11)] == expected
    assert saved["calls"] == CALLS


def _no_leak(caplog: pytest.LogCaptureFixture) -> None:
    """No record at INFO or above (its traceback included) shows the key, the thread's
    name or a call id."""
    for record in caplog.records:
        if record.levelno < logging.INFO:
            continue
        text = record.getMessage() + (record.exc_text or "")
        assert not [word for word in forbidden() if word in text], text


def test_the_secret_is_never_made_up_by_one_process() -> None:
    """A store that fails when the secret is first asked for: no secret of the process's
    own (which would put the thread under a second scope); asked again, the stored one."""

    class Flaky(MemoryStateStore):
        failing = True

        async def load(self, thread: str) -> str | None:
            if self.failing:
                raise ConnectionError("the store is down")
            return await super().load(thread)

    store = Flaky()
    stored = Secret.generate()
    asyncio.run(store.save(SECRET_THREAD, stored.to_json()))
    with pytest.raises(SecretUnavailableError):
        asyncio.run(load_secret(store))
    store.failing = False
    assert asyncio.run(load_secret(store)).label("x") == stored.label("x")


def _memory_engines(count: int, upstream: _Upstream) -> list[ProxyEngine]:
    """`count` processes sharing one in-memory store (archive and states)."""
    archive, states = InMemoryArtifactStore(), MemoryStateStore()
    config = ProxyConfig(upstream="http://upstream.invalid", provider="anthropic")
    return [
        ProxyEngine(
            config,
            pilot=CachePilot(proxy_pilot_config(config.provider), store=archive),
            state_store=states,
            transport=httpx.MockTransport(upstream),
        )
        for _ in range(count)
    ]


_PROPERTY_BODIES = session(13)


def _serve(engines: list[ProxyEngine], hops: list[bool]) -> None:
    async def go() -> None:
        n = 0
        for body in _PROPERTY_BODIES:
            while await _send(engines[n % len(engines)], body) != 200:
                n += 1 if hops[n % len(hops)] else 0  # the resend: this process or the next
            n += 1

    asyncio.run(go())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    drops=st.sets(st.integers(0, 15), max_size=4),
    hops=st.lists(st.booleans(), min_size=1, max_size=6),
)
def test_any_drops_and_resends_send_what_one_process_sends(
    drops: set[int], hops: list[bool]
) -> None:
    """Property (DESIGN 2.3): whichever upstream calls drop and whichever process the client's
    resend reaches, the requests answered are byte for byte one undisturbed process's, and
    each dropped one is the same request as its resend."""
    reference = _Upstream(set())
    _serve(_memory_engines(1, reference), [True])
    upstream = _Upstream(drops)
    _serve(_memory_engines(2, upstream), hops)
    lost = sorted(d for d in drops if d < len(upstream.bodies) - 1)
    assert all(upstream.bodies[d] == upstream.bodies[d + 1] for d in lost)
    kept = [b for n, b in enumerate(upstream.bodies) if n not in drops]
    assert kept == reference.bodies


# ------------------------------------------------------------------ store outages


class _PersistentRedis(PrivateRedis):
    """A private Redis that keeps its data over a stop (append-only file)."""

    def start(self) -> None:
        import subprocess

        if not hasattr(self, "folder"):
            self.folder = tempfile.mkdtemp(prefix="cachepilot-redis-")
        args = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
                self.folder, "--appendonly", "yes", "--appendfsync", "always",
                "--save", ""]  # fmt: skip
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self._ping():
            assert time.monotonic() < deadline, "the private Redis server did not start"
            time.sleep(0.05)


class _Outage:
    """A store that can be taken down and brought back (a real server; for SQLite, a
    directory put where the file was: it can then be neither opened nor created)."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.server: Any = None
        if kind == "postgres":
            self.server = PrivatePostgres()
            self.url = self.server.url
        elif kind == "redis":
            self.server = _PersistentRedis()
            self.url = self.server.url
        else:
            self.url = str(Path(tempfile.mkdtemp(dir=tmp)) / "proxy.sqlite")

    def _files(self) -> list[Path]:
        return [Path(self.url + suffix) for suffix in ("", "-wal", "-shm")]

    def down(self) -> None:
        if self.server is not None:
            self.server.stop()
            return
        for path in self._files():
            if path.exists():
                path.rename(str(path) + ".away")
        Path(self.url).mkdir()

    def up(self) -> None:
        if self.server is not None:
            self.server.start()
            return
        Path(self.url).rmdir()
        for path in self._files():
            away = Path(str(path) + ".away")
            if away.exists():
                away.rename(path)

    def close(self) -> None:
        if self.server is not None:
            with contextlib.suppress(Exception):
                getattr(self.server, "close", self.server.stop)()


@pytest.mark.parametrize("kind", STORES)
def test_a_store_outage_changes_no_byte_and_splits_no_thread(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store goes down after request 6 with two processes serving; a third process
    starts during the outage. While it is down every request is refused with a 503 that says
    why (no process goes on with a state the store does not have, and the new process makes
    up no secret of its own); the client sends each again once the store is back. Every
    request the upstream gets is the undisturbed process's, and the thread is one, under one
    scope, with every call counted once."""
    if kind == "postgres":
        pytest.importorskip("psycopg")
    bodies = session(CALLS)
    with fresh_store("sqlite", tmp_path) as one:
        upstream = _Upstream(set())

        async def alone() -> None:
            engine = _engine(one, upstream)
            for body in bodies:
                assert await _send(engine, body) == 200
            await engine.aclose()

        asyncio.run(alone())
        expected = upstream.bodies
    outage = _Outage(kind, tmp_path)
    try:
        upstream = _Upstream(set())

        async def go() -> list[tuple[int, bytes]]:
            engines = [_engine(outage.url, upstream) for _ in range(2)]
            for n, body in enumerate(bodies[:6]):
                assert await _send(engines[n % 2], body) == 200
            outage.down()
            # A replica starting now: it starts (its archive is opened on first use) and has
            # no secret yet.
            engines.append(_engine(outage.url, upstream))
            refused = []
            for engine in engines:
                answer = await engine.handle("POST", "/v1/chat/completions", "", HEADERS,
                                             json.dumps(bodies[6]).encode())  # fmt: skip
                refused.append((answer.status, answer.body))
            outage.up()
            for n, body in enumerate(bodies[6:]):
                for _ in range(50):  # a client's retries, while connections come back
                    if await _send(engines[(n + 2) % 3], body) == 200:
                        break
                    await asyncio.sleep(0.2)
                else:
                    raise AssertionError("the store did not come back")
            for engine in engines:
                await engine.aclose()
            return refused

        with caplog.at_level(logging.INFO):
            refused = asyncio.run(go())
        saved = stored_thread(outage.url)
        _no_leak(caplog)
    finally:
        outage.close()
    assert all(status == 503 and b"state store is unavailable" in body for status, body in refused)
    assert upstream.bodies == expected
    assert saved["calls"] == CALLS and saved["usage"]["input_tokens"] == CALLS * 1000


# ------------------------------------------------------------------ workers


def test_two_workers_killed_mid_request_and_metrics_exact(tmp_path: Path) -> None:
    """`--workers 2` on SQLite: both workers are SIGKILLed while the upstream holds a
    request; the server replaces them and the client sends the request again. The bytes are
    one process's; every scrape of `/metrics` (whichever worker answers) shows the exact,
    monotonic total of answered calls; every worker's log lines carry level and logger name
    and show no key, thread name or call id."""
    bodies = session(CALLS)
    expected = reference("sqlite", tmp_path, bodies)
    upstream = HoldingUpstream()
    logs = tmp_path / "workers.log"
    killed = 5
    totals: list[float] = []
    try:
        with (
            fresh_store("sqlite", tmp_path) as store,
            proxy_process(upstream.url, store, logs, workers=2) as proxy,
        ):
            for body in bodies[:killed]:
                assert post(proxy.root, body).status_code == 200
            upstream.hold(killed)
            waiting = _send_in_background(proxy.root, bodies[killed], False)
            assert upstream.holding.wait(60)
            old = proxy.workers()
            for pid in old:
                import os
                import signal

                os.kill(pid, signal.SIGKILL)
            waiting.join(30)
            upstream.release()
            for body in bodies[killed:]:
                for _ in range(100):  # while the workers are replaced
                    with contextlib.suppress(httpx.HTTPError):
                        if post(proxy.root, body).status_code == 200:
                            break
                    time.sleep(0.1)
                else:
                    raise AssertionError("no worker answered")
                totals.append(_scraped_total(proxy.root))
            assert not set(old) & set(proxy.workers())
            for _ in range(12):
                totals.append(_scraped_total(proxy.root))
            saved = stored_thread(store)
    finally:
        upstream.close()
    got = list(upstream.bodies)
    assert got[killed] == got[killed + 1]
    assert got[:killed] + got[killed + 1 :] == expected
    # Exact after each answer, whichever worker answered the scrape: the killed workers'
    # answered calls stay counted, the request they lost is not.
    assert totals[: CALLS - killed] == list(range(killed + 1, CALLS + 1))
    assert totals[CALLS - killed :] == [CALLS] * 12
    assert saved["calls"] == CALLS
    assert leaks(logs, forbidden()) == []


def _scraped_total(root: str) -> float:
    text = httpx.get(f"{root}/metrics", headers={"connection": "close"}, timeout=30).text
    name = "cachepilot_proxy_model_calls_total{"
    [line] = [row for row in text.splitlines() if row.startswith(name)]
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.parametrize("how", ["cli", "engine"])
def test_forget_removes_the_thread_from_its_family(tmp_path: Path, how: str) -> None:
    """A thread named by its key (not the header) is a member of a family whose stored
    document keeps its system prompt; `cachepilot forget` (or `engine.threads.forget`) leaves
    no row naming the thread, and the family's document goes with its only member."""
    import sqlite3
    import subprocess

    store = str(tmp_path / "proxy.sqlite")
    prompt = "You are the billing agent of ACME-private-tenant. cwd: /srv/acme."
    upstream = _Upstream(set())
    body = session(3)[-1]
    body["messages"][0]["content"] = prompt
    body["metadata"] = {"session_id": "acme-session-1"}

    async def go(forget: bool) -> str:
        engine = _engine(store, upstream)
        headers = {"authorization": f"Bearer {API_KEY}"}
        answer = await engine.handle(
            "POST", "/v1/chat/completions", "", headers, json.dumps(body).encode()
        )
        assert answer.status == 200
        [name] = engine.threads.names()
        if forget:
            await engine.threads.forget(name)
        await engine.aclose()
        return name

    name = asyncio.run(go(False))

    def rows() -> list[str]:
        conn = sqlite3.connect(store)
        try:
            return [
                str(r[0]) + str(r[1])
                for r in conn.execute("SELECT thread, state FROM cachepilot_state")
            ]
        finally:
            conn.close()

    # The family document lists the thread with its system prompt (packed).
    assert any("cachepilot_family" in r and name in r for r in rows())
    if how == "engine":
        asyncio.run(go(True))
    else:
        done = subprocess.run([sys.executable, "-m", "cachepilot.cli", "forget", "--store",
                               store, name, "--stored-name"], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
    left = rows()
    assert not any(name in r or "cachepilot_family" in r for r in left), left

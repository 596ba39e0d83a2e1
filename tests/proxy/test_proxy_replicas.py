"""Proxy processes sharing one `--store`: each request is prepared over the thread's newest
stored state and saved with compare-and-set, so two or three processes serving one session
send the bytes one process would, and concurrent requests lose no recorded call."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cachepilot import CachePilot, SQLiteArtifactStore
from cachepilot.artifacts.base import REMOVED_BY_FORGET
from cachepilot.messages import Message
from cachepilot.proxy import ProxyConfig, ProxyEngine
from cachepilot.proxy.engine import proxy_pilot_config
from cachepilot.proxy.stores import open_stores
from cachepilot.state.base import MemoryStateStore, SQLiteStateStore, StateStore
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from server_helpers import PrivateRedis, database, postgres_url_or_skip

SYSTEM = "You are a coding agent. cwd: /srv/app."
PARAMETERS = {"type": "object", "properties": {"command": {"type": "string"}}}
TOOL = {"type": "function", "function": {"name": "bash", "parameters": PARAMETERS}}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005}


class Upstream:
    """Answers every request with the same completion and records the bodies it got."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        await asyncio.sleep(0)  # let concurrent requests interleave
        reply = {"id": "r", "object": "chat.completion", "created": 0, "model": "m",
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": "ok"}}],
                 "usage": USAGE}  # fmt: skip
        return httpx.Response(200, json=reply)


def session(calls: int, name: str = "s") -> list[dict[str, Any]]:
    """The Chat Completions bodies of a growing coding session (large, varied outputs)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Fix the failing build of {name}."},
    ]
    bodies = []
    for n in range(calls):
        bodies.append({"model": "m", "tools": [TOOL], "messages": list(messages)})
        call = f"{name}-c{n}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"make t{n}"}),
                        },
                    }
                ],
            }
        )
        digest = [hashlib.sha256(f"{n}/{i}".encode()).hexdigest() for i in range(120)]
        out = "\n".join(f"src/{name}/m_{n}_{i}.c:{i}: warning: {d}" for i, d in enumerate(digest))
        messages.append({"role": "tool", "tool_call_id": call, "content": out})  # fmt: skip
    return bodies


def engine(path: Path | None, upstream: Upstream, store: StateStore | None = None) -> ProxyEngine:
    config = ProxyConfig(upstream="http://upstream.invalid", provider="anthropic")
    artifacts = SQLiteArtifactStore(path / "proxy.sqlite") if path else None
    pilot = CachePilot(proxy_pilot_config(config.provider), store=artifacts)
    states = store if store is not None else SQLiteStateStore(path / "proxy.sqlite")  # type: ignore[operator]
    return ProxyEngine(config, pilot=pilot, state_store=states,
                       transport=httpx.MockTransport(upstream))  # fmt: skip


HEADERS = {"x-cachepilot-thread": "team-session", "authorization": "Bearer sk-team"}


async def send(
    target: ProxyEngine, body: dict[str, Any], headers: dict[str, str] = HEADERS
) -> None:
    answer = await target.handle(
        "POST", "/v1/chat/completions", "", headers, json.dumps(body).encode()
    )
    assert answer.status == 200, answer.body


def run_alternating(
    path: Path, processes: int, bodies: list[dict[str, Any]], headers: dict[str, str] = HEADERS
) -> list[bytes]:
    upstream = Upstream()

    async def go() -> None:
        engines = [engine(path, upstream) for _ in range(processes)]
        for n, body in enumerate(bodies):
            await send(engines[n % processes], body, headers)
        for e in engines:
            await e.aclose()

    asyncio.run(go())
    return upstream.bodies


@pytest.mark.parametrize("processes", [2, 3])
def test_processes_on_one_store_send_what_one_sends(tmp_path: Path, processes: int) -> None:
    bodies = session(40)
    one = run_alternating(tmp_path / "one", 1, bodies)
    many = run_alternating(tmp_path / "many", processes, bodies)
    assert len(one) == len(many) == 40
    assert many == one
    # The session was long enough for the pilot's plan to matter (folds or stubs).
    assert sum(map(len, one[-1:])) < len(json.dumps(bodies[-1]))


def test_a_conversation_without_a_header_stays_one_thread_across_processes(
    tmp_path: Path,
) -> None:
    """Found by its history alone (no header, no body key): a request that another process
    served last still continues its thread."""
    bodies = session(12)
    bare = {"authorization": "Bearer sk-team"}
    one = run_alternating(tmp_path / "one", 1, bodies, bare)
    many = run_alternating(tmp_path / "many", 2, bodies, bare)
    assert many == one
    names = asyncio.run(_names(SQLiteStateStore(tmp_path / "many" / "proxy.sqlite")))
    assert len([n for n in names if "/h-" in n]) == 1  # one thread (besides the family)


def test_without_versions_processes_drift_apart(tmp_path: Path) -> None:
    """The check above can fail: stores that do not version saves let processes drift."""

    class Unversioned:
        def __init__(self, inner: SQLiteStateStore) -> None:
            self.inner = inner

        async def load(self, thread: str) -> str | None:
            return await self.inner.load(thread)

        async def save(self, thread: str, state: str) -> None:
            await self.inner.save(thread, state)

        async def delete(self, thread: str) -> None:
            await self.inner.delete(thread)

    bodies = session(40)
    one = run_alternating(tmp_path / "one", 1, bodies)
    upstream = Upstream()
    path = tmp_path / "many"

    async def go() -> None:
        shared = Unversioned(SQLiteStateStore(path / "proxy.sqlite"))
        engines = [engine(path, upstream, shared) for _ in range(2)]
        for n, body in enumerate(bodies):
            await send(engines[n % 2], body)

    asyncio.run(go())
    assert upstream.bodies != one


def test_concurrent_requests_on_two_processes_lose_no_call(tmp_path: Path) -> None:
    upstream = Upstream()
    bodies = session(12)
    store = SQLiteStateStore(tmp_path / "proxy.sqlite")

    async def go() -> None:
        engines = [engine(tmp_path, upstream) for _ in range(2)]
        for n in range(0, len(bodies), 2):  # each pair at the same time, one per process
            await asyncio.gather(send(engines[0], bodies[n]), send(engines[1], bodies[n + 1]))

    asyncio.run(go())
    names = [n for n in asyncio.run(_names(store)) if n.endswith("team-session")]
    assert len(names) == 1
    saved = json.loads(asyncio.run(store.load(names[0])) or "{}")
    assert saved["usage"]["input_tokens"] == 12 * USAGE["prompt_tokens"]
    assert saved["calls"] == 12


async def _names(store: SQLiteStateStore) -> list[str]:
    conn = sqlite3.connect(store.path)
    try:
        return [str(r[0]) for r in conn.execute("SELECT thread FROM cachepilot_state")]
    finally:
        conn.close()


def test_versions_compare_and_set() -> None:
    async def go() -> None:
        for store in (MemoryStateStore(),):
            assert await store.load_versioned("t") == (None, 0)
            first = await store.save_if("t", "a", 0)
            assert first is not None and first > 0
            assert await store.save_if("t", "b", 0) is None
            await store.save("t", "c")
            assert await store.load_versioned("t") == ("c", first + 1)
            assert await store.version("t") == first + 1

    asyncio.run(go())


def test_sqlite_versions_and_an_older_table(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE cachepilot_state (thread TEXT PRIMARY KEY, state TEXT NOT NULL, "
                 "updated_at REAL NOT NULL)")  # fmt: skip
    conn.execute("INSERT INTO cachepilot_state VALUES ('t', '{}', 0)")
    conn.commit()
    conn.close()
    store = SQLiteStateStore(path)

    async def go() -> None:
        assert await store.load_versioned("t") == ("{}", 0)
        assert await store.save_if("t", "a", 0) == 1  # an older row: counted up from 0
        assert await store.save_if("t", "b", 0) is None
        first = await store.save_if("u", "x", 0)
        assert first is not None and first > 0
        await store.save("u", "y")
        assert await store.load_versioned("u") == ("y", first + 1)

    asyncio.run(go())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_session(tmp: Path, workers: int, bodies: list[dict[str, Any]]) -> list[bytes]:
    """`cachepilot proxy --workers N --store ...` in front of the replay provider."""
    script = ReplayScript([ReplayTurn(Message("assistant", "ok")) for _ in bodies])
    port = _free_port()
    with ReplayProvider(script) as upstream:
        command = [sys.executable, "-m", "cachepilot.cli", "proxy", "--upstream",
                   upstream.base_url.removesuffix("/v1"), "--port", str(port), "--store",
                   str(tmp / "proxy.sqlite"), "--provider", "anthropic",
                   "--workers", str(workers)]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            root = f"http://127.0.0.1:{port}"
            for _ in range(600):
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{root}/healthz", timeout=1).status_code == 200:
                        break
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                time.sleep(0.05)
            with httpx.Client(base_url=f"{root}/v1", timeout=60, headers=HEADERS) as client:
                for body in bodies:
                    # A new connection per request, so the kernel spreads them over workers.
                    reply = client.post("/chat/completions", json=body,
                                        headers={"connection": "close"})  # fmt: skip
                    assert reply.status_code == 200, reply.text
            if workers > 1:  # whichever worker answers a scrape shows the total of all
                seen: list[float] = []
                for _ in range(12):
                    text = httpx.get(f"{root}/metrics", headers={"connection": "close"}).text
                    seen += [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                             if line.startswith("cachepilot_proxy_model_calls_total{")]  # fmt: skip
                assert seen == [len(bodies)] * 12, seen
        finally:
            process.terminate()
            process.wait(timeout=30)
        return [json.dumps(r.body, sort_keys=True).encode() for r in upstream.records]


def test_workers_on_one_port_send_what_one_process_sends(tmp_path: Path) -> None:
    bodies = session(23)  # odd: two workers cannot serve equal shares
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = _serve_session(tmp_path / "one", 1, bodies)
    two = _serve_session(tmp_path / "two", 2, bodies)
    assert len(one) == len(two) == 23 and two == one


def _pg_engine(url: str, upstream: Upstream) -> ProxyEngine:
    config = ProxyConfig(upstream="http://upstream.invalid", provider="anthropic", store=url)
    return ProxyEngine(config, transport=httpx.MockTransport(upstream))


def _alternate_pg(url: str, processes: int, bodies: list[dict[str, Any]]) -> list[bytes]:
    upstream = Upstream()

    async def go() -> None:
        engines = [_pg_engine(url, upstream) for _ in range(processes)]
        for n, body in enumerate(bodies):
            await send(engines[n % processes], body)
        for e in engines:
            await e.aclose()

    asyncio.run(go())
    return upstream.bodies


@pytest.mark.parametrize("processes", [2, 3])
def test_processes_on_one_postgres_store_send_what_one_sends(processes: int) -> None:
    bodies = session(30)
    server = postgres_url_or_skip()
    with database(server) as one_db, database(server) as many_db:
        one = _alternate_pg(one_db, 1, bodies)
        many = _alternate_pg(many_db, processes, bodies)
        assert len(one) == len(many) == 30 and many == one
        # Compared with one process on SQLite: the store kind does not change the bytes.
    assert one == run_alternating_sqlite_reference(bodies)


def run_alternating_sqlite_reference(bodies: list[dict[str, Any]]) -> list[bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        return run_alternating(Path(tmp), 1, bodies)


def test_concurrent_requests_on_postgres_lose_no_call() -> None:
    server = postgres_url_or_skip()
    upstream = Upstream()
    bodies = session(12)
    with database(server) as url:

        async def go() -> dict[str, Any]:
            engines = [_pg_engine(url, upstream) for _ in range(3)]
            for n in range(0, len(bodies), 3):
                await asyncio.gather(*(send(engines[i], bodies[n + i]) for i in range(3)))
            store = engines[0].threads.store
            assert store is not None
            name = next(n for n in engines[0].threads.names() if n.endswith("team-session"))
            saved = json.loads(await store.load(name) or "{}")
            for e in engines:
                await e.aclose()
            return saved

        saved = asyncio.run(go())
    assert saved["usage"]["input_tokens"] == 12 * USAGE["prompt_tokens"]
    assert saved["calls"] == 12


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A Redis server of the test's own: its databases hold nothing of another test."""
    server = PrivateRedis()
    yield server
    server.stop()


def _redis_db(server: PrivateRedis, db: int) -> str:
    return server.url.rsplit("/", 1)[0] + f"/{db}"


@pytest.mark.parametrize("processes", [2, 3])
def test_processes_on_one_redis_store_send_what_one_sends(
    private_redis: PrivateRedis, processes: int
) -> None:
    bodies = session(30)
    one = _alternate_pg(_redis_db(private_redis, 1), 1, bodies)
    many = _alternate_pg(_redis_db(private_redis, 2), processes, bodies)
    assert len(one) == len(many) == 30 and many == one
    # The store kind does not change the bytes.
    assert one == run_alternating_sqlite_reference(bodies)
    import redis

    client = redis.Redis.from_url(_redis_db(private_redis, 2))
    try:  # both stores kept what the session sent in that database, and only there
        assert any(client.scan_iter("cachepilot:proxy:*"))
        assert int(client.get("cachepilot:bytes") or 0) > 0
        assert not any(redis.Redis.from_url(_redis_db(private_redis, 3)).scan_iter("*"))
    finally:
        client.close()


def test_concurrent_requests_on_redis_lose_no_call(private_redis: PrivateRedis) -> None:
    upstream = Upstream()
    bodies = session(12)
    url = _redis_db(private_redis, 1)

    async def go() -> dict[str, Any]:
        engines = [_pg_engine(url, upstream) for _ in range(3)]
        for n in range(0, len(bodies), 3):
            await asyncio.gather(*(send(engines[i], bodies[n + i]) for i in range(3)))
        store = engines[0].threads.store
        assert store is not None
        name = next(n for n in engines[0].threads.names() if n.endswith("team-session"))
        saved = json.loads(await store.load(name) or "{}")
        for e in engines:
            await e.aclose()
        return saved

    saved = asyncio.run(go())
    assert saved["usage"]["input_tokens"] == 12 * USAGE["prompt_tokens"]
    assert saved["calls"] == 12


def test_cli_forgets_a_thread_of_a_redis_store(private_redis: PrivateRedis) -> None:
    url = _redis_db(private_redis, 1)
    upstream = Upstream()

    async def serve() -> str:
        target = _pg_engine(url, upstream)
        for body in session(14):  # the fold that archives comes at the 12th call
            await send(target, body)
        name = next(n for n in target.threads.names() if n.endswith("team-session"))
        await target.aclose()
        return name

    name = asyncio.run(serve())
    artifacts, states = open_stores(url)
    try:
        refs = [info.ref for info in artifacts.list(name)]
        assert refs  # the session's large outputs were archived in Redis
        cli = [sys.executable, "-m", "cachepilot.cli", "forget", "--store", url]
        done = subprocess.run(
            [*cli, name, "--stored-name"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert artifacts.list(name) == [] and artifacts.total_bytes == 0
        assert artifacts.removed(name, refs[0]) == REMOVED_BY_FORGET

        async def state() -> str | None:
            try:
                return await states.load(name)
            finally:
                await states.aclose()  # type: ignore[attr-defined]

        assert asyncio.run(state()) is None
    finally:
        artifacts.close()

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import sqlite3
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import (
    SCHEMA_VERSION,
    Artifact,
    ArtifactInfo,
    ArtifactStore,
    BaseArtifactStore,
    InMemoryArtifactStore,
    SQLiteArtifactStore,
    default_store_path,
)
from cachepilot.artifacts.base import REMOVED_BY_FORGET
from cachepilot.artifacts.sql import SQLArtifactStore
from cachepilot.refs import content_digest, make_ref

DAY = 24 * 3600.0


class FakeClock:
    """A settable clock."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


StoreFactory = Callable[..., BaseArtifactStore]


@pytest.fixture(params=["memory", "sqlite", "sql", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Builds a store of the parametrized kind (closed at teardown); `sql` is the SQLAlchemy
    store on an SQLite file, `postgres` the same on a real PostgreSQL server (skipped without
    one: `. .ci/services.sh` starts it)."""
    made: list[BaseArtifactStore] = []
    databases: contextlib.ExitStack = contextlib.ExitStack()
    if request.param == "postgres":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
        from server_helpers import database, postgres_url_or_skip

        server = postgres_url_or_skip()

    def factory(**kwargs: Any) -> BaseArtifactStore:
        store: BaseArtifactStore
        if request.param == "memory":
            store = InMemoryArtifactStore(**kwargs)
        elif request.param == "sql":
            url = f"sqlite:///{tmp_path / f'sql{len(made)}.sqlite'}"
            store = SQLArtifactStore(url, **kwargs)
        elif request.param == "postgres":
            store = SQLArtifactStore(databases.enter_context(database(server)), **kwargs)
        else:
            store = SQLiteArtifactStore(tmp_path / f"store{len(made)}.sqlite", **kwargs)
        made.append(store)
        return store

    with databases:
        yield factory
        for store in made:
            store.close()


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteArtifactStore]:
    store = SQLiteArtifactStore(tmp_path_factory.mktemp("prop") / "prop.sqlite")
    yield store
    store.close()


_memory_store = InMemoryArtifactStore()

# Text with the awkward parts: lone surrogates, every line break str.splitlines knows, NUL.
_TOKENS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\ud800", "\udfff", "\x00"]
awkward_text = st.lists(st.one_of(st.characters(), st.sampled_from(_TOKENS)), max_size=200).map(
    "".join
)


# --- round trips -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(payload=st.one_of(st.text(), awkward_text))
def test_text_round_trips_exactly(sqlite_store: SQLiteArtifactStore, payload: str) -> None:
    for store in (_memory_store, sqlite_store):
        ref = store.put("prop-text", payload)
        assert ref == make_ref(payload)
        artifact = store.get("prop-text", ref)
        assert artifact is not None
        assert artifact.is_text
        assert artifact.text == payload
        assert artifact.data == payload.encode("utf-8", "surrogatepass")
        assert artifact.size == len(artifact.data)
        assert artifact.sha256 == content_digest(payload)


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=500))
def test_bytes_round_trip_exactly(sqlite_store: SQLiteArtifactStore, payload: bytes) -> None:
    for store in (_memory_store, sqlite_store):
        ref = store.put("prop-bytes", payload)
        artifact = store.get("prop-bytes", ref)
        assert artifact is not None
        assert not artifact.is_text
        assert artifact.data == payload
        assert artifact.text.encode("utf-8", "surrogateescape") == payload


def test_lone_surrogates_and_nul_survive(make_store: StoreFactory) -> None:
    store = make_store()
    payload = "a\ud800b\udfff\x00c\ud83d\ude00 é 😀"
    artifact = store.get("t", store.put("t", payload))
    assert artifact is not None and artifact.text == payload


def test_empty_payload_is_archived(make_store: StoreFactory) -> None:
    store = make_store()
    ref = store.put("t", "")
    artifact = store.get("t", ref)
    assert artifact is not None and artifact.text == "" and artifact.size == 0


# --- put semantics -----------------------------------------------------------------------------


def test_put_is_idempotent_and_keeps_first_meta(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    ref = store.put("t", "payload", meta={"tool": "bash", "reason": "size_gate"})
    clock.advance(60)
    assert store.put("t", "payload", meta={"tool": "other"}) == ref
    infos = store.list("t")
    assert len(infos) == 1
    assert infos[0].meta == {"tool": "bash", "reason": "size_gate"}
    assert infos[0].tool == "bash"
    assert infos[0].created_at == 1_000_000.0
    assert infos[0].last_access == 1_000_060.0
    assert infos[0].access_count == 0


def test_same_bytes_as_str_and_bytes_share_one_artifact(make_store: StoreFactory) -> None:
    store = make_store()
    ref = store.put("t", "hello")
    assert store.put("t", b"hello") == ref
    artifact = store.get("t", ref)
    assert artifact is not None and artifact.is_text and artifact.data == b"hello"


def test_meta_is_stored_as_json(make_store: StoreFactory) -> None:
    store = make_store()
    meta: dict[Any, Any] = {
        "tool": "read",
        "args": {"path": "a.py", "n": 3, "tags": ("x", "y")},
        1: object,
    }
    ref = store.put("t", "x", meta=meta)
    artifact = store.get("t", ref)
    assert artifact is not None
    assert artifact.meta["args"] == {"path": "a.py", "n": 3, "tags": ["x", "y"]}
    assert artifact.meta["1"] == repr(object)
    artifact.meta["tool"] = "mutated"  # a copy: the store is unaffected
    again = store.get("t", ref)
    assert again is not None and again.meta["tool"] == "read"


def test_media_types(make_store: StoreFactory) -> None:
    store = make_store()
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    infos = {
        store.put("t", "text"): "text/plain; charset=utf-8",
        store.put("t", png): "image/png",
        store.put("t", b"\xff\xfe\x00junk"): "application/octet-stream",
        store.put("t", b"{}", media_type="application/json"): "application/json",
    }
    for ref, media_type in infos.items():
        artifact = store.get("t", ref)
        assert artifact is not None and artifact.media_type == media_type


def test_record_access_counts_and_refreshes(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    ref = store.put("t", "x")
    clock.advance(10)
    assert store.record_access("t", ref)
    assert store.record_access("t", ref.upper())
    artifact = store.get("t", ref)
    assert artifact is not None
    assert artifact.access_count == 2
    assert artifact.last_access == clock.now
    assert not store.record_access("t", "0" * 12)
    assert not store.record_access("t", "not a ref")


def test_get_is_read_only(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    ref = store.put("t", "x")
    clock.advance(10)
    artifact = store.get("t", ref)
    assert artifact is not None and artifact.last_access == 1_000_000.0


def test_get_normalizes_and_rejects_malformed_refs(make_store: StoreFactory) -> None:
    store = make_store()
    ref = store.put("t", "x")
    assert store.get("t", f'  "{ref.upper()}" ') is not None
    for bad in ["", "xyz", ref[:-1], ref + "0", "g" * 12, None, 123]:
        assert store.get("t", bad) is None  # type: ignore[arg-type]


def test_list_has_no_data_and_is_oldest_first(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    refs = []
    for i in range(4):
        refs.append(store.put("t", f"payload {i}", meta={"tool": f"tool{i}"}))
        clock.advance(1)
    infos = store.list("t")
    assert [info.ref for info in infos] == refs
    assert all(type(info) is ArtifactInfo for info in infos)
    assert [info.tool for info in infos] == ["tool0", "tool1", "tool2", "tool3"]
    assert store.list("empty") == []


def test_delete_and_delete_thread(make_store: StoreFactory) -> None:
    store = make_store()
    a = store.put("t", "a")
    b = store.put("t", "b")
    other = store.put("u", "a")
    assert store.delete("t", a)
    assert not store.delete("t", a)
    assert not store.delete("t", "bogus")
    assert store.get("t", a) is None
    assert store.get("u", other) is not None
    assert store.delete_thread("t") == 1
    assert store.get("t", b) is None
    assert store.delete_thread("t") == 0
    assert store.list("u")[0].ref == other


def test_forget_thread_leaves_only_why(make_store: StoreFactory) -> None:
    store = make_store()
    a = store.put("t", "a")
    b = store.put("t", "b")
    kept = store.put("u", "a")
    assert store.removed("t", a) is None
    assert store.forget_thread("t") == 2
    assert store.list("t") == [] and store.get("t", b) is None
    assert store.removed("t", a) == store.removed("t", b) == REMOVED_BY_FORGET
    assert store.removed("u", kept) is None and store.get("u", kept) is not None
    # A thread used again after it was forgotten keeps what it archives from then on.
    again = store.put("t", "fresh")
    assert store.get("t", again) is not None
    assert asyncio.run(store.aforget_thread("u")) == 1 and store.list("u") == []


# --- namespaces ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "thread_b",
    ["B", "user:42/session 7", "a'; DROP TABLE artifacts; --", "线程 ☃", "nul\x00byte", "%_*"],
)
def test_refs_never_leak_across_threads(make_store: StoreFactory, thread_b: str) -> None:
    store = make_store()
    ref = store.put("A", "secret of A")
    assert store.get(thread_b, ref) is None
    assert store.list(thread_b) == []
    assert not store.record_access(thread_b, ref)
    assert not store.delete(thread_b, ref)
    own = store.put(thread_b, "mine")
    assert store.get(thread_b, own) is not None
    assert store.get("A", own) is None
    artifact = store.get("A", ref)
    assert artifact is not None and artifact.text == "secret of A" and artifact.thread == "A"
    assert [info.ref for info in store.list(thread_b)] == [own]


def test_same_payload_in_two_threads_is_two_artifacts(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    ref_a = store.put("A", "shared", meta={"tool": "a"})
    ref_b = store.put("B", "shared", meta={"tool": "b"})
    assert ref_a == ref_b
    store.record_access("A", ref_a)
    a, b = store.get("A", ref_a), store.get("B", ref_b)
    assert a is not None and b is not None
    assert (a.meta["tool"], a.access_count) == ("a", 1)
    assert (b.meta["tool"], b.access_count) == ("b", 0)
    store.delete_thread("A")
    assert store.get("B", ref_b) is not None


# --- retention and caps ------------------------------------------------------------------------


def test_retention_removes_idle_artifacts(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock, retention_seconds=7 * DAY)
    old = store.put("t", "old")
    recalled = store.put("u", "recalled")
    clock.advance(5 * DAY)
    fresh = store.put("t", "fresh")
    store.record_access("u", recalled)
    clock.advance(3 * DAY)
    assert store.prune() == 1
    assert store.get("t", old) is None
    assert store.get("t", fresh) is not None
    assert store.get("u", recalled) is not None
    assert store.prune(now=clock.now + 10 * DAY) == 2
    assert store.list("t") == [] and store.list("u") == []


def test_retention_none_keeps_everything(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock, retention_seconds=None)
    ref = store.put("t", "x")
    assert store.prune(now=clock.now + 1000 * DAY) == 0
    assert store.get("t", ref) is not None


def test_put_prunes_expired_artifacts_automatically(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock, retention_seconds=DAY)
    old = store.put("t", "old")
    clock.advance(2 * DAY)
    store.put("other", "new")
    assert store.get("t", old) is None


def test_thread_cap_evicts_least_recently_accessed(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock, max_bytes_per_thread=250)
    first = store.put("t", "1" * 100)
    clock.advance(1)
    second = store.put("t", "2" * 100)
    clock.advance(1)
    store.record_access("t", first)  # first is now more recent than second
    clock.advance(1)
    other = store.put("u", "u" * 200)
    third = store.put("t", "3" * 100)
    assert store.get("t", second) is None
    assert store.get("t", first) is not None
    assert store.get("t", third) is not None
    assert store.get("u", other) is not None  # other threads are untouched


def test_cap_never_evicts_the_artifact_just_put(make_store: StoreFactory) -> None:
    store = make_store(clock=FakeClock(), max_bytes_per_thread=50)
    small = store.put("t", "s" * 10)
    big = store.put("t", "b" * 500)
    assert store.get("t", big) is not None
    assert store.get("t", small) is None


def test_total_cap_evicts_globally_lru(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock, max_total_bytes=300, max_bytes_per_thread=None)
    refs = []
    for thread in ["a", "b", "c"]:
        refs.append((thread, store.put(thread, thread * 100)))
        clock.advance(1)
    store.record_access("a", refs[0][1])
    clock.advance(1)
    newest = store.put("d", "d" * 100)
    assert store.get("b", refs[1][1]) is None
    assert store.get("a", refs[0][1]) is not None
    assert store.get("c", refs[2][1]) is not None
    assert store.get("d", newest) is not None


def test_prune_enforces_caps_too(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "caps.sqlite"
    with SQLiteArtifactStore(path, clock=clock, max_bytes_per_thread=None) as store:
        for i in range(5):
            store.put("t", f"{i}" * 100)
            clock.advance(1)
    with SQLiteArtifactStore(path, clock=clock, max_bytes_per_thread=250) as store:
        # reopening pruned already; nothing left over the cap
        assert sum(info.size for info in store.list("t")) <= 250
        assert [info.created_at for info in store.list("t")] == [clock.now - 2, clock.now - 1]
        assert store.total_bytes == 200


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"retention_seconds": -1},
        {"retention_seconds": 0},
        {"retention_seconds": float("nan")},
        {"retention_seconds": "7d"},
        {"max_bytes_per_thread": 0},
        {"max_bytes_per_thread": -5},
        {"max_bytes_per_thread": 1.5},
        {"max_bytes_per_thread": True},
        {"max_total_bytes": 0},
        {"clock": 12},
    ],
)
def test_bad_config_raises_value_error(make_store: StoreFactory, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        make_store(**kwargs)


@pytest.mark.parametrize("path", [":memory:", "", "   "])
def test_sqlite_rejects_in_memory_paths(path: str) -> None:
    with pytest.raises(ValueError, match="InMemoryArtifactStore"):
        SQLiteArtifactStore(path)


def test_sqlite_rejects_bad_timeout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="busy_timeout"):
        SQLiteArtifactStore(tmp_path / "x.sqlite", busy_timeout=0)


@pytest.mark.parametrize("thread", ["", None, 7, "bad\ud800"])
def test_bad_thread_raises_value_error(make_store: StoreFactory, thread: Any) -> None:
    store = make_store()
    with pytest.raises(ValueError, match="thread"):
        store.put(thread, "x")
    with pytest.raises(ValueError, match="thread"):
        store.get(thread, "0" * 12)
    with pytest.raises(ValueError, match="thread"):
        store.list(thread)


@pytest.mark.parametrize("payload", [None, 12, ["a"], {"a": 1}])
def test_bad_payload_raises_value_error(make_store: StoreFactory, payload: Any) -> None:
    with pytest.raises(ValueError, match="payload"):
        make_store().put("t", payload)


def test_bad_meta_and_media_type_raise_value_error(make_store: StoreFactory) -> None:
    store = make_store()
    with pytest.raises(ValueError, match="meta"):
        store.put("t", "x", meta=["tool"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="media_type"):
        store.put("t", "x", media_type="")


def test_bytes_like_payloads_are_accepted(make_store: StoreFactory) -> None:
    store = make_store()
    ref = store.put("t", bytearray(b"abc"))  # type: ignore[arg-type]
    assert store.put("t", memoryview(b"abc")) == ref  # type: ignore[arg-type]
    artifact = store.get("t", ref)
    assert artifact is not None and artifact.data == b"abc"


def test_stores_satisfy_the_protocol(make_store: StoreFactory) -> None:
    assert isinstance(make_store(), ArtifactStore)


# --- async twins -------------------------------------------------------------------------------


def test_async_twins(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)

    async def scenario() -> None:
        refs = await asyncio.gather(*(store.aput("t", f"p{i}", meta={"i": i}) for i in range(10)))
        assert len(set(refs)) == 10
        artifact = await store.aget("t", refs[0])
        assert isinstance(artifact, Artifact) and artifact.text == "p0"
        assert await store.aget("other", refs[0]) is None
        assert await store.arecord_access("t", refs[0])
        assert len(await store.alist("t")) == 10
        assert await store.adelete("t", refs[1])
        assert await store.aprune(now=clock.now + 30 * DAY) == 9
        assert await store.adelete_thread("t") == 0

    asyncio.run(scenario())


# --- SQLite specifics --------------------------------------------------------------------------


def test_sqlite_persists_and_is_versioned(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "a.sqlite"
    with SQLiteArtifactStore(path) as store:
        ref = store.put("t", "persist me", meta={"tool": "bash"})
    with SQLiteArtifactStore(path) as store:
        artifact = store.get("t", ref)
        assert artifact is not None and artifact.text == "persist me"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    if sys.platform != "win32":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    SQLiteArtifactStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        SQLiteArtifactStore(path)


def test_sqlite_closed_store_raises(tmp_path: Path) -> None:
    store = SQLiteArtifactStore(tmp_path / "c.sqlite")
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.get("t", "0" * 12)


def test_default_store_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CACHEPILOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "home" / "artifacts.sqlite"
    assert (tmp_path / "home").is_dir()
    monkeypatch.delenv("CACHEPILOT_HOME")
    assert default_store_path() == tmp_path / "xdg" / "cachepilot" / "artifacts.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("USERPROFILE", str(tmp_path / "user"))
    if sys.platform != "win32":
        expected = tmp_path / "user" / ".cache" / "cachepilot" / "artifacts.sqlite"
        assert default_store_path() == expected


def test_sqlite_50mb_payload_round_trips(tmp_path: Path) -> None:
    line = "0123456789abcdef" * 8 + "\n"  # 129 chars
    payload = line * (50 * 1024 * 1024 // len(line))
    with SQLiteArtifactStore(tmp_path / "big.sqlite") as store:
        ref = store.put("t", payload, meta={"tool": "cat"})
        artifact = store.get("t", ref)
        assert artifact is not None
        assert artifact.size == len(payload) >= 50_000_000
        assert artifact.text == payload
        assert store.list("t")[0].size == artifact.size
        del artifact
        assert store.delete_thread("t") == 1


def test_sqlite_many_threads_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "threads.sqlite"
    stores = [SQLiteArtifactStore(path), SQLiteArtifactStore(path)]
    n_workers, n_items = 8, 25
    barrier = threading.Barrier(n_workers)
    written: dict[int, list[tuple[str, str]]] = {}
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            store = stores[index % 2]
            thread = f"worker-{index}"
            barrier.wait()
            mine: list[tuple[str, str]] = []
            for j in range(n_items):
                payload = f"worker {index} item {j}\n" * (j + 1)
                ref = store.put(thread, payload, meta={"tool": "t", "j": j})
                mine.append((ref, payload))
                # everyone also writes the same payloads into one shared thread
                assert store.put("shared", f"common {j}") == make_ref(f"common {j}")
                got = store.get(thread, ref)
                assert got is not None and got.text == payload
                store.record_access("shared", make_ref(f"common {j}"))
            written[index] = mine
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(n_workers)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    check = stores[0]
    for index, items in written.items():
        for ref, payload in items:
            artifact = check.get(f"worker-{index}", ref)
            assert artifact is not None and artifact.text == payload
            for other in range(n_workers):
                if other != index:
                    assert check.get(f"worker-{other}", ref) is None
    shared = check.list("shared")
    assert len(shared) == n_items
    assert sum(info.access_count for info in shared) == n_workers * n_items
    for store in stores:
        store.close()


def _process_writer(path: str, proc: int, n_items: int, barrier: Any) -> None:
    """Runs in a spawned process: writes into its own thread and a shared one."""
    barrier.wait(timeout=60)  # both processes open the file and write at the same time
    with SQLiteArtifactStore(path) as store:
        for j in range(n_items):
            payload = f"process {proc} item {j} " * (j % 7 + 1)
            ref = store.put(f"proc-{proc}", payload, meta={"tool": "p", "proc": proc})
            assert store.get(f"proc-{proc}", ref) is not None
            store.put("shared", f"same for all {j}", meta={"proc": proc})
            store.put("shared", f"only from {proc} item {j}".encode())
            other = make_ref(f"process {1 - proc} item {j} " * (j % 7 + 1))
            assert store.get(f"proc-{proc}", other) is None


def test_sqlite_two_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "procs.sqlite"
    # no schema yet: both processes race to create it
    n_items = 40
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_process_writer, args=(str(path), p, n_items, barrier)) for p in (0, 1)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [proc.exitcode for proc in procs] == [0, 0]
    with SQLiteArtifactStore(path) as store:
        for p in (0, 1):
            infos = store.list(f"proc-{p}")
            assert len(infos) == n_items
            for j in range(n_items):
                payload = f"process {p} item {j} " * (j % 7 + 1)
                artifact = store.get(f"proc-{p}", make_ref(payload))
                assert artifact is not None and artifact.text == payload
                assert artifact.meta["proc"] == p
                assert store.get(f"proc-{1 - p}", make_ref(payload)) is None
                extra = store.get("shared", make_ref(f"only from {p} item {j}".encode()))
                assert extra is not None and extra.data == f"only from {p} item {j}".encode()
        shared = store.list("shared")
        assert len(shared) == 3 * n_items
        assert {make_ref(f"same for all {j}") for j in range(n_items)} <= {i.ref for i in shared}


def test_fork_safety_uses_fresh_connections(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    store = SQLiteArtifactStore(tmp_path / "fork.sqlite")
    ref = store.put("t", "before fork")
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child_reads, args=(store, ref))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert store.get("t", make_ref("from child")) is not None
    store.close()


def _child_reads(store: SQLiteArtifactStore, ref: str) -> None:
    artifact = store.get("t", ref)
    if artifact is None or artifact.text != "before fork":
        raise SystemExit(1)
    store.put("t", "from child")

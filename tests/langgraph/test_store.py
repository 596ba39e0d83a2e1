"""`LangGraphArtifactStore`: the core artifact-store contract over real LangGraph stores, the
item layout, native async, paging, foreign items, and a real `StateGraph` using it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import inspect
import json
import logging
import string
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config, get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, IndexConfig, Op, Result
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore
from langgraph.store.sqlite.aio import AsyncSqliteStore

from cachepilot import CachePilot, Config
from cachepilot.artifacts import ArtifactStore, BaseArtifactStore, InMemoryArtifactStore
from cachepilot.refs import content_digest, make_ref
from cachepilot_langgraph.store import (
    DEFAULT_ARTIFACT_NAMESPACE,
    INLINE_FORMAT,
    PAYLOAD_FORMAT,
    VALUE_FORMAT,
    LangGraphArtifactStore,
    thread_label,
)
from cachepilot_langgraph.store_layout import thread_from_label

DAY = 24 * 3600.0

# --- the core contract suite, run against this adapter -------------------------------------------
# tests/core/test_artifacts.py is the contract of every artifact store: each of its tests that
# takes the `make_store` fixture is collected here again, with `make_store` below building
# LangGraph-backed stores.


def _load_core_contract() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "core" / "test_artifacts.py"
    spec = importlib.util.spec_from_file_location("_cachepilot_core_artifact_contract", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_core = _load_core_contract()
FakeClock = _core.FakeClock
CONTRACT_TESTS = sorted(
    name
    for name, fn in vars(_core).items()
    if name.startswith("test_")
    and callable(fn)
    and "make_store" in inspect.signature(fn).parameters
)
for _name in CONTRACT_TESTS:
    globals()[_name] = getattr(_core, _name)


class NoSyncInMemoryStore(InMemoryStore):
    """An `InMemoryStore` whose sync path fails: proves the async twins are native."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        raise AssertionError("the sync store API was used on the async path")


class AsyncDriven(LangGraphArtifactStore):
    """Runs every sync method through its async twin, so the contract covers the async path."""

    def put(self, thread: str, payload: str | bytes, **kwargs: Any) -> str:
        return asyncio.run(self.aput(thread, payload, **kwargs))

    def get(self, thread: str, ref: str) -> Any:
        return asyncio.run(self.aget(thread, ref))

    def record_access(self, thread: str, ref: str) -> bool:
        return asyncio.run(self.arecord_access(thread, ref))

    def list(self, thread: str) -> Any:
        return asyncio.run(self.alist(thread))

    def delete(self, thread: str, ref: str) -> bool:
        return asyncio.run(self.adelete(thread, ref))

    def delete_thread(self, thread: str) -> int:
        return asyncio.run(self.adelete_thread(thread))

    def forget_thread(self, thread: str) -> int:
        return asyncio.run(self.aforget_thread(thread))

    def removed(self, thread: str, ref: str) -> str | None:
        return asyncio.run(self.aremoved(thread, ref))

    def prune(self, now: float | None = None) -> int:
        return asyncio.run(self.aprune(now))


StoreFactory = Callable[..., BaseArtifactStore]


@pytest.fixture(params=["inmemory-sync", "inmemory-async", "sqlitestore"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Builds adapters over a fresh LangGraph store; `page_size=3` exercises paging."""
    with contextlib.ExitStack() as stack:
        made = [0]

        def factory(**kwargs: Any) -> BaseArtifactStore:
            kwargs.setdefault("page_size", 3)
            if request.param == "inmemory-sync":
                return LangGraphArtifactStore(InMemoryStore(), **kwargs)
            if request.param == "inmemory-async":
                return AsyncDriven(NoSyncInMemoryStore(), **kwargs)
            made[0] += 1
            path = tmp_path / f"lg{made[0]}.sqlite"
            store = stack.enter_context(SqliteStore.from_conn_string(str(path)))
            store.setup()
            return LangGraphArtifactStore(store, **kwargs)

        yield factory


def test_the_contract_suite_was_collected() -> None:
    # Guards against a rename in the core tests silently emptying the suite above.
    assert len(CONTRACT_TESTS) >= 20
    assert "test_async_twins" in CONTRACT_TESTS
    assert "test_thread_cap_evicts_least_recently_accessed" in CONTRACT_TESTS


# --- layout --------------------------------------------------------------------------------------


def test_item_layout_in_the_langgraph_store() -> None:
    lg = InMemoryStore()
    store = LangGraphArtifactStore(lg, clock=FakeClock())
    payload = b"\x00\xffbinary\x89PNG"
    ref = store.put("run.7", payload, meta={"tool": "bash", "args": {"cmd": "ls"}})
    assert store.namespace_of("run.7") == (*DEFAULT_ARTIFACT_NAMESPACE, "run%2E7")
    item = lg.get(("cachepilot", "artifacts", "run%2E7"), ref)
    assert item is not None
    value = item.value
    assert value["format"] == VALUE_FORMAT and "data_b64" not in value  # metadata only
    assert store.payload_namespace_of("run.7") == ("cachepilot-payloads", "artifacts", "run%2E7")
    data = lg.get(("cachepilot-payloads", "artifacts", "run%2E7"), ref)
    assert data is not None and data.value["format"] == PAYLOAD_FORMAT
    assert base64.b64decode(data.value["data_b64"]) == payload
    assert value["sha256"] == content_digest(payload) and value["size"] == len(payload)
    assert json.loads(value["meta_json"]) == {"tool": "bash", "args": {"cmd": "ls"}}
    assert (value["created_at"], value["last_access"], value["access_count"]) == (
        1_000_000.0,
        1_000_000.0,
        0,
    )
    assert value["is_text"] is False
    assert lg.list_namespaces(prefix=("cachepilot",)) == [("cachepilot", "artifacts", "run%2E7")]


def test_custom_namespace_keeps_stores_apart() -> None:
    lg = InMemoryStore()
    a = LangGraphArtifactStore(lg, namespace=("tenant-a", "artifacts"))
    b = LangGraphArtifactStore(lg, namespace=("tenant-b",))
    ref = a.put("t", "only in a")
    assert b.get("t", ref) is None
    assert b.list("t") == []
    assert b.delete_thread("t") == 0
    assert b.prune(now=1e12) == 0
    artifact = a.get("t", ref)
    assert artifact is not None and artifact.text == "only in a"
    assert lg.get(("tenant-a", "artifacts", "t"), ref) is not None


def test_payloads_are_never_indexed_for_semantic_search() -> None:
    embedded: list[str] = []

    def embed(texts: Sequence[str]) -> list[list[float]]:
        embedded.extend(texts)
        return [[1.0, 0.0, 0.0] for _ in texts]

    lg = InMemoryStore(index=IndexConfig(dims=3, embed=embed, fields=["$"]))
    lg.put(("docs",), "note", {"text": "indexed"})  # the store does index by default
    assert embedded
    embedded.clear()
    store = LangGraphArtifactStore(lg)
    ref = store.put("t", "a secret tool output " * 20)
    store.record_access("t", ref)
    asyncio.run(store.aput("t", "async payload"))
    assert embedded == []
    assert not lg._vectors.get(store.namespace_of("t"))


def test_store_ttl_does_not_apply_to_artifacts(tmp_path: Path) -> None:
    # The graph's store may expire its own items quickly; artifacts follow the adapter's
    # retention only (they are written with ttl=None).
    with SqliteStore.from_conn_string(
        str(tmp_path / "ttl.sqlite"), ttl={"default_ttl": 0.0001}
    ) as lg:
        lg.setup()
        store = LangGraphArtifactStore(lg)
        ref = store.put("t", "keep me")
        lg.put(("other",), "k", {"v": 1})  # an ordinary item, expires at once
        row = lg.conn.execute("SELECT expires_at FROM store WHERE key = ?", (ref,)).fetchone()
        assert row == (None,)
        lg.sweep_ttl()
        artifact = store.get("t", ref)
        assert artifact is not None and artifact.text == "keep me"


def test_awkward_threads_and_meta_survive_a_json_backend(tmp_path: Path) -> None:
    # SqliteStore serializes with orjson, which refuses lone surrogates; PostgreSQL jsonb
    # refuses NUL. Thread ids and metadata with both still round-trip.
    with SqliteStore.from_conn_string(str(tmp_path / "json.sqlite")) as lg:
        lg.setup()
        store = LangGraphArtifactStore(lg)
        meta = {"tool": "cat", "args": {"path": "a\x00b\ud800.txt"}, "n": 1.5}
        threads = ["a.b", "*", "nul\x00byte", "%2E", "线程 ☃", "user:42/session 7"]
        for thread in threads:
            ref = store.put(thread, "x\ud800\x00y", meta=meta)
            artifact = store.get(thread, ref)
            assert artifact is not None and artifact.text == "x\ud800\x00y"
            assert artifact.meta == meta and artifact.thread == thread
        assert store.get("%2E", make_ref("x\ud800\x00y")) is not None
        assert store.delete_thread(".") == 0  # "%2E" and "." are different threads
        assert store.prune(now=1e12) == len(threads)


@settings(max_examples=200, deadline=None)
@given(thread=st.text(min_size=1, max_size=40))
def test_thread_labels_are_safe_and_reversible(thread: str) -> None:
    try:
        thread.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(ValueError):
            thread_label(thread)
        return
    label = thread_label(thread)
    assert set(label) <= set(string.ascii_letters + string.digits + "-_%")
    assert thread_from_label(label) == thread


def test_labels_the_adapter_cannot_make_are_skipped() -> None:
    lg = InMemoryStore()
    store = LangGraphArtifactStore(lg)
    ref = make_ref("x")
    for label in ["a.b".replace(".", "%2e"), "%FF", "a%2"]:  # lower-case hex, bad UTF-8, cut
        lg.put(("cachepilot", "artifacts", label), ref, {"format": VALUE_FORMAT})
    assert thread_from_label("a%2eb") is None
    assert store.prune(now=1e12) == 0
    assert len(lg.list_namespaces(prefix=("cachepilot",))) == 3


# --- foreign and damaged items -------------------------------------------------------------------


def test_foreign_items_are_ignored_and_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    lg = InMemoryStore()
    store = LangGraphArtifactStore(lg, page_size=2)
    ref = store.put("t", "mine")
    namespace = store.namespace_of("t")
    lg.put(namespace, "not-a-ref", {"anything": 1})
    lg.put(namespace, "0" * 12, {"format": "something else"})
    lg.put((*namespace, "deeper"), "1" * 12, {"format": VALUE_FORMAT})
    lg.put(("cachepilot", "artifacts"), "2" * 12, {"x": 1})
    assert [info.ref for info in store.list("t")] == [ref]
    with caplog.at_level(logging.WARNING):
        assert store.get("t", "0" * 12) is None
    assert "not a cachepilot artifact" in caplog.text
    assert not store.record_access("t", "0" * 12)
    assert store.prune(now=1e12) == 1
    assert lg.get(namespace, "not-a-ref") is not None
    assert lg.get((*namespace, "deeper"), "1" * 12) is not None
    assert lg.get(("cachepilot", "artifacts"), "2" * 12) is not None
    # delete_thread removes every ref-keyed item of the thread's own namespace, readable or not
    store.put("t", "again")
    assert store.delete_thread("t") == 2
    assert lg.get(namespace, "not-a-ref") is not None


def test_an_unreadable_item_is_replaced_by_put() -> None:
    lg = InMemoryStore()
    store = LangGraphArtifactStore(lg)
    ref = make_ref("payload")
    lg.put(store.namespace_of("t"), ref, {"format": VALUE_FORMAT, "size": "huge"})
    assert store.get("t", ref) is None
    assert store.put("t", "payload") == ref
    artifact = store.get("t", ref)
    assert artifact is not None and artifact.text == "payload"


def test_a_corrupt_payload_is_not_served(caplog: pytest.LogCaptureFixture) -> None:
    lg = InMemoryStore()
    store = LangGraphArtifactStore(lg)
    ref = store.put("t", "original text")
    namespace = store.payload_namespace_of("t")
    item = lg.get(namespace, ref)
    assert item is not None
    for bad in [base64.b64encode(b"tampered").decode(), "***not base64***"]:
        lg.put(namespace, ref, {**item.value, "data_b64": bad})
        with caplog.at_level(logging.ERROR):
            assert store.get("t", ref) is None
        assert "corrupt" in caplog.text
        caplog.clear()


def test_items_of_the_first_layout_are_read_and_removed() -> None:
    """Metadata and payload in one item (`cachepilot.artifact/1`), as earlier versions wrote."""
    lg = InMemoryStore()
    store = LangGraphArtifactStore(lg, clock=FakeClock())
    ref = store.put("t", "new layout")
    meta = lg.get(store.namespace_of("t"), ref)
    assert meta is not None
    old_ref = make_ref("old layout")
    lg.put(
        store.namespace_of("t"),
        old_ref,
        {
            **meta.value,
            "format": INLINE_FORMAT,
            "ref": old_ref,
            "sha256": content_digest(b"old layout"),
            "size": len("old layout"),
            "data_b64": base64.b64encode(b"old layout").decode(),
        },
    )
    artifact = store.get("t", old_ref)
    assert artifact is not None and artifact.text == "old layout"
    assert store.record_access("t", old_ref)
    assert {info.ref for info in store.list("t")} == {ref, old_ref}
    assert store.delete_thread("t") == 2
    assert lg.search(store.namespace_of("t")) == []
    assert lg.search(store.payload_namespace_of("t")) == []


def test_media_type_must_be_printable_ascii() -> None:
    store = LangGraphArtifactStore(InMemoryStore())
    with pytest.raises(ValueError, match="media_type"):
        store.put("t", "x", media_type="text/plain\x00")
    with pytest.raises(ValueError, match="media_type"):
        store.put("t", "x", media_type="text/é")


def test_payload_limit_is_a_clear_value_error() -> None:
    store = LangGraphArtifactStore(InMemoryStore(), max_payload_bytes=100)
    assert store.get("t", store.put("t", "x" * 100)) is not None
    with pytest.raises(ValueError, match="max_payload_bytes=100"):
        store.put("t", "x" * 101)
    with pytest.raises(ValueError, match="max_payload_bytes"):
        asyncio.run(store.aput("t", b"y" * 101))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"store": None},
        {"store": InMemoryArtifactStore()},
        {"namespace": ()},
        {"namespace": "cachepilot"},
        {"namespace": ("langgraph", "x")},
        {"namespace": ("a.b",)},
        {"namespace": ("",)},
        {"namespace": ("a", 1)},
        {"page_size": 0},
        {"page_size": 2.5},
        {"max_payload_bytes": 0},
        {"max_payload_bytes": True},
        {"retention_seconds": 0},
        {"clock": "now"},
    ],
)
def test_bad_config_is_refused(kwargs: dict[str, Any]) -> None:
    store = kwargs.pop("store", InMemoryStore())
    with pytest.raises(ValueError):
        LangGraphArtifactStore(store, **kwargs)


def test_close_leaves_the_graph_store_usable() -> None:
    lg = InMemoryStore()
    with LangGraphArtifactStore(lg) as store:
        ref = store.put("t", "x")
    assert LangGraphArtifactStore(lg).get("t", ref) is not None
    assert "InMemoryStore" in repr(store)


# --- paging, several writers, caps ---------------------------------------------------------


def test_paging_lists_and_deletes_everything() -> None:
    clock = FakeClock()
    store = LangGraphArtifactStore(InMemoryStore(), clock=clock, page_size=2)
    refs: dict[str, list[str]] = {}
    for thread in ["a", "b", "c"]:
        refs[thread] = []
        for i in range(7):
            refs[thread].append(store.put(thread, f"{thread}-{i}"))
            clock.advance(1)
    assert [info.ref for info in store.list("b")] == refs["b"]
    assert store.delete_thread("a") == 7
    assert store.prune(now=clock.now + 30 * DAY) == 14


def test_two_processes_share_one_store(tmp_path: Path) -> None:
    # Two SqliteStore connections to one file stand for two machines sharing a database.
    path = str(tmp_path / "shared.sqlite")
    clock = FakeClock()
    with SqliteStore.from_conn_string(path) as lg1, SqliteStore.from_conn_string(path) as lg2:
        lg1.setup()
        lg2.setup()
        one = LangGraphArtifactStore(lg1, clock=clock, max_bytes_per_thread=250)
        two = LangGraphArtifactStore(lg2, clock=clock, max_bytes_per_thread=250)
        first = one.put("t", "1" * 100)
        clock.advance(1)
        assert two.put("t", "1" * 100) == first  # same content, same ref, one artifact
        assert two.record_access("t", first)
        artifact = one.get("t", first)
        assert artifact is not None and artifact.access_count == 1
        assert artifact.last_access == clock.now
        clock.advance(1)
        second = two.put("t", "2" * 100)
        clock.advance(1)
        # `one` has not counted `second` (another machine's write): its tally says 200 bytes
        third = one.put("t", "3" * 100)
        assert len(two.list("t")) == 3  # over the cap until a scan counts everything
        assert one.prune() == 1
        infos = two.list("t")
        assert {info.ref for info in infos} == {second, third}  # `first` was the LRU one
        clock.advance(1)
        # now the tally is exact: one more put passes the cap, the thread is re-read from the
        # store and the least recently accessed artifact goes
        fourth = two.put("t", "4" * 100)
        assert {info.ref for info in one.list("t")} == {third, fourth}


def test_adapters_made_per_call_share_the_schedule_and_totals() -> None:
    ops: list[str] = []

    class CountingStore(InMemoryStore):
        def batch(self, batch_ops: Iterable[Op]) -> list[Result]:
            batch_ops = list(batch_ops)
            ops.extend(type(op).__name__ for op in batch_ops)
            return super().batch(batch_ops)

    lg = CountingStore()
    LangGraphArtifactStore(lg).put("t", "first")  # the first put scans the namespace
    assert "ListNamespacesOp" in ops
    ops.clear()
    for i in range(5):  # a fresh adapter per call, as a node would make from runtime.store
        LangGraphArtifactStore(lg).put("t", f"payload {i}")
    assert ops == ["GetOp", "PutOp", "PutOp"] * 5  # payload + metadata; no scan, no listing
    other = LangGraphArtifactStore(lg, namespace=("elsewhere",))
    ops.clear()
    other.put("t", "x")
    assert "ListNamespacesOp" in ops  # another namespace has its own schedule


def test_prune_reconciles_caps_written_by_others() -> None:
    clock = FakeClock()
    lg = InMemoryStore()
    writer = LangGraphArtifactStore(lg, clock=clock, max_total_bytes=None)
    for thread in ["a", "b", "c", "d"]:
        writer.put(thread, thread * 100)
        clock.advance(1)
    capped = LangGraphArtifactStore(lg, clock=clock, max_total_bytes=250, auto_prune=False)
    assert capped.prune() == 2
    assert [t for t in "abcd" if capped.list(t)] == ["c", "d"]


def test_total_cap_is_checked_on_put_without_auto_prune() -> None:
    clock = FakeClock()
    store = LangGraphArtifactStore(
        InMemoryStore(), clock=clock, max_total_bytes=250, auto_prune=False
    )
    refs = []
    for thread in ["a", "b", "c"]:
        refs.append(store.put(thread, thread * 100))
        clock.advance(1)
    assert store.get("a", refs[0]) is None
    assert store.get("b", refs[1]) is not None and store.get("c", refs[2]) is not None


# --- native async ----------------------------------------------------------------------------


def test_async_twins_on_a_natively_async_store(tmp_path: Path) -> None:
    # AsyncSqliteStore refuses sync calls on its own event loop: everything here must go
    # through aget/aput/asearch/adelete/alist_namespaces.
    async def scenario() -> None:
        async with AsyncSqliteStore.from_conn_string(str(tmp_path / "a.sqlite")) as lg:
            await lg.setup()
            clock = FakeClock()
            store = LangGraphArtifactStore(lg, clock=clock, page_size=2)
            with pytest.raises(asyncio.InvalidStateError):
                store.get("t", "0" * 12)  # the sync path is indeed forbidden here
            refs = await asyncio.gather(
                *(store.aput("t", f"payload {i}", meta={"i": i}) for i in range(5))
            )
            assert refs == [make_ref(f"payload {i}") for i in range(5)]
            await store.aput("u", b"\x00\x01")
            artifact = await store.aget("t", refs[3])
            assert artifact is not None and artifact.text == "payload 3"
            assert artifact.meta == {"i": 3}
            assert await store.aget("u", refs[3]) is None
            assert await store.arecord_access("t", refs[3])
            again = await store.aget("t", refs[3])
            assert again is not None and again.access_count == 1
            assert len(await store.alist("t")) == 5
            assert await store.adelete("t", refs[0])
            assert not await store.adelete("t", refs[0])
            assert await store.adelete_thread("u") == 1
            assert await store.aprune(now=clock.now + 30 * DAY) == 4
            assert await store.alist("t") == []

    asyncio.run(scenario())


# --- properties ------------------------------------------------------------------------------

_TOKENS = ["\n", "\r\n", "\x85", "\u2028", "\ud800", "\udfff", "\x00"]
_payloads = st.one_of(
    st.binary(max_size=400),
    st.text(max_size=200),
    st.lists(st.one_of(st.characters(), st.sampled_from(_TOKENS)), max_size=100).map("".join),
)
_threads = st.text(min_size=1, max_size=20).filter(
    lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)
)
_property_lg = InMemoryStore()
_property_store = LangGraphArtifactStore(_property_lg)
_property_async_store = LangGraphArtifactStore(NoSyncInMemoryStore())
_core_store = InMemoryArtifactStore()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=_payloads, thread=_threads, other=_threads)
def test_put_then_get_returns_exactly_the_bytes(
    payload: str | bytes, thread: str, other: str
) -> None:
    ref = _property_store.put(thread, payload)
    assert ref == _core_store.put(thread, payload) == make_ref(payload)
    artifact = _property_store.get(thread, ref)
    assert artifact is not None
    expected = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
    assert artifact.data == expected
    core = _core_store.get(thread, ref)
    assert core is not None and core.data == artifact.data
    if isinstance(payload, str) and artifact.is_text:
        assert artifact.text == payload
    if other != thread and _property_store.get(other, ref) is not None:
        # only when `other` archived the same content itself
        assert any(info.ref == ref for info in _core_store.list(other))

    async def via_async() -> None:
        aref = await _property_async_store.aput(thread, payload)
        assert aref == ref
        got = await _property_async_store.aget(thread, aref)
        assert got is not None and got.data == expected

    asyncio.run(via_async())


# --- a real graph ----------------------------------------------------------------------------


class GraphState(TypedDict, total=False):
    output: str
    ref: str
    recovered: str
    foreign: str | None


def _build_graph(lg: BaseStore, *, use_async: bool) -> Any:
    def archive(state: GraphState, runtime: Runtime[None]) -> GraphState:
        assert runtime.store is not None
        thread = str(get_config()["configurable"]["thread_id"])
        artifacts = LangGraphArtifactStore(runtime.store)
        ref = artifacts.put(thread, state["output"], meta={"tool": "bash"})
        return {"ref": ref}

    async def arecall(state: GraphState, config: RunnableConfig) -> GraphState:
        thread = str(config["configurable"]["thread_id"])
        artifacts = LangGraphArtifactStore(get_store())
        artifact = await artifacts.aget(thread, state["ref"])
        assert artifact is not None
        await artifacts.arecord_access(thread, state["ref"])
        foreign_ref = state.get("foreign")
        foreign = None
        if foreign_ref is not None:
            found = await artifacts.aget(thread, foreign_ref)
            foreign = None if found is None else found.text
        return {"recovered": artifact.text, "foreign": foreign}

    def recall(state: GraphState, config: RunnableConfig) -> GraphState:
        thread = str(config["configurable"]["thread_id"])
        artifacts = LangGraphArtifactStore(get_store())
        artifact = artifacts.get(thread, state["ref"])
        assert artifact is not None
        artifacts.record_access(thread, state["ref"])
        foreign_ref = state.get("foreign")
        found = None if foreign_ref is None else artifacts.get(thread, foreign_ref)
        return {"recovered": artifact.text, "foreign": None if found is None else found.text}

    builder = StateGraph(GraphState)
    builder.add_node("archive", archive)
    builder.add_node("recall", arecall if use_async else recall)
    builder.add_edge(START, "archive")
    builder.add_edge("archive", "recall")
    builder.add_edge("recall", END)
    return builder.compile(checkpointer=InMemorySaver(), store=lg)


def test_a_graph_archives_in_its_own_store_and_threads_are_isolated() -> None:
    lg = InMemoryStore()
    graph = _build_graph(lg, use_async=True)

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        one = await graph.ainvoke(
            {"output": "output of thread one"}, {"configurable": {"thread_id": "one"}}
        )
        two = await graph.ainvoke(
            {"output": "thread two \x00 output", "foreign": one["ref"]},
            {"configurable": {"thread_id": "two"}},
        )
        return one, two

    one, two = asyncio.run(run())
    assert one["recovered"] == "output of thread one"
    assert two["recovered"] == "thread two \x00 output"
    assert two["foreign"] is None  # thread one's ref is "not found" in thread two
    outside = LangGraphArtifactStore(lg)
    artifact = outside.get("one", one["ref"])
    assert artifact is not None and artifact.access_count == 1 and artifact.tool == "bash"
    assert outside.get("two", one["ref"]) is None
    assert sorted(lg.list_namespaces(prefix=DEFAULT_ARTIFACT_NAMESPACE)) == [
        (*DEFAULT_ARTIFACT_NAMESPACE, "one"),
        (*DEFAULT_ARTIFACT_NAMESPACE, "two"),
    ]


def test_sync_graph_threads_are_isolated() -> None:
    lg = InMemoryStore()
    graph = _build_graph(lg, use_async=False)
    one = graph.invoke({"output": "sync run"}, {"configurable": {"thread_id": "s.1"}})
    two = graph.invoke(
        {"output": "other run", "foreign": one["ref"]}, {"configurable": {"thread_id": "s.2"}}
    )
    assert (one["recovered"], two["recovered"]) == ("sync run", "other run")
    assert two["foreign"] is None
    infos = LangGraphArtifactStore(lg).list("s.1")
    assert [(info.ref, info.access_count) for info in infos] == [(one["ref"], 1)]


def test_pilot_archives_and_recalls_through_the_graph_store() -> None:
    lg = InMemoryStore()
    pilot = CachePilot(Config(), store=LangGraphArtifactStore(lg))
    output = "\n".join(f"line {i}: " + "x" * 80 for i in range(2000))
    reduced = pilot.ingest("bash", {"command": "cat big.log"}, output, "call-1", thread="t.1")
    assert len(reduced) < len(output)
    infos = LangGraphArtifactStore(lg).list("t.1")
    assert len(infos) == 1 and infos[0].ref in reduced
    recalled = pilot.recall(infos[0].ref, lines="1-3", thread="t.1")
    assert "line 0:" in recalled and "line 2:" in recalled
    assert "was not found in this conversation" in pilot.recall(infos[0].ref, thread="other")


def test_a_payload_too_big_to_archive_is_bounded_and_counted() -> None:
    store = LangGraphArtifactStore(InMemoryStore(), max_payload_bytes=1000)
    pilot = CachePilot(Config(), store=store)
    output = "y" * 200_000
    text = pilot.ingest("bash", {"command": "yes"}, output, "c", thread="t")
    assert len(text) < 5_000 and "the archive is unavailable" in text
    assert pilot.state("t").archive_failures == 1
    assert store.list("t") == []
    small = "z\n" * 400  # under the size limit: passed whole, nothing lost
    assert pilot.ingest("bash", {"command": "z"}, small + "z" * 2_000, "d", thread="t") == (
        small + "z" * 2_000
    )


def test_adapter_satisfies_the_protocol() -> None:
    assert isinstance(LangGraphArtifactStore(InMemoryStore()), ArtifactStore)


def test_a_fresh_process_first_put_reads_no_payloads() -> None:
    """The first put scans the namespace (retention, caps): metadata items only."""
    from langgraph.store.base import SearchOp

    import cachepilot_langgraph.store_ops as adapter_module

    read: list[int] = []

    class CountingStore(InMemoryStore):
        def batch(self, batch_ops: Iterable[Op]) -> list[Result]:
            batch_ops = list(batch_ops)
            results = super().batch(batch_ops)
            for op, result in zip(batch_ops, results, strict=True):
                if isinstance(op, SearchOp):
                    read.extend(len(json.dumps(item.value)) for item in result)
            return results

    lg = CountingStore()
    filler = LangGraphArtifactStore(lg)
    for i in range(20):
        filler.put(f"t{i % 4}", f"{i} " + "x" * 100_000)
    adapter_module._SHARED.clear()  # a new process: no tallies, no schedule
    read.clear()
    fresh = LangGraphArtifactStore(lg)
    fresh.put("t0", "one more output")
    assert len(read) == 20  # every artifact was looked at (retention and caps) ...
    assert sum(read) < 30_000  # ... through its metadata only (2 MB of payloads stay unread)

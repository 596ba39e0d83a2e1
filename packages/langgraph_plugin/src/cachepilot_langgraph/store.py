"""Artifact store over LangGraph's `BaseStore`, so a graph's own store holds the originals.

With a `PostgresStore` or `RedisStore` behind the graph, every machine serving the graph sees the
same archive: a ref handed to the model on one machine is recallable on another.

Layout (one item per artifact):

- namespace ``(*namespace, <thread label>)``; the label is the thread id percent-encoded down to
  ``[A-Za-z0-9_-]`` because `BaseStore` labels may not contain ``.`` or NUL and some backends
  give ``*``, ``%`` or ``:`` a meaning (``"run.7"`` becomes ``"run%2E7"``);
- key: the ref (12 hex characters, content-addressed: the same content gives the same ref in
  every store of this package);
- value: the metadata, a JSON object ``{"format": "cachepilot.artifact/2", "ref", "sha256",
  "size", "is_text", "media_type", "meta_json", "created_at", "last_access", "access_count",
  "seq"}`` (the metadata is ASCII-escaped JSON text, because PostgreSQL ``jsonb`` and
  ``orjson`` refuse NUL characters or lone surrogates in strings);
- the payload in its own item, in a parallel tree ``(<first label>-payloads, *rest, <thread
  label>)``, key the ref, value ``{"format": "cachepilot.payload/1", "data_b64"}`` (base64:
  exact bytes, lone surrogates, NUL and binary survive every backend). Listing, caps, retention
  and access counts read and write the small metadata items only; a recall reads both. Items of
  the first layout (``cachepilot.artifact/1``, payload inline) are still read, counted and
  removed.

An artifact removed by the retention or a size cap leaves a small tombstone item (key
``removed-<ref>``, value ``{"format": "cachepilot.removed/1", "reason", "at"}``) so a recall
can say why the ref is gone; tombstones are swept after the retention (at least 30 days).

Items are written with ``index=False`` (payloads are never embedded for semantic search) and
``ttl=None`` (only this adapter's retention removes them).

Connections: ``PostgresStore.from_conn_string(url)`` holds one connection and never reconnects;
after a server restart every put fails (the pilot then counts archive failures and cuts large
outputs to a preview). Give it a pool that checks connections before lending them, and it
recovers by itself::

    from psycopg_pool import ConnectionPool

    with PostgresStore.from_conn_string(
        url, pool_config={"max_size": 8, "check": ConnectionPool.check_connection}
    ) as store:
        ...

Limits and costs, all documented on `LangGraphArtifactStore`:

- one payload is one store value; base64 adds a third, so backend value limits apply
  (PostgreSQL ``jsonb`` about 255 MiB, Redis 512 MiB); `max_payload_bytes` (default 128 MiB)
  refuses bigger payloads up front with a `ValueError`;
- `BaseStore` has no partial update: counting a recall or re-archiving known content rewrites the
  metadata item, and the count is last-writer-wins between machines;
- listing, size caps and `prune` read the metadata items they inspect, page by page;
- the payload is written before its metadata: a crash in between leaves an unreferenced
  payload item (never read; `delete_thread` does not see it).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar, cast

from langgraph.store.base import BaseStore, Item

from cachepilot.artifacts.base import (
    AUTO_PRUNE_INTERVAL_SECONDS,
    DEFAULT_MAX_BYTES_PER_THREAD,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_RETENTION_SECONDS,
    REMOVED_BY_FORGET,
    REMOVED_BY_RETENTION,
    REMOVED_BY_SIZE,
    TOMBSTONE_SECONDS,
    Artifact,
    ArtifactInfo,
    BaseArtifactStore,
    Clock,
    Encoded,
    artifact_from,
    check_same_content,
    check_thread,
    encode_payload,
    now_from,
)
from cachepilot.refs import content_digest, is_ref
from cachepilot_langgraph.store_layout import (
    DEFAULT_ARTIFACT_NAMESPACE,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PAGE_SIZE,
    INLINE_FORMAT,
    PAYLOAD_FORMAT,
    TOMBSTONE_FORMAT,
    TOMBSTONE_PREFIX,
    VALUE_FORMAT,
    Record,
    ascii_meta,
    check_media_type,
    check_namespace,
    check_positive_int,
    lru_victims,
    parse_record,
    thread_from_label,
    thread_label,
)
from cachepilot_langgraph.store_ops import (
    Delete,
    Flow,
    ListNamespaces,
    Op,
    Put,
    Search,
    anative,
    execute,
    get_item,
    put_tombstones,
    shared_state,
)

__all__ = [
    "DEFAULT_ARTIFACT_NAMESPACE",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "INLINE_FORMAT",
    "PAYLOAD_FORMAT",
    "VALUE_FORMAT",
    "LangGraphArtifactStore",
    "thread_label",
]

_FORGOTTEN_KEY = "forgotten"
"""Tombstone key (after the prefix) of a forgotten thread: never a ref (12 hex characters)."""

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class LangGraphArtifactStore(BaseArtifactStore):
    """Artifact store over a LangGraph `BaseStore`; same semantics as the core stores.

    Refs are content-addressed per thread (the same content gives the same ref as
    `InMemoryArtifactStore` and `SQLiteArtifactStore`); a ref from another thread is "not
    found". Sync methods use the store's `get`/`put`/`search`/`delete`/`list_namespaces`; the
    async twins use `aget`/`aput`/`asearch`/`adelete`/`alist_namespaces` (native async, no worker
    threads; a sync-only store such as `SqliteStore` or `PostgresStore` is driven through its sync
    API in a worker thread instead). With an async-only store (`AsyncPostgresStore`,
    `AsyncSqliteStore`) call the sync methods from worker threads only, as LangGraph requires.

    Retention and caps match the core stores: `put` applies retention at most every ten minutes
    (by the clock) and then enforces the caps, evicting least-recently-accessed artifacts (never
    the one just put). The caps are checked on `put` against running byte totals, confirmed by
    reading the store before anything is evicted; writers on other machines are counted when
    `prune` (or the next periodic retention run) scans the store. The totals and the retention
    schedule are shared by all adapters over one store object and namespace in a process, so
    making an adapter per call (from ``runtime.store`` in a node) costs nothing. Access counts
    are read-modify-write: concurrent recalls on two machines may count once.

    Args:
        store: The graph's store (the one given to ``compile(store=...)``).
        namespace: Namespace prefix of the artifacts; each thread gets ``(*namespace, label)``.
        retention_seconds: Remove artifacts not accessed for this long (None: keep).
        max_bytes_per_thread: Per-thread cap; least-recently-accessed evicted first (None: no cap).
        max_total_bytes: Cap over this namespace, same eviction order (None: no cap).
        clock: Time source in seconds (inject one in tests).
        auto_prune: Apply retention on `put` (every ten minutes at most). Each run reads the
            whole namespace: switch it off for very large shared stores and call `prune` from a
            scheduled job instead.
        max_payload_bytes: Largest payload accepted; bigger ones raise `ValueError` (the pilot
            then passes it whole when under the tool's size limit, else a head/tail preview,
            and counts an archive failure). None: no limit besides the backend's.
        page_size: Items per `search` / `list_namespaces` page.

    Raises:
        ValueError: for a store that is not a `BaseStore`, a bad namespace, a non-positive
            retention, cap or page size, or a non-callable clock.
    """

    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        store: BaseStore,
        *,
        namespace: Sequence[str] = DEFAULT_ARTIFACT_NAMESPACE,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        max_bytes_per_thread: int | None = DEFAULT_MAX_BYTES_PER_THREAD,
        max_total_bytes: int | None = DEFAULT_MAX_TOTAL_BYTES,
        clock: Clock = time.time,
        auto_prune: bool = True,
        max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if not isinstance(store, BaseStore):
            raise ValueError(
                f"store must be a langgraph.store.base.BaseStore, got {type(store).__name__}"
            )
        self._init_store(retention_seconds, max_bytes_per_thread, max_total_bytes, clock)
        self.store = store
        self.namespace = check_namespace(namespace)
        self.max_payload_bytes = check_positive_int(
            "max_payload_bytes", max_payload_bytes, allow_none=True
        )
        self.page_size = cast(int, check_positive_int("page_size", page_size, allow_none=False))
        self._auto_prune = bool(auto_prune)
        self._shared = shared_state(store, self.namespace)

    def __repr__(self) -> str:
        return (
            f"LangGraphArtifactStore({type(self.store).__name__}, namespace={self.namespace!r}, "
            f"limits={self.limits!r})"
        )

    def namespace_of(self, thread: str) -> tuple[str, ...]:
        """The `BaseStore` namespace holding a thread's artifacts.

        Raises:
            ValueError: for an empty or non-UTF-8-encodable thread id.
        """
        return (*self.namespace, thread_label(thread))

    def payload_namespace_of(self, thread: str) -> tuple[str, ...]:
        """The `BaseStore` namespace holding a thread's payloads (outside the metadata tree,
        so listings never read them).

        Raises:
            ValueError: for an empty or non-UTF-8-encodable thread id.
        """
        first, *rest = self.namespace
        return (f"{first}-payloads", *rest, thread_label(thread))

    def close(self) -> None:
        """Nothing to release: the `BaseStore` belongs to the graph and stays open."""

    # -- sync hooks (the base class's public methods call these) ----------------------------

    def _insert(self, thread: str, enc: Encoded, now: float) -> int | None:
        return self._run(self._flow_insert(thread, enc, now))

    def _fetch(self, thread: str, ref: str) -> Artifact | None:
        return self._run(self._flow_fetch(thread, ref))

    def _count_access(self, thread: str, ref: str, now: float) -> bool:
        return self._run(self._flow_count_access(thread, ref, now))

    def _list_thread(self, thread: str) -> builtins.list[ArtifactInfo]:
        return self._run(self._flow_list(thread))

    def _delete_one(self, thread: str, ref: str) -> bool:
        return self._run(self._flow_delete_one(thread, ref))

    def _delete_all(self, thread: str) -> int:
        return self._run(self._flow_delete_all(thread))

    def _removed_reason(self, thread: str, ref: str) -> str | None:
        return self._run(self._flow_removed(thread, ref))

    def _mark_forgotten(self, thread: str) -> None:
        self._run(self._flow_mark_forgotten(thread))

    def prune(self, now: float | None = None) -> int:
        """Remove artifacts idle longer than the retention, then enforce the caps."""
        removed = self._run(self._flow_sweep(now_from(self._clock, now), None, retention=True))
        if removed:
            logger.info("pruned %d artifacts from %r", removed, self.namespace)
        return removed

    # -- native async twins ---------------------------------------------------------------

    async def aput(
        self,
        thread: str,
        payload: str | bytes,
        *,
        meta: Mapping[str, Any] | None = None,
        media_type: str | None = None,
    ) -> str:
        """Async `put` (through the store's native async methods)."""
        check_thread(thread)
        enc = encode_payload(payload, meta, media_type)
        evicted = await self._arun(self._flow_insert(thread, enc, now_from(self._clock, None)))
        if evicted is not None:
            logger.debug(
                "archived artifact %s (%d bytes), evicted %d", enc.ref, len(enc.data), evicted
            )
        return enc.ref

    async def aget(self, thread: str, ref: str) -> Artifact | None:
        """Async `get`."""
        key = self._key(thread, ref)
        return None if key is None else await self._arun(self._flow_fetch(thread, key))

    async def arecord_access(self, thread: str, ref: str) -> bool:
        """Async `record_access`."""
        key = self._key(thread, ref)
        if key is None:
            return False
        now = now_from(self._clock, None)
        return await self._arun(self._flow_count_access(thread, key, now))

    async def alist(self, thread: str) -> builtins.list[ArtifactInfo]:
        """Async `list`."""
        return await self._arun(self._flow_list(check_thread(thread)))

    async def adelete(self, thread: str, ref: str) -> bool:
        """Async `delete`."""
        key = self._key(thread, ref)
        return False if key is None else await self._arun(self._flow_delete_one(thread, key))

    async def aremoved(self, thread: str, ref: str) -> str | None:
        """Async `removed`."""
        key = self._key(thread, ref)
        return None if key is None else await self._arun(self._flow_removed(thread, key))

    async def adelete_thread(self, thread: str) -> int:
        """Async `delete_thread`."""
        return await self._arun(self._flow_delete_all(check_thread(thread)))

    async def aforget_thread(self, thread: str) -> int:
        """Async `forget_thread`: the thread's items go, one tombstone says it was forgotten."""
        count = await self._arun(self._flow_delete_all(check_thread(thread)))
        await self._arun(self._flow_mark_forgotten(thread))
        return count

    async def aprune(self, now: float | None = None) -> int:
        """Async `prune`."""
        flow = self._flow_sweep(now_from(self._clock, now), None, retention=True)
        removed = await self._arun(flow)
        if removed:
            logger.info("pruned %d artifacts from %r", removed, self.namespace)
        return removed

    # -- drivers ----------------------------------------------------------------------------

    def _run(self, flow: Flow[_T]) -> _T:
        try:
            result: Any = None
            while True:
                try:
                    op = flow.send(result)
                except StopIteration as stop:
                    return cast(_T, stop.value)
                result = execute(self.store, op)
        finally:
            flow.close()

    async def _arun(self, flow: Flow[_T]) -> _T:
        try:
            result: Any = None
            while True:
                try:
                    op = flow.send(result)
                except StopIteration as stop:
                    return cast(_T, stop.value)
                result = await self._aexecute(op)
        finally:
            flow.close()

    async def _aexecute(self, op: Op) -> object:
        if not self._shared.sync_only:
            try:
                return await anative(self.store, op)
            except NotImplementedError:
                # A sync-only store (`SqliteStore`, `PostgresStore`) refuses the async API
                # before doing anything, so the same operation is retried on its sync API.
                logger.debug(
                    "%s has no async API; using its sync API in a worker thread",
                    type(self.store).__name__,
                )
                self._shared.sync_only = True
        return await asyncio.to_thread(execute, self.store, op)

    # -- flows --------------------------------------------------------------------------------

    def _flow_insert(self, thread: str, enc: Encoded, now: float) -> Flow[int | None]:
        size = len(enc.data)
        if self.max_payload_bytes is not None and size > self.max_payload_bytes:
            raise ValueError(
                f"payload of {size} bytes exceeds max_payload_bytes={self.max_payload_bytes} "
                "of this LangGraph store adapter"
            )
        media_type = check_media_type(enc.media_type)
        evicted = 0
        if self._auto_prune and self._auto_prune_due(now):
            evicted += yield from self._flow_sweep(now, None, retention=True)
        namespace = self.namespace_of(thread)
        item = yield from get_item(namespace, enc.ref)
        if item is not None:
            record = parse_record(item.value, thread, enc.ref)
            if record is not None:
                check_same_content(enc, record.info.sha256)
                if now > record.info.last_access:
                    yield Put(namespace, enc.ref, {**item.value, "last_access": now})
                return None
            logger.warning("replacing an unreadable item at artifact ref %s", enc.ref)
        value = {
            "format": VALUE_FORMAT,
            "ref": enc.ref,
            "sha256": enc.sha256,
            "size": size,
            "is_text": enc.is_text,
            "media_type": media_type,
            "meta_json": ascii_meta(enc.meta_json),
            "created_at": now,
            "last_access": now,
            "access_count": 0,
            "seq": self._next_seq(),
        }
        payload = {"format": PAYLOAD_FORMAT, "data_b64": base64.b64encode(enc.data).decode("ascii")}
        # The payload first: metadata never names a payload that is not there.
        yield Put(self.payload_namespace_of(thread), enc.ref, payload)
        yield Put(namespace, enc.ref, value)
        self._add_bytes(thread, size)
        evicted += yield from self._flow_enforce_caps(thread, enc.ref, now)
        return evicted

    def _flow_fetch(self, thread: str, ref: str) -> Flow[Artifact | None]:
        item = yield from get_item(self.namespace_of(thread), ref)
        if item is None:
            return None
        record = parse_record(item.value, thread, ref)
        if record is None:
            logger.warning("item at artifact ref %s is not a cachepilot artifact", ref)
            return None
        encoded = item.value.get("data_b64")
        if item.value.get("format") == VALUE_FORMAT:
            payload = yield from get_item(self.payload_namespace_of(thread), ref)
            value = None if payload is None else payload.value
            encoded = value.get("data_b64") if isinstance(value, Mapping) else None
        try:
            data = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except (binascii.Error, ValueError):
            data = None
        if (
            data is None
            or len(data) != record.info.size
            or content_digest(data) != (record.info.sha256)
        ):
            logger.error("artifact %s is corrupt in the store (payload does not match)", ref)
            return None
        return artifact_from(record.info, data)

    def _flow_removed(self, thread: str, ref: str) -> Flow[str | None]:
        for key in (ref, _FORGOTTEN_KEY):
            item = yield from get_item(self.namespace_of(thread), TOMBSTONE_PREFIX + key)
            value = None if item is None else item.value
            if isinstance(value, Mapping) and value.get("format") == TOMBSTONE_FORMAT:
                reason = value.get("reason")
                return reason if isinstance(reason, str) else None
        return None

    def _flow_mark_forgotten(self, thread: str) -> Flow[None]:
        value = {"format": TOMBSTONE_FORMAT, "reason": REMOVED_BY_FORGET, "at": self._clock()}
        yield Put(self.namespace_of(thread), TOMBSTONE_PREFIX + _FORGOTTEN_KEY, value)

    def _flow_count_access(self, thread: str, ref: str, now: float) -> Flow[bool]:
        namespace = self.namespace_of(thread)
        item = yield from get_item(namespace, ref)
        record = None if item is None else parse_record(item.value, thread, ref)
        if item is None or record is None:
            return False
        value = {
            **item.value,
            "access_count": record.info.access_count + 1,
            "last_access": max(record.info.last_access, now),
        }
        yield Put(namespace, ref, value)
        return True

    def _flow_list(self, thread: str) -> Flow[builtins.list[ArtifactInfo]]:
        entries = yield from self._flow_items(self.namespace_of(thread), thread)
        records = sorted(
            (record for _key, record in entries if record is not None), key=Record.age_key
        )
        self._set_thread_bytes(thread, sum(record.info.size for record in records))
        return [record.info for record in records]

    def _flow_delete_one(self, thread: str, ref: str) -> Flow[bool]:
        namespace = self.namespace_of(thread)
        item = yield from get_item(namespace, ref)
        if item is None:
            return False
        yield from self._flow_drop(thread, (ref,))
        record = parse_record(item.value, thread, ref)
        if record is not None:
            self._add_bytes(thread, -record.info.size)
        return True

    def _flow_drop(self, thread: str, refs: tuple[str, ...]) -> Flow[None]:
        """Delete artifacts: their metadata items, then their payload items."""
        yield Delete(self.namespace_of(thread), refs)
        yield Delete(self.payload_namespace_of(thread), refs)

    def _flow_delete_all(self, thread: str) -> Flow[int]:
        namespace = self.namespace_of(thread)
        tombstones: builtins.list[tuple[str, float]] = []
        entries = yield from self._flow_items(namespace, thread, tombstones)
        if entries:
            yield from self._flow_drop(thread, tuple(key for key, _record in entries))
        if tombstones:
            yield Delete(namespace, tuple(key for key, _at in tombstones))
        shared = self._shared
        with shared.lock:
            if shared.total_bytes is not None:
                shared.total_bytes -= sum(r.info.size for _k, r in entries if r is not None)
            shared.thread_bytes[thread] = 0
        return len(entries)

    def _flow_items(
        self,
        namespace: tuple[str, ...],
        thread: str,
        tombstones: builtins.list[tuple[str, float]] | None = None,
    ) -> Flow[builtins.list[tuple[str, Record | None]]]:
        """Every ref-keyed item of one namespace, parsed, read page by page (and, into
        `tombstones` when given, the key and time of every tombstone)."""
        seen: set[str] = set()
        entries: builtins.list[tuple[str, Record | None]] = []
        offset = 0
        while True:
            page = cast("builtins.list[Item]", (yield Search(namespace, offset, self.page_size)))
            fresh = 0
            for item in page:
                # A search covers deeper namespaces too: only this thread's own items count.
                if tuple(item.namespace) != namespace:
                    continue
                if not is_ref(item.key):
                    if tombstones is not None and item.key.startswith(TOMBSTONE_PREFIX):
                        at = item.value.get("at") if isinstance(item.value, Mapping) else None
                        if item.key not in seen:
                            seen.add(item.key)
                            fresh += 1
                            tombstones.append(
                                (item.key, float(at) if isinstance(at, int | float) else 0.0)
                            )
                    continue
                if item.key in seen:
                    continue
                seen.add(item.key)
                fresh += 1
                entries.append((item.key, parse_record(item.value, thread, item.key)))
            # A short page ends the listing; so does a page with nothing new (a store that
            # ignores offsets would otherwise loop forever).
            if len(page) < self.page_size or (fresh == 0 and page):
                return entries
            offset += len(page)

    def _flow_namespaces(self) -> Flow[builtins.list[tuple[tuple[str, ...], str]]]:
        """(namespace, thread) of every thread holding items under this adapter's prefix."""
        found: dict[tuple[str, ...], str] = {}
        depth = len(self.namespace) + 1
        offset = 0
        while True:
            page = cast(
                "builtins.list[tuple[str, ...]]",
                (yield ListNamespaces(self.namespace, offset, self.page_size)),
            )
            fresh = 0
            for namespace in map(tuple, page):
                if len(namespace) != depth or namespace[: depth - 1] != self.namespace:
                    continue
                thread = thread_from_label(namespace[-1])
                if thread is None or namespace in found:
                    continue
                found[namespace] = thread
                fresh += 1
            if len(page) < self.page_size or (fresh == 0 and page):
                return list(found.items())
            offset += len(page)

    def _flow_enforce_caps(self, thread: str, keep: str, now: float) -> Flow[int]:
        """Enforce the caps after `keep` was put in `thread` (never evicting it)."""
        removed = 0
        cap = self.limits.max_bytes_per_thread
        if cap is not None:
            known = self._shared.thread_bytes.get(thread)
            if known is None or known > cap:
                namespace = self.namespace_of(thread)
                entries = yield from self._flow_items(namespace, thread)
                records = [record for _key, record in entries if record is not None]
                used = sum(record.info.size for record in records)
                self._set_thread_bytes(thread, used)
                victims = lru_victims(records, used - cap, {(thread, keep)})
                if victims:
                    gone = [v.info.ref for v in victims]
                    yield from put_tombstones(namespace, gone, REMOVED_BY_SIZE, now)
                    yield from self._flow_drop(thread, tuple(gone))
                    self._add_bytes(thread, -sum(v.info.size for v in victims))
                    removed += len(victims)
        total_cap = self.limits.max_total_bytes
        total = self._shared.total_bytes
        if total_cap is not None and (total is None or total > total_cap):
            removed += yield from self._flow_sweep(now, (thread, keep), retention=False)
        if removed:
            logger.debug("evicted %d artifacts to respect size caps", removed)
        return removed

    def _flow_sweep(
        self, now: float, keep: tuple[str, str] | None, *, retention: bool
    ) -> Flow[int]:
        """Scan the whole namespace: retention (when asked), then both caps; resets the tallies."""
        protected = set() if keep is None else {keep}
        removed = 0
        by_thread: dict[str, builtins.list[Record]] = {}
        seconds = self.limits.retention_seconds if retention else None
        # All namespaces are listed before anything is deleted: deleting shifts the pages.
        forget = now - max(seconds or 0.0, TOMBSTONE_SECONDS)
        for namespace, thread in (yield from self._flow_namespaces()):
            tombstones: builtins.list[tuple[str, float]] = []
            entries = yield from self._flow_items(namespace, thread, tombstones)
            records = [record for _key, record in entries if record is not None]
            stale = tuple(key for key, at in tombstones if at < forget)
            if stale and retention:
                yield Delete(namespace, stale)
            if seconds is not None:
                cutoff = now - seconds
                expired = [
                    r
                    for r in records
                    if r.info.last_access < cutoff and (thread, r.info.ref) not in protected
                ]
                if expired:
                    gone = {r.info.ref for r in expired}
                    yield from put_tombstones(namespace, sorted(gone), REMOVED_BY_RETENTION, now)
                    yield from self._flow_drop(thread, tuple(r.info.ref for r in expired))
                    removed += len(expired)
                    records = [r for r in records if r.info.ref not in gone]
            by_thread[thread] = records
        cap = self.limits.max_bytes_per_thread
        if cap is not None:
            for thread, records in by_thread.items():
                used = sum(r.info.size for r in records)
                victims = lru_victims(records, used - cap, protected)
                if victims:
                    doomed_refs = [v.info.ref for v in victims]
                    namespace = self.namespace_of(thread)
                    yield from put_tombstones(namespace, doomed_refs, REMOVED_BY_SIZE, now)
                    yield from self._flow_drop(thread, tuple(doomed_refs))
                    removed += len(victims)
                    by_thread[thread] = [r for r in records if r.info.ref not in doomed_refs]
        total_cap = self.limits.max_total_bytes
        if total_cap is not None:
            everything = [r for records in by_thread.values() for r in records]
            total = sum(r.info.size for r in everything)
            victims = lru_victims(everything, total - total_cap, protected)
            doomed: dict[str, set[str]] = {}
            for victim in victims:
                doomed.setdefault(victim.info.thread, set()).add(victim.info.ref)
            for thread, refs in doomed.items():
                ordered = sorted(refs)
                yield from put_tombstones(self.namespace_of(thread), ordered, REMOVED_BY_SIZE, now)
                yield from self._flow_drop(thread, tuple(ordered))
                by_thread[thread] = [r for r in by_thread[thread] if r.info.ref not in refs]
            removed += len(victims)
        sizes = {t: sum(r.info.size for r in records) for t, records in by_thread.items()}
        shared = self._shared
        with shared.lock:
            shared.thread_bytes = sizes
            shared.total_bytes = sum(sizes.values())
        return removed

    # -- state shared by the adapters of one store ---------------------------------------------

    def _auto_prune_due(self, now: float) -> bool:
        """True (and the next run scheduled) when `put` should apply retention at `now`.

        The schedule is shared by every adapter over the same store and namespace in this
        process, so adapters made per call (e.g. from ``runtime.store`` in a node) stay cheap.
        """
        shared = self._shared
        with shared.lock:
            if not now >= shared.next_auto_prune:  # (a NaN clock never prunes)
                return False
            shared.next_auto_prune = now + AUTO_PRUNE_INTERVAL_SECONDS
            return True

    def _add_bytes(self, thread: str, delta: int) -> None:
        shared = self._shared
        with shared.lock:
            if thread in shared.thread_bytes:
                shared.thread_bytes[thread] = max(shared.thread_bytes[thread] + delta, 0)
            if shared.total_bytes is not None:
                shared.total_bytes = max(shared.total_bytes + delta, 0)

    def _set_thread_bytes(self, thread: str, used: int) -> None:
        shared = self._shared
        with shared.lock:
            shared.thread_bytes[thread] = used

    def _next_seq(self) -> int:
        """A tie-breaker for equal clock times: nanoseconds, strictly increasing here."""
        shared = self._shared
        with shared.lock:
            shared.last_seq = max(time.time_ns(), shared.last_seq + 1)
            return shared.last_seq

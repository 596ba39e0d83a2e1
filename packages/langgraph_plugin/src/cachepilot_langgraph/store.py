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
import json
import logging
import string
import threading
import time
import weakref
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias, TypeVar, cast
from urllib.parse import unquote

from langgraph.store.base import BaseStore, Item, PutOp

from cachepilot.artifacts.base import (
    AUTO_PRUNE_INTERVAL_SECONDS,
    DEFAULT_MAX_BYTES_PER_THREAD,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_RETENTION_SECONDS,
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
    load_meta,
    now_from,
)
from cachepilot.refs import content_digest, is_ref

__all__ = [
    "DEFAULT_ARTIFACT_NAMESPACE",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "INLINE_FORMAT",
    "PAYLOAD_FORMAT",
    "VALUE_FORMAT",
    "LangGraphArtifactStore",
    "thread_label",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_ARTIFACT_NAMESPACE: tuple[str, ...] = ("cachepilot", "artifacts")
"""Namespace prefix of the artifacts in the `BaseStore` (the thread label is appended)."""
DEFAULT_MAX_PAYLOAD_BYTES: int = 128 * 1024 * 1024
"""Largest payload one item holds (128 MiB: about 171 MiB of base64, under PostgreSQL's
``jsonb`` limit)."""
VALUE_FORMAT = "cachepilot.artifact/2"
"""The ``format`` field of every artifact's metadata item (its payload is a separate item)."""
INLINE_FORMAT = "cachepilot.artifact/1"
"""The first layout: metadata and payload (``data_b64``) in one item; still read."""
PAYLOAD_FORMAT = "cachepilot.payload/1"
"""The ``format`` field of a payload item."""

TOMBSTONE_FORMAT = "cachepilot.removed/1"
"""The ``format`` field of the item that says why an artifact is gone."""
_TOMBSTONE_PREFIX = "removed-"

_SAFE_LABEL_CHARS = frozenset(string.ascii_letters + string.digits + "-_")
_DEFAULT_PAGE_SIZE = 100


def thread_label(thread: str) -> str:
    """The namespace label of a thread: UTF-8 percent-encoding of all but ``[A-Za-z0-9_-]``.

    Raises:
        ValueError: for an empty or non-UTF-8-encodable thread id.
    """
    check_thread(thread)
    return "".join(
        char if char in _SAFE_LABEL_CHARS else "".join(f"%{b:02X}" for b in char.encode("utf-8"))
        for char in thread
    )


def _thread_from_label(label: str) -> str | None:
    """The thread id of a label made by `thread_label`, or None for a label it cannot make."""
    try:
        thread = unquote(label, errors="strict")
    except UnicodeDecodeError:
        return None
    if not thread or thread_label(thread) != label:
        return None
    return thread


# --- storage operations ------------------------------------------------------------------------
# The logic of every method is written once, as a generator that yields these operations and
# receives their results; `_run` executes them with the store's sync methods and `_arun` with its
# native async ones, so the async twins never block the event loop nor use worker threads.


@dataclass(frozen=True, slots=True)
class _Get:
    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True, slots=True)
class _Put:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _PutMany:
    namespace: tuple[str, ...]
    items: tuple[tuple[str, dict[str, Any]], ...]


@dataclass(frozen=True, slots=True)
class _Delete:
    namespace: tuple[str, ...]
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Search:
    namespace: tuple[str, ...]
    offset: int
    limit: int


@dataclass(frozen=True, slots=True)
class _ListNamespaces:
    prefix: tuple[str, ...]
    offset: int
    limit: int


_Op: TypeAlias = _Get | _Put | _PutMany | _Delete | _Search | _ListNamespaces
_Flow: TypeAlias = Generator[_Op, Any, _T]


def _get(namespace: tuple[str, ...], key: str) -> _Flow[Item | None]:
    result = yield _Get(namespace, key)
    return cast("Item | None", result)


def _tombstones(
    namespace: tuple[str, ...], refs: Sequence[str], reason: str, now: float
) -> _Flow[None]:
    """Remember why `refs` are gone (one batch)."""
    if refs:
        value = {"format": TOMBSTONE_FORMAT, "reason": reason, "at": now}
        yield _PutMany(namespace, tuple((_TOMBSTONE_PREFIX + ref, value) for ref in refs))


@dataclass(frozen=True, slots=True)
class _Record:
    """A parsed artifact value (without its payload)."""

    info: ArtifactInfo
    seq: int

    def lru_key(self) -> tuple[float, float, int]:
        return (self.info.last_access, self.info.created_at, self.seq)

    def age_key(self) -> tuple[float, int]:
        return (self.info.created_at, self.seq)


def _parse(value: object, thread: str, ref: str) -> _Record | None:
    """The record of an artifact value, or None when it is not one of ours."""
    if not isinstance(value, Mapping) or value.get("format") not in (VALUE_FORMAT, INLINE_FORMAT):
        return None
    try:
        flags = (value["is_text"], value["media_type"], value["meta_json"], value["sha256"])
        if not isinstance(flags[0], bool) or not all(isinstance(f, str) for f in flags[1:]):
            return None
        if value["format"] == INLINE_FORMAT and not isinstance(value["data_b64"], str):
            return None
        info = ArtifactInfo(
            ref=ref,
            thread=thread,
            is_text=flags[0],
            media_type=flags[1],
            meta=load_meta(flags[2]),
            created_at=float(value["created_at"]),
            last_access=float(value["last_access"]),
            access_count=int(value["access_count"]),
            size=int(value["size"]),
            sha256=flags[3],
        )
        return _Record(info, int(value.get("seq", 0)))
    except (KeyError, TypeError, ValueError):
        return None


def _ascii_meta(meta_json: str) -> str:
    """`meta_json` re-escaped to ASCII (no NUL, no lone surrogate reaches the backend)."""
    return json.dumps(
        json.loads(meta_json), sort_keys=True, ensure_ascii=True, separators=(",", ":")
    )


def _check_media_type(media_type: str) -> str:
    if not media_type.isascii() or not media_type.isprintable():
        raise ValueError(f"media_type must be printable ASCII, got {media_type!r}")
    return media_type


def _check_namespace(namespace: object) -> tuple[str, ...]:
    if isinstance(namespace, str) or not isinstance(namespace, Sequence) or not namespace:
        raise ValueError(f"namespace must be a non-empty tuple of str labels, got {namespace!r}")
    labels = tuple(namespace)
    for label in labels:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise ValueError(
                f"namespace labels must be non-empty str without '.' or NUL, got {label!r}"
            )
    if labels[0] == "langgraph":
        raise ValueError("namespace must not start with 'langgraph' (reserved by LangGraph)")
    return labels


def _check_positive_int(name: str, value: object, *, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        kind = "a positive int or None" if allow_none else "a positive int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


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
        page_size: int = _DEFAULT_PAGE_SIZE,
    ) -> None:
        if not isinstance(store, BaseStore):
            raise ValueError(
                f"store must be a langgraph.store.base.BaseStore, got {type(store).__name__}"
            )
        self._init_store(retention_seconds, max_bytes_per_thread, max_total_bytes, clock)
        self.store = store
        self.namespace = _check_namespace(namespace)
        self.max_payload_bytes = _check_positive_int(
            "max_payload_bytes", max_payload_bytes, allow_none=True
        )
        self.page_size = cast(int, _check_positive_int("page_size", page_size, allow_none=False))
        self._auto_prune = bool(auto_prune)
        self._shared = _shared_state(store, self.namespace)

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

    async def aprune(self, now: float | None = None) -> int:
        """Async `prune`."""
        flow = self._flow_sweep(now_from(self._clock, now), None, retention=True)
        removed = await self._arun(flow)
        if removed:
            logger.info("pruned %d artifacts from %r", removed, self.namespace)
        return removed

    # -- drivers ----------------------------------------------------------------------------

    def _run(self, flow: _Flow[_T]) -> _T:
        try:
            result: Any = None
            while True:
                try:
                    op = flow.send(result)
                except StopIteration as stop:
                    return cast(_T, stop.value)
                result = self._execute(op)
        finally:
            flow.close()

    async def _arun(self, flow: _Flow[_T]) -> _T:
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

    def _execute(self, op: _Op) -> object:
        store = self.store
        if isinstance(op, _Get):
            return store.get(op.namespace, op.key, refresh_ttl=False)
        if isinstance(op, _Put):
            store.put(op.namespace, op.key, op.value, index=False, ttl=None)
            return None
        if isinstance(op, _PutMany):
            store.batch([PutOp(op.namespace, k, v, index=False, ttl=None) for k, v in op.items])
            return None
        if isinstance(op, _Delete):
            if len(op.keys) == 1:
                store.delete(op.namespace, op.keys[0])
            elif op.keys:
                store.batch([PutOp(op.namespace, key, None) for key in op.keys])
            return None
        if isinstance(op, _Search):
            return store.search(op.namespace, limit=op.limit, offset=op.offset, refresh_ttl=False)
        return store.list_namespaces(prefix=op.prefix, limit=op.limit, offset=op.offset)

    async def _aexecute(self, op: _Op) -> object:
        if not self._shared.sync_only:
            try:
                return await self._anative(op)
            except NotImplementedError:
                # A sync-only store (`SqliteStore`, `PostgresStore`) refuses the async API
                # before doing anything, so the same operation is retried on its sync API.
                logger.debug(
                    "%s has no async API; using its sync API in a worker thread",
                    type(self.store).__name__,
                )
                self._shared.sync_only = True
        return await asyncio.to_thread(self._execute, op)

    async def _anative(self, op: _Op) -> object:
        store = self.store
        if isinstance(op, _Get):
            return await store.aget(op.namespace, op.key, refresh_ttl=False)
        if isinstance(op, _Put):
            await store.aput(op.namespace, op.key, op.value, index=False, ttl=None)
            return None
        if isinstance(op, _PutMany):
            await store.abatch(
                [PutOp(op.namespace, k, v, index=False, ttl=None) for k, v in op.items]
            )
            return None
        if isinstance(op, _Delete):
            if len(op.keys) == 1:
                await store.adelete(op.namespace, op.keys[0])
            elif op.keys:
                await store.abatch([PutOp(op.namespace, key, None) for key in op.keys])
            return None
        if isinstance(op, _Search):
            return await store.asearch(
                op.namespace, limit=op.limit, offset=op.offset, refresh_ttl=False
            )
        return await store.alist_namespaces(prefix=op.prefix, limit=op.limit, offset=op.offset)

    # -- flows --------------------------------------------------------------------------------

    def _flow_insert(self, thread: str, enc: Encoded, now: float) -> _Flow[int | None]:
        size = len(enc.data)
        if self.max_payload_bytes is not None and size > self.max_payload_bytes:
            raise ValueError(
                f"payload of {size} bytes exceeds max_payload_bytes={self.max_payload_bytes} "
                "of this LangGraph store adapter"
            )
        media_type = _check_media_type(enc.media_type)
        evicted = 0
        if self._auto_prune and self._auto_prune_due(now):
            evicted += yield from self._flow_sweep(now, None, retention=True)
        namespace = self.namespace_of(thread)
        item = yield from _get(namespace, enc.ref)
        if item is not None:
            record = _parse(item.value, thread, enc.ref)
            if record is not None:
                check_same_content(enc, record.info.sha256)
                if now > record.info.last_access:
                    yield _Put(namespace, enc.ref, {**item.value, "last_access": now})
                return None
            logger.warning("replacing an unreadable item at artifact ref %s", enc.ref)
        value = {
            "format": VALUE_FORMAT,
            "ref": enc.ref,
            "sha256": enc.sha256,
            "size": size,
            "is_text": enc.is_text,
            "media_type": media_type,
            "meta_json": _ascii_meta(enc.meta_json),
            "created_at": now,
            "last_access": now,
            "access_count": 0,
            "seq": self._next_seq(),
        }
        payload = {"format": PAYLOAD_FORMAT, "data_b64": base64.b64encode(enc.data).decode("ascii")}
        # The payload first: metadata never names a payload that is not there.
        yield _Put(self.payload_namespace_of(thread), enc.ref, payload)
        yield _Put(namespace, enc.ref, value)
        self._add_bytes(thread, size)
        evicted += yield from self._flow_enforce_caps(thread, enc.ref, now)
        return evicted

    def _flow_fetch(self, thread: str, ref: str) -> _Flow[Artifact | None]:
        item = yield from _get(self.namespace_of(thread), ref)
        if item is None:
            return None
        record = _parse(item.value, thread, ref)
        if record is None:
            logger.warning("item at artifact ref %s is not a cachepilot artifact", ref)
            return None
        encoded = item.value.get("data_b64")
        if item.value.get("format") == VALUE_FORMAT:
            payload = yield from _get(self.payload_namespace_of(thread), ref)
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

    def _flow_removed(self, thread: str, ref: str) -> _Flow[str | None]:
        item = yield from _get(self.namespace_of(thread), _TOMBSTONE_PREFIX + ref)
        value = None if item is None else item.value
        if isinstance(value, Mapping) and value.get("format") == TOMBSTONE_FORMAT:
            reason = value.get("reason")
            return reason if isinstance(reason, str) else None
        return None

    def _flow_count_access(self, thread: str, ref: str, now: float) -> _Flow[bool]:
        namespace = self.namespace_of(thread)
        item = yield from _get(namespace, ref)
        record = None if item is None else _parse(item.value, thread, ref)
        if item is None or record is None:
            return False
        value = {
            **item.value,
            "access_count": record.info.access_count + 1,
            "last_access": max(record.info.last_access, now),
        }
        yield _Put(namespace, ref, value)
        return True

    def _flow_list(self, thread: str) -> _Flow[builtins.list[ArtifactInfo]]:
        entries = yield from self._flow_items(self.namespace_of(thread), thread)
        records = sorted(
            (record for _key, record in entries if record is not None), key=_Record.age_key
        )
        self._set_thread_bytes(thread, sum(record.info.size for record in records))
        return [record.info for record in records]

    def _flow_delete_one(self, thread: str, ref: str) -> _Flow[bool]:
        namespace = self.namespace_of(thread)
        item = yield from _get(namespace, ref)
        if item is None:
            return False
        yield from self._flow_drop(thread, (ref,))
        record = _parse(item.value, thread, ref)
        if record is not None:
            self._add_bytes(thread, -record.info.size)
        return True

    def _flow_drop(self, thread: str, refs: tuple[str, ...]) -> _Flow[None]:
        """Delete artifacts: their metadata items, then their payload items."""
        yield _Delete(self.namespace_of(thread), refs)
        yield _Delete(self.payload_namespace_of(thread), refs)

    def _flow_delete_all(self, thread: str) -> _Flow[int]:
        namespace = self.namespace_of(thread)
        tombstones: builtins.list[tuple[str, float]] = []
        entries = yield from self._flow_items(namespace, thread, tombstones)
        if entries:
            yield from self._flow_drop(thread, tuple(key for key, _record in entries))
        if tombstones:
            yield _Delete(namespace, tuple(key for key, _at in tombstones))
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
    ) -> _Flow[builtins.list[tuple[str, _Record | None]]]:
        """Every ref-keyed item of one namespace, parsed, read page by page (and, into
        `tombstones` when given, the key and time of every tombstone)."""
        seen: set[str] = set()
        entries: builtins.list[tuple[str, _Record | None]] = []
        offset = 0
        while True:
            page = cast("builtins.list[Item]", (yield _Search(namespace, offset, self.page_size)))
            fresh = 0
            for item in page:
                # A search covers deeper namespaces too: only this thread's own items count.
                if tuple(item.namespace) != namespace:
                    continue
                if not is_ref(item.key):
                    if tombstones is not None and item.key.startswith(_TOMBSTONE_PREFIX):
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
                entries.append((item.key, _parse(item.value, thread, item.key)))
            # A short page ends the listing; so does a page with nothing new (a store that
            # ignores offsets would otherwise loop forever).
            if len(page) < self.page_size or (fresh == 0 and page):
                return entries
            offset += len(page)

    def _flow_namespaces(self) -> _Flow[builtins.list[tuple[tuple[str, ...], str]]]:
        """(namespace, thread) of every thread holding items under this adapter's prefix."""
        found: dict[tuple[str, ...], str] = {}
        depth = len(self.namespace) + 1
        offset = 0
        while True:
            page = cast(
                "builtins.list[tuple[str, ...]]",
                (yield _ListNamespaces(self.namespace, offset, self.page_size)),
            )
            fresh = 0
            for namespace in map(tuple, page):
                if len(namespace) != depth or namespace[: depth - 1] != self.namespace:
                    continue
                thread = _thread_from_label(namespace[-1])
                if thread is None or namespace in found:
                    continue
                found[namespace] = thread
                fresh += 1
            if len(page) < self.page_size or (fresh == 0 and page):
                return list(found.items())
            offset += len(page)

    def _flow_enforce_caps(self, thread: str, keep: str, now: float) -> _Flow[int]:
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
                victims = _lru_victims(records, used - cap, {(thread, keep)})
                if victims:
                    gone = [v.info.ref for v in victims]
                    yield from _tombstones(namespace, gone, REMOVED_BY_SIZE, now)
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
    ) -> _Flow[int]:
        """Scan the whole namespace: retention (when asked), then both caps; resets the tallies."""
        protected = set() if keep is None else {keep}
        removed = 0
        by_thread: dict[str, builtins.list[_Record]] = {}
        seconds = self.limits.retention_seconds if retention else None
        # All namespaces are listed before anything is deleted: deleting shifts the pages.
        forget = now - max(seconds or 0.0, TOMBSTONE_SECONDS)
        for namespace, thread in (yield from self._flow_namespaces()):
            tombstones: builtins.list[tuple[str, float]] = []
            entries = yield from self._flow_items(namespace, thread, tombstones)
            records = [record for _key, record in entries if record is not None]
            stale = tuple(key for key, at in tombstones if at < forget)
            if stale and retention:
                yield _Delete(namespace, stale)
            if seconds is not None:
                cutoff = now - seconds
                expired = [
                    r
                    for r in records
                    if r.info.last_access < cutoff and (thread, r.info.ref) not in protected
                ]
                if expired:
                    gone = {r.info.ref for r in expired}
                    yield from _tombstones(namespace, sorted(gone), REMOVED_BY_RETENTION, now)
                    yield from self._flow_drop(thread, tuple(r.info.ref for r in expired))
                    removed += len(expired)
                    records = [r for r in records if r.info.ref not in gone]
            by_thread[thread] = records
        cap = self.limits.max_bytes_per_thread
        if cap is not None:
            for thread, records in by_thread.items():
                used = sum(r.info.size for r in records)
                victims = _lru_victims(records, used - cap, protected)
                if victims:
                    doomed_refs = [v.info.ref for v in victims]
                    namespace = self.namespace_of(thread)
                    yield from _tombstones(namespace, doomed_refs, REMOVED_BY_SIZE, now)
                    yield from self._flow_drop(thread, tuple(doomed_refs))
                    removed += len(victims)
                    by_thread[thread] = [r for r in records if r.info.ref not in doomed_refs]
        total_cap = self.limits.max_total_bytes
        if total_cap is not None:
            everything = [r for records in by_thread.values() for r in records]
            total = sum(r.info.size for r in everything)
            victims = _lru_victims(everything, total - total_cap, protected)
            doomed: dict[str, set[str]] = {}
            for victim in victims:
                doomed.setdefault(victim.info.thread, set()).add(victim.info.ref)
            for thread, refs in doomed.items():
                ordered = sorted(refs)
                yield from _tombstones(self.namespace_of(thread), ordered, REMOVED_BY_SIZE, now)
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


@dataclass(slots=True)
class _Shared:
    """What the adapters over one store and namespace share in this process."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    thread_bytes: dict[str, int] = field(default_factory=dict)
    """Running byte totals per thread (absent: not known yet), reset by every full scan."""
    total_bytes: int | None = None
    """Running byte total of the namespace (None: not known yet)."""
    next_auto_prune: float = 0.0
    last_seq: int = 0
    sync_only: bool = False
    """The store refused its async API (`NotImplementedError`): async twins use worker threads."""


_SHARED: weakref.WeakKeyDictionary[BaseStore, dict[tuple[str, ...], _Shared]] = (
    weakref.WeakKeyDictionary()
)
_SHARED_LOCK = threading.Lock()


def _shared_state(store: BaseStore, namespace: tuple[str, ...]) -> _Shared:
    """The shared state of `store` + `namespace` (a private one when the store is unhashable)."""
    try:
        with _SHARED_LOCK:
            return _SHARED.setdefault(store, {}).setdefault(namespace, _Shared())
    except TypeError:
        return _Shared()


def _lru_victims(
    records: builtins.list[_Record], excess: int, protected: set[tuple[str, str]]
) -> builtins.list[_Record]:
    """Least-recently-accessed records whose removal brings the size down by `excess`."""
    victims: builtins.list[_Record] = []
    if excess <= 0:
        return victims
    for record in sorted(records, key=_Record.lru_key):
        if excess <= 0:
            break
        if (record.info.thread, record.info.ref) in protected:
            continue
        victims.append(record)
        excess -= record.info.size
    return victims

"""Storage operations of `LangGraphArtifactStore`: the adapter's logic is written once, as
generators (`Flow`) that yield these operations and receive their results; `execute` runs
one with the store's sync API and `anative` with its native async one, so the async twins
never block the event loop. Also the state the adapters over one store share in a process."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar, cast

from langgraph.store.base import BaseStore, Item, PutOp

from cachepilot_langgraph.store_layout import TOMBSTONE_FORMAT, TOMBSTONE_PREFIX

__all__ = [
    "Delete",
    "Flow",
    "Get",
    "ListNamespaces",
    "Op",
    "Put",
    "PutMany",
    "Search",
    "SharedState",
    "anative",
    "execute",
    "get_item",
    "put_tombstones",
    "shared_state",
]


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Get:
    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True, slots=True)
class Put:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PutMany:
    namespace: tuple[str, ...]
    items: tuple[tuple[str, dict[str, Any]], ...]


@dataclass(frozen=True, slots=True)
class Delete:
    namespace: tuple[str, ...]
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Search:
    namespace: tuple[str, ...]
    offset: int
    limit: int


@dataclass(frozen=True, slots=True)
class ListNamespaces:
    prefix: tuple[str, ...]
    offset: int
    limit: int


Op: TypeAlias = Get | Put | PutMany | Delete | Search | ListNamespaces

Flow: TypeAlias = Generator[Op, Any, T]


def get_item(namespace: tuple[str, ...], key: str) -> Flow[Item | None]:
    result = yield Get(namespace, key)
    return cast("Item | None", result)


def put_tombstones(
    namespace: tuple[str, ...], refs: Sequence[str], reason: str, now: float
) -> Flow[None]:
    """Remember why `refs` are gone (one batch)."""
    if refs:
        value = {"format": TOMBSTONE_FORMAT, "reason": reason, "at": now}
        yield PutMany(namespace, tuple((TOMBSTONE_PREFIX + ref, value) for ref in refs))


@dataclass(slots=True)
class SharedState:
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


_SHARED: weakref.WeakKeyDictionary[BaseStore, dict[tuple[str, ...], SharedState]] = (
    weakref.WeakKeyDictionary()
)


_SHARED_LOCK = threading.Lock()


def shared_state(store: BaseStore, namespace: tuple[str, ...]) -> SharedState:
    """The shared state of `store` + `namespace` (a private one when the store is unhashable)."""
    try:
        with _SHARED_LOCK:
            return _SHARED.setdefault(store, {}).setdefault(namespace, SharedState())
    except TypeError:
        return SharedState()


def execute(store: BaseStore, op: Op) -> object:
    """Run one operation with the store's sync API."""
    if isinstance(op, Get):
        return store.get(op.namespace, op.key, refresh_ttl=False)
    if isinstance(op, Put):
        store.put(op.namespace, op.key, op.value, index=False, ttl=None)
        return None
    if isinstance(op, PutMany):
        store.batch([PutOp(op.namespace, k, v, index=False, ttl=None) for k, v in op.items])
        return None
    if isinstance(op, Delete):
        if len(op.keys) == 1:
            store.delete(op.namespace, op.keys[0])
        elif op.keys:
            store.batch([PutOp(op.namespace, key, None) for key in op.keys])
        return None
    if isinstance(op, Search):
        return store.search(op.namespace, limit=op.limit, offset=op.offset, refresh_ttl=False)
    return store.list_namespaces(prefix=op.prefix, limit=op.limit, offset=op.offset)


async def anative(store: BaseStore, op: Op) -> object:
    """Run one operation with the store's native async API (`NotImplementedError` when it
    has none)."""
    if isinstance(op, Get):
        return await store.aget(op.namespace, op.key, refresh_ttl=False)
    if isinstance(op, Put):
        await store.aput(op.namespace, op.key, op.value, index=False, ttl=None)
        return None
    if isinstance(op, PutMany):
        await store.abatch([PutOp(op.namespace, k, v, index=False, ttl=None) for k, v in op.items])
        return None
    if isinstance(op, Delete):
        if len(op.keys) == 1:
            await store.adelete(op.namespace, op.keys[0])
        elif op.keys:
            await store.abatch([PutOp(op.namespace, key, None) for key in op.keys])
        return None
    if isinstance(op, Search):
        return await store.asearch(
            op.namespace, limit=op.limit, offset=op.offset, refresh_ttl=False
        )
    return await store.alist_namespaces(prefix=op.prefix, limit=op.limit, offset=op.offset)

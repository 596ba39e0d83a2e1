"""In-process artifact store (thread-safe; lost when the process exits)."""

from __future__ import annotations

import builtins
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from cachepilot.artifacts.base import (
    DEFAULT_MAX_BYTES_PER_THREAD,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_RETENTION_SECONDS,
    FORGOTTEN_MARK,
    REMOVED_BY_FORGET,
    REMOVED_BY_RETENTION,
    REMOVED_BY_SIZE,
    Artifact,
    ArtifactInfo,
    BaseArtifactStore,
    Clock,
    Encoded,
    artifact_from,
    check_same_content,
    load_meta,
    now_from,
)

__all__ = ["InMemoryArtifactStore"]

logger = logging.getLogger(__name__)

_MAX_TOMBSTONES_PER_THREAD = 10_000


@dataclass(slots=True)
class _Entry:
    ref: str
    sha256: str
    data: bytes
    is_text: bool
    media_type: str
    meta_json: str
    created_at: float
    last_access: float
    access_count: int
    seq: int

    def lru_key(self) -> tuple[float, float, int]:
        return (self.last_access, self.created_at, self.seq)

    def info(self, thread: str) -> ArtifactInfo:
        return ArtifactInfo(
            ref=self.ref,
            thread=thread,
            is_text=self.is_text,
            media_type=self.media_type,
            meta=load_meta(self.meta_json),
            created_at=self.created_at,
            last_access=self.last_access,
            access_count=self.access_count,
            size=len(self.data),
            sha256=self.sha256,
        )

    def artifact(self, thread: str) -> Artifact:
        return artifact_from(self.info(thread), self.data)


class InMemoryArtifactStore(BaseArtifactStore):
    """Artifacts in a dict, guarded by a lock; same semantics as the SQLite store.

    Args:
        retention_seconds: Remove artifacts not accessed for this long (None: keep).
        max_bytes_per_thread: Per-thread cap; least-recently-accessed evicted first (None: no cap).
        max_total_bytes: Whole-store cap, same eviction order (None: no cap).
        clock: Time source in seconds (inject one in tests).

    Raises:
        ValueError: for a non-positive retention or cap, or a non-callable clock.
    """

    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        *,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        max_bytes_per_thread: int | None = DEFAULT_MAX_BYTES_PER_THREAD,
        max_total_bytes: int | None = DEFAULT_MAX_TOTAL_BYTES,
        clock: Clock = time.time,
    ) -> None:
        self._init_store(retention_seconds, max_bytes_per_thread, max_total_bytes, clock)
        self._lock = threading.RLock()
        self._threads: dict[str, dict[str, _Entry]] = {}
        self._thread_bytes: dict[str, int] = {}
        self._total_bytes = 0
        self._seq = itertools.count()
        self._tombstones: dict[str, OrderedDict[str, str]] = {}

    def __repr__(self) -> str:
        return f"InMemoryArtifactStore(limits={self.limits!r})"

    @property
    def total_bytes(self) -> int:
        """Bytes currently held."""
        with self._lock:
            return self._total_bytes

    def _insert(self, thread: str, enc: Encoded, now: float) -> int | None:
        with self._lock:
            if self._auto_prune_due(now):
                self._prune_locked(now, keep=())
            entries = self._threads.setdefault(thread, {})
            entry = entries.get(enc.ref)
            if entry is not None:
                check_same_content(enc, entry.sha256)
                entry.last_access = max(entry.last_access, now)
                return None
            self._tombstones.get(thread, OrderedDict()).pop(enc.ref, None)
            entries[enc.ref] = _Entry(
                ref=enc.ref,
                sha256=enc.sha256,
                data=enc.data,
                is_text=enc.is_text,
                media_type=enc.media_type,
                meta_json=enc.meta_json,
                created_at=now,
                last_access=now,
                access_count=0,
                seq=next(self._seq),
            )
            self._thread_bytes[thread] = self._thread_bytes.get(thread, 0) + len(enc.data)
            self._total_bytes += len(enc.data)
            return self._enforce_caps_locked(keep=((thread, enc.ref),))

    def _fetch(self, thread: str, ref: str) -> Artifact | None:
        with self._lock:
            entry = self._threads.get(thread, {}).get(ref)
            return None if entry is None else entry.artifact(thread)

    def _count_access(self, thread: str, ref: str, now: float) -> bool:
        with self._lock:
            entry = self._threads.get(thread, {}).get(ref)
            if entry is None:
                return False
            entry.access_count += 1
            entry.last_access = max(entry.last_access, now)
            return True

    def _list_thread(self, thread: str) -> builtins.list[ArtifactInfo]:
        with self._lock:
            entries = sorted(
                self._threads.get(thread, {}).values(), key=lambda e: (e.created_at, e.seq)
            )
            return [entry.info(thread) for entry in entries]

    def _delete_one(self, thread: str, ref: str) -> bool:
        with self._lock:
            return self._remove_locked(thread, ref)

    def _removed_reason(self, thread: str, ref: str) -> str | None:
        with self._lock:
            found = self._tombstones.get(thread, OrderedDict())
            return found.get(ref) or found.get(FORGOTTEN_MARK)

    def _mark_forgotten(self, thread: str) -> None:
        with self._lock:
            self._tombstones[thread] = OrderedDict({FORGOTTEN_MARK: REMOVED_BY_FORGET})

    def _delete_all(self, thread: str) -> int:
        with self._lock:
            self._tombstones.pop(thread, None)
            entries = self._threads.pop(thread, {})
            self._total_bytes -= self._thread_bytes.pop(thread, 0)
            return len(entries)

    def prune(self, now: float | None = None) -> int:
        """Remove artifacts idle longer than the retention, then enforce the caps."""
        current = now_from(self._clock, now)
        with self._lock:
            removed = self._prune_locked(current, keep=())
        if removed:
            logger.info("pruned %d artifacts", removed)
        return removed

    def close(self) -> None:
        """Drop everything held."""
        with self._lock:
            self._threads.clear()
            self._thread_bytes.clear()
            self._tombstones.clear()
            self._total_bytes = 0

    # -- internals (call with the lock held) -------------------------------------------------

    def _remove_locked(self, thread: str, ref: str, reason: str | None = None) -> bool:
        entries = self._threads.get(thread)
        if entries is None or ref not in entries:
            return False
        if reason is not None:  # remembered, so a recall can say why it is gone
            tombstones = self._tombstones.setdefault(thread, OrderedDict())
            tombstones[ref] = reason
            while len(tombstones) > _MAX_TOMBSTONES_PER_THREAD:
                tombstones.popitem(last=False)
        size = len(entries.pop(ref).data)
        self._total_bytes -= size
        self._thread_bytes[thread] -= size
        if not entries:
            del self._threads[thread]
            del self._thread_bytes[thread]
        return True

    def _prune_locked(self, now: float, keep: Iterable[tuple[str, str]]) -> int:
        removed = 0
        retention = self.limits.retention_seconds
        if retention is not None:
            cutoff = now - retention
            expired = [
                (thread, ref)
                for thread, entries in self._threads.items()
                for ref, entry in entries.items()
                if entry.last_access < cutoff
            ]
            for thread, ref in expired:
                removed += self._remove_locked(thread, ref, REMOVED_BY_RETENTION)
        return removed + self._enforce_caps_locked(keep)

    def _enforce_caps_locked(self, keep: Iterable[tuple[str, str]]) -> int:
        protected = set(keep)
        removed = 0
        cap = self.limits.max_bytes_per_thread
        if cap is not None:
            for thread in [t for t, size in self._thread_bytes.items() if size > cap]:
                candidates = sorted(
                    (e for e in self._threads[thread].values() if (thread, e.ref) not in protected),
                    key=_Entry.lru_key,
                )
                for entry in candidates:
                    if self._thread_bytes.get(thread, 0) <= cap:
                        break
                    removed += self._remove_locked(thread, entry.ref, REMOVED_BY_SIZE)
        total_cap = self.limits.max_total_bytes
        if total_cap is not None and self._total_bytes > total_cap:
            candidates_all = sorted(
                (
                    (entry.lru_key(), thread, entry.ref)
                    for thread, entries in self._threads.items()
                    for entry in entries.values()
                    if (thread, entry.ref) not in protected
                ),
            )
            for _key, thread, ref in candidates_all:
                if self._total_bytes <= total_cap:
                    break
                removed += self._remove_locked(thread, ref, REMOVED_BY_SIZE)
        if removed:
            logger.debug("evicted %d artifacts to respect size caps", removed)
        return removed

"""A memo keyed by object identity that does not keep its key objects alive.

Messages are immutable, so values derived from one (its hash, its token count, its edited
copy) can be memoised by `id(message)`. A plain dict keyed by `id()` must hold the object to
keep its id from being reused, and so keeps every message it ever saw alive until the entry
bound pushes it out: resident memory then grows with the number of threads served. This memo
holds a weak reference instead; an entry goes when its object is collected (or when the entry
bound is reached, least recently used first).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["IdentityMemo", "still_held"]

K = TypeVar("K")
V = TypeVar("V")


def still_held(refs: Sequence[weakref.ref[K]], items: Sequence[K]) -> bool:
    """True when each object `refs` hold (pairwise, as far as the shorter goes) is still alive
    and is the item beside it, or equal to it (for immutable objects, such as messages, an
    equal object is the same value)."""
    for ref, item in zip(refs, items, strict=False):
        kept = ref()
        if kept is None or (kept is not item and kept != item):
            return False
    return True


class _Ref(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that knows the memo key of its entry."""

    __slots__ = ("key",)
    key: Hashable


class IdentityMemo(Generic[K, V]):
    """Values memoised by the identity of a (weak-referenceable) key object.

    An entry is keyed by `id(obj)` plus optional extra hashable parts, holds a weak reference
    to `obj` and the value. A hit requires the referenced object to be the very object asked
    about, so a reused id never answers for another object. Thread-safe.

    The weakref callback only appends to a deque (atomic, no lock): the garbage collector may
    run it at any point, also while this memo's lock is held by the same thread. Dead entries
    are removed under the lock on the next access.
    """

    def __init__(self, max_entries: int) -> None:
        """Create an empty memo holding at most `max_entries` entries.

        Raises:
            ValueError: when `max_entries` is below 1.
        """
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[_Ref, V]] = OrderedDict()
        self._dead: deque[_Ref] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._drain()
            return len(self._entries)

    def get(self, obj: K, *extra: Hashable) -> V | None:
        """The value memoised for `obj` (and `extra`), or None."""
        key = (id(obj), *extra) if extra else id(obj)
        with self._lock:
            if self._dead:
                self._drain()
            hit = self._entries.get(key)
            if hit is None or hit[0]() is not obj:
                return None
            self._entries.move_to_end(key)
            return hit[1]

    def put(self, obj: K, value: V, *extra: Hashable) -> V:
        """Memoise `value` for `obj` (replacing what was memoised for it); returns `value`."""
        key = (id(obj), *extra) if extra else id(obj)
        with self._lock:
            if self._dead:
                self._drain()
            ref = _Ref(obj, self._dead.append)
            ref.key = key
            self._entries[key] = (ref, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self._dead.clear()

    def _drain(self) -> None:
        # Under the lock. An entry is removed only when it still holds the dead reference:
        # the id may already belong to a new object with an entry of its own.
        while self._dead:
            ref = self._dead.popleft()
            entry = self._entries.get(ref.key)
            if entry is not None and entry[0] is ref:
                del self._entries[ref.key]

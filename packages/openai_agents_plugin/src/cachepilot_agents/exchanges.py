"""Recall exchanges: the `recall` calls a model made, kept in its view but never in the run.

The model wrapper answers `recall` itself, so the SDK's items, hooks and sessions never see it.
The model did see the exchange (its call and the recalled text) and acted on it, so every later
call of the thread shows it again at the same place: right after the item that ended the input
of the call that made it (its *anchor*). The view then extends the previous request byte for
byte, as between any two calls with no maintenance point between them.

An anchor is the position and digest of a plain input item. The history only grows between
calls, so the item is normally at the same position; when it moved (a session read with a
limit, a filter that drops items) it is looked up by digest, and when it is gone the exchange
is simply not shown (it is context, never required for pairing).

Exchanges of threads with persistence are archived (`kind="recall-exchange"`), so a new process
shows the same bytes; scopes that end with their run keep them in memory only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["EXCHANGE_KIND", "Anchor", "Exchange", "ExchangeBook", "anchor_of", "item_digest"]

logger = logging.getLogger(__name__)

EXCHANGE_KIND = "recall-exchange"
"""`meta["kind"]` of an archived recall exchange."""

_MAX_PER_THREAD = 512


def item_digest(item: object) -> str:
    """A digest of one input item (canonical JSON)."""
    try:
        blob = json.dumps(item, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        blob = repr(item)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where an exchange goes: after the plain input item at `index` with digest `digest`."""

    index: int
    digest: str


def anchor_of(items: Sequence[Any]) -> Anchor | None:
    """The anchor of a call whose plain input is `items` (None for an empty input)."""
    if not items:
        return None
    return Anchor(len(items) - 1, item_digest(items[-1]))


@dataclass(frozen=True, slots=True)
class Exchange:
    """Input items a model call added to its own input (recall calls and their answers)."""

    anchor: Anchor
    items: tuple[Any, ...]
    seq: int

    def to_json(self) -> str:
        """Serialized form (archived)."""
        return json.dumps(
            {
                "index": self.anchor.index,
                "digest": self.anchor.digest,
                "seq": self.seq,
                "items": list(self.items),
            },
            ensure_ascii=False,
            default=str,
        )

    @classmethod
    def from_json(cls, text: str) -> Exchange | None:
        """Parse an archived exchange (None when it is not one)."""
        try:
            data = json.loads(text)
            return cls(
                Anchor(int(data["index"]), str(data["digest"])),
                tuple(i for i in data["items"] if isinstance(i, Mapping)),
                int(data["seq"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


class ExchangeBook:
    """The recall exchanges of every thread, in memory (bounded per thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, list[Exchange]] = {}

    def add(self, thread: str, anchor: Anchor, items: Sequence[Any]) -> Exchange:
        """Record an exchange; returns it (the caller archives it when the thread persists)."""
        with self._lock:
            known = self._threads.setdefault(thread, [])
            exchange = Exchange(anchor, tuple(items), (known[-1].seq + 1) if known else 0)
            known.append(exchange)
            if len(known) > _MAX_PER_THREAD:
                del known[0]  # the oldest stops showing: one prefix break, bounded memory
            return exchange

    def load(self, thread: str, exchanges: Sequence[Exchange]) -> None:
        """Install archived exchanges of `thread` (a new process), merged by sequence number."""
        with self._lock:
            known = {e.seq: e for e in self._threads.get(thread, [])}
            for exchange in exchanges:
                known.setdefault(exchange.seq, exchange)
            self._threads[thread] = [known[k] for k in sorted(known)][-_MAX_PER_THREAD:]

    def forget(self, thread: str) -> None:
        """Drop `thread`."""
        with self._lock:
            self._threads.pop(thread, None)

    def count(self, thread: str) -> int:
        """How many exchanges `thread` has."""
        with self._lock:
            return len(self._threads.get(thread, ()))

    def splice(self, thread: str, items: Sequence[Any]) -> list[Any]:
        """`items` (a plain input) with the thread's exchanges inserted after their anchors."""
        with self._lock:
            exchanges = list(self._threads.get(thread, ()))
        if not exchanges or not items:
            return list(items)
        inserts: dict[int, list[Any]] = {}
        digests: dict[int, str] = {}
        lookup: dict[str, int] | None = None

        def digest_at(index: int) -> str:
            found = digests.get(index)
            if found is None:
                found = digests[index] = item_digest(items[index])
            return found

        for exchange in exchanges:
            anchor = exchange.anchor
            at: int | None = None
            if 0 <= anchor.index < len(items) and digest_at(anchor.index) == anchor.digest:
                at = anchor.index
            else:
                if lookup is None:  # the history moved: index every item once
                    lookup = {}
                    for index in range(len(items)):
                        lookup.setdefault(digest_at(index), index)
                at = lookup.get(anchor.digest)
            if at is not None:
                inserts.setdefault(at, []).extend(exchange.items)
        if not inserts:
            return list(items)
        out: list[Any] = []
        for index, item in enumerate(items):
            out.append(item)
            extra = inserts.get(index)
            if extra:
                out.extend(extra)
        return out

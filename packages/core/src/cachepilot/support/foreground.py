"""Requests first: background work that steps aside while a request is being prepared.

A thread's precomputation (`CachePilot.precompute_soon`) runs on a worker thread of the
process that serves the requests. In CPython the two take turns on one interpreter lock, and
a thread that gave it up (every store write, every socket read, every hop to a worker
thread) waits up to the switch interval (5 ms) to get it back while the other computes. A
request prepared while a precomputation runs thus waits on it, several times over, although
the precomputation only ever saves later work.

So the request path says when it works (`foreground`, and `waiting` around what it waits
for), and background work stops at its next `yield_to_foreground` until no request is being
prepared: at most `MAX_WAIT_SECONDS` at a time, and in all at most `WAIT_PER_RUN` times as
long as it has run (its pause points are as dense as the messages it reads: with requests
that never stop coming, a limit per pause alone made it wait 50 ms per message, hundreds
of times as long as it computed), so that a process that is never idle still finishes it,
only later; and never while a request waits for its result (`awaiting_background`: the
summary stage of a fold computed ahead). Only threads marked with `background_work` ever
wait; anywhere else `yield_to_foreground` returns at once. Nothing here changes what is
computed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = [
    "MAX_WAIT_SECONDS",
    "WAIT_PER_RUN",
    "awaiting_background",
    "background_work",
    "foreground",
    "in_foreground",
    "requests_in_foreground",
    "waiting",
    "yield_to_foreground",
]

MAX_WAIT_SECONDS = 0.05
"""The longest background work waits at one point for the requests in flight to be done."""

WAIT_PER_RUN = 10.0
"""Background work waits at most this many times as long as it has run (a pause may wait
for what the work ran since its start or its last pause, times this, and what an earlier
pause left unused; at most `MAX_WAIT_SECONDS`): under requests that never stop, it still
gets a share of the time, whatever the number of its pause points."""

_clock = time.monotonic


class _Gate:
    """How many requests are in a foreground stretch now (all threads, all tasks)."""

    def __init__(self) -> None:
        self.active = 0
        self.awaited = 0  # requests waiting for a result background work is computing
        self.condition = threading.Condition()

    def add(self, delta: int) -> None:
        with self.condition:
            self.active += delta
            if self.active == 0:
                self.condition.notify_all()

    def await_background(self, delta: int) -> None:
        with self.condition:
            self.awaited += delta
            if self.awaited > 0:
                self.condition.notify_all()

    def paused(self) -> bool:
        return self.active > 0 and self.awaited == 0


_gate = _Gate()
_held: ContextVar[bool] = ContextVar("cachepilot_foreground", default=False)
_local = threading.local()


@contextmanager
def foreground() -> Iterator[None]:
    """Mark a request's own work (nested uses count once per task or thread: the context
    is per asyncio task and per thread)."""
    if _held.get():
        yield
        return
    token = _held.set(True)
    _gate.add(1)
    try:
        yield
    finally:
        _gate.add(-1)
        _held.reset(token)


@contextmanager
def waiting() -> Iterator[None]:
    """Inside `foreground`: the request waits for something else (the upstream), and
    background work may go on meanwhile. Outside it, nothing."""
    if not _held.get():
        yield
        return
    token = _held.set(False)
    _gate.add(-1)
    try:
        yield
    finally:
        _gate.add(1)
        _held.reset(token)


def in_foreground() -> bool:
    """True in a request's foreground stretch (this task or thread)."""
    return _held.get()


def requests_in_foreground() -> int:
    """How many requests are in a foreground stretch now, in the whole process."""
    return _gate.active


@contextmanager
def background_work() -> Iterator[None]:
    """Mark the current thread's work as the kind that steps aside for requests."""
    previous = (
        getattr(_local, "background", False),
        getattr(_local, "budget", 0.0),
        getattr(_local, "mark", 0.0),
    )
    _local.background = True
    _local.budget = MAX_WAIT_SECONDS  # its first pause may wait the whole limit
    _local.mark = _clock()
    try:
        yield
    finally:
        _local.background, _local.budget, _local.mark = previous


@contextmanager
def awaiting_background() -> Iterator[None]:
    """A request waits for a result background work is computing (a fold's summary stage
    computed ahead): no background work pauses meanwhile, or the request would wait on it."""
    _gate.await_background(1)
    try:
        yield
    finally:
        _gate.await_background(-1)


def yield_to_foreground() -> None:
    """On a `background_work` thread, wait while a request is being prepared (at most
    `MAX_WAIT_SECONDS`, and `WAIT_PER_RUN` times what the work ran since its last pause
    with what that pause left; not while a request awaits background work); anywhere
    else, return at once. Cheap enough for a loop."""
    if not _gate.active or not getattr(_local, "background", False):
        return
    now = _clock()
    budget = min(MAX_WAIT_SECONDS, _local.budget + (now - _local.mark) * WAIT_PER_RUN)
    if budget > 0:
        with _gate.condition:
            _gate.condition.wait_for(lambda: not _gate.paused(), timeout=budget)
        after = _clock()
        budget, now = max(0.0, budget - (after - now)), after
    _local.budget, _local.mark = budget, now

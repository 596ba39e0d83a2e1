"""Folds computed ahead: the costly part of the next maintenance point's fold, computed off
the request path and found again by exact inputs.

A fold reads the request it is part of: where its range ends depends on the protected tail,
and the summary leaves out what the kept tail still shows. The request that brings the next
tool results is not known before it comes, so the fold itself cannot be finished ahead.
What it spends its time on can: the summary of the folded range (the session memory rebuilt
from the range's messages, and the tool output values ranked for the facts in use) depends
on the range alone. So, once a request was prepared, the pilot's background worker runs the
very maintenance code of the next request on a prediction of it (the history so far, and a
copy of its last exchange standing for the one the next request adds, on a scratch copy of
the thread's state, archiving nothing) and the range-only stages it computes are kept in
`SUMMARY_STAGES`, keyed by their exact inputs. When the next request folds the same range,
those stages are found there; anything else (a range predicted wrong, another process, a
restart) computes them as always. The bytes never depend on it: a stage is a pure function
of its key, compared in full, never trusted by a digest.

`ExactMemo` is bounded (entries, least recently used first; messages are held by weak
references, so a kept stage never keeps a message alive), thread-safe (the lock guards the
list of entries only; a stage is computed without it, and a caller that needs a stage being
computed waits for it rather than computing it twice).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cachepilot.artifacts.base import encode_payload
from cachepilot.messages import Message, ToolCall
from cachepilot.support.foreground import awaiting_background
from cachepilot.support.identity_memo import still_held

__all__ = [
    "AHEAD_SUFFIX",
    "SUMMARY_STAGES",
    "AheadNote",
    "AheadNotes",
    "AheadStats",
    "DeferredPuts",
    "ExactMemo",
    "ahead_context",
    "computing_ahead",
    "predicted_next",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

AHEAD_SUFFIX = "~next"
"""Appended to the call ids of the copied exchange of a prediction (ids stay unique)."""

_local = threading.local()


def computing_ahead() -> bool:
    """True on a thread that is computing ahead right now (stages it adds are counted so)."""
    return bool(getattr(_local, "ahead", False))


class _Ahead:
    """Context manager: mark the current thread as computing ahead."""

    def __enter__(self) -> None:
        _local.ahead = True

    def __exit__(self, *exc: object) -> None:
        _local.ahead = False


@dataclass(slots=True)
class AheadStats:
    """What the stages computed ahead did (per process, since it started)."""

    computed: int = 0
    """Stages computed by a precomputation."""
    used: int = 0
    """Of those, found by a request (a maintenance point that did not compute them)."""
    waited: int = 0
    """Times a request waited for a stage still being computed ahead."""


@dataclass(slots=True)
class _Entry(Generic[T]):
    key: Hashable
    refs: tuple[tuple[weakref.ref[Message], ...], ...]
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    ok: bool = False
    ahead: bool = False
    used: bool = False

    def matches(self, key: Hashable, messages: tuple[Sequence[Message], ...]) -> bool:
        if self.key != key or len(self.refs) != len(messages):
            return False
        if any(len(r) != len(m) for r, m in zip(self.refs, messages, strict=True)):
            return False
        # Messages are immutable: an equal message is the same message.
        return all(still_held(r, m) for r, m in zip(self.refs, messages, strict=True))


class ExactMemo(Generic[T]):
    """Results of a pure function kept by their exact inputs (see the module docstring).

    The inputs are a hashable `key` and message sequences, held by weak references: a kept
    result never keeps a message alive (one that is gone matches nothing any more).

    Args:
        max_entries: results kept (least recently used go first).
    """

    def __init__(self, max_entries: int = 32) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._max = max_entries
        self._entries: list[_Entry[T]] = []  # least recently used first
        self._lock = threading.Lock()
        self.stats = AheadStats()

    def get(
        self,
        key: Hashable,
        messages: tuple[Sequence[Message], ...],
        compute: Callable[[], T],
    ) -> T:
        """`compute()`, or the result kept for an equal `key` and equal `messages` (waiting
        for one under way)."""
        ahead = computing_ahead()
        mine: _Entry[T] | None = None
        with self._lock:
            # A few dozen entries, compared by identity first: short under the lock.
            entry = next((e for e in reversed(self._entries) if e.matches(key, messages)), None)
            if entry is None:
                refs = tuple(tuple(weakref.ref(m) for m in seq) for seq in messages)
                mine = _Entry(key, refs, ahead=ahead)
                self._entries.append(mine)
                del self._entries[: -self._max]
            else:
                self._entries.remove(entry)
                self._entries.append(entry)
        if entry is not None:
            if not entry.done.is_set():
                if not ahead and entry.ahead:
                    self.stats.waited += 1
                with awaiting_background():  # the one computing it must not pause for us
                    entry.done.wait()
            if entry.ok:
                if not ahead and entry.ahead and not entry.used:
                    entry.used = True
                    self.stats.used += 1
                return entry.value  # type: ignore[return-value]
            return compute()  # the one computing it failed: the caller meets its own error
        assert mine is not None
        try:
            value = compute()
        except BaseException:
            with self._lock:
                if mine in self._entries:
                    self._entries.remove(mine)
            mine.done.set()
            raise
        mine.value, mine.ok = value, True
        if ahead:
            self.stats.computed += 1
        mine.done.set()
        return value

    def clear(self) -> None:
        """Forget every result (and the counts)."""
        with self._lock:
            self._entries.clear()
            self.stats = AheadStats()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


SUMMARY_STAGES: ExactMemo[Any] = ExactMemo(max_entries=64)
"""The range-only stages of the zero-LLM fold summary (`fold.resume`, `fold.facts_in_use`),
shared by every pilot of the process."""


class DeferredPuts:
    """An archive that only names refs (the ref of a payload is its content digest, whatever
    the store): a prediction's maintenance run archives nothing."""

    def put(
        self,
        thread: str,
        payload: str | bytes,
        *,
        meta: Mapping[str, Any] | None = None,
        media_type: str | None = None,
    ) -> str:
        """The ref `payload` would have."""
        return encode_payload(payload, meta, media_type).ref


def predicted_next(messages: Sequence[Message]) -> list[Message] | None:
    """The next request's history, as well as it can be told now: `messages` and a copy of
    their last exchange (the last assistant message and what follows it; call ids marked
    with `AHEAD_SUFFIX`), standing for the answer and results the next request adds, which
    weigh, in an agent loop, about what the last ones did. None without an assistant message.
    Only where the next fold's range ends depends on the guess: the range's content comes
    from `messages`, and a wrong guess only means stages computed in vain."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None
    )
    if last is None:
        return None
    copies = [_renamed(m) for m in messages[last:]]
    return [*messages, *copies]


def _renamed(message: Message) -> Message:
    calls = tuple(
        ToolCall(id=c.id + AHEAD_SUFFIX, name=c.name, arguments=c.arguments)
        for c in message.tool_calls
    )
    call_id = None if message.tool_call_id is None else message.tool_call_id + AHEAD_SUFFIX
    msg_id = None if message.id is None else message.id + AHEAD_SUFFIX
    return dataclasses.replace(message, tool_calls=calls, tool_call_id=call_id, id=msg_id)


_AHEAD = _Ahead()


def ahead_context() -> _Ahead:
    """The context a precomputation runs in (`computing_ahead` is True inside)."""
    return _AHEAD


@dataclass(frozen=True, slots=True, eq=False)
class AheadNote:
    """A thread's last prepared request, as its maintenance code read it."""

    generation: int
    """Counts the thread's prepared requests (a later one makes this one stale)."""
    system: str | None
    """The canonical system prompt."""
    messages: tuple[Message, ...]
    """The messages as the pilot received them."""
    canonical: tuple[Message, ...]
    """The same, canonical."""
    tools: tuple[Mapping[str, Any], ...]
    """The canonical tools sent."""
    recall: bool
    """The recall tool was offered."""


class AheadNotes:
    """The last prepared request of each thread (the most recently used `max_threads`)."""

    def __init__(self, max_threads: int) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {max_threads}")
        self._max = max_threads
        self._notes: OrderedDict[str, AheadNote] = OrderedDict()
        self._generations: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(
        self,
        thread: str,
        *,
        system: str | None,
        messages: Sequence[Message],
        canonical: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        recall: bool,
    ) -> None:
        """Remember a request just prepared (references only: messages are immutable)."""
        with self._lock:
            generation = self._generations.get(thread, 0) + 1
            self._generations[thread] = generation
            self._notes[thread] = AheadNote(
                generation, system, tuple(messages), tuple(canonical), tuple(tools), recall
            )
            self._notes.move_to_end(thread)
            while len(self._notes) > self._max:
                old, _ = self._notes.popitem(last=False)
                self._generations.pop(old, None)

    def get(self, thread: str) -> AheadNote | None:
        """The thread's last prepared request, if it is remembered."""
        with self._lock:
            return self._notes.get(thread)

    def current(self, thread: str, note: AheadNote) -> bool:
        """True while `note` is the thread's last prepared request (it has not moved on)."""
        with self._lock:
            return self._notes.get(thread) is note

    def drop(self, thread: str) -> None:
        """Forget the thread."""
        with self._lock:
            self._notes.pop(thread, None)
            self._generations.pop(thread, None)

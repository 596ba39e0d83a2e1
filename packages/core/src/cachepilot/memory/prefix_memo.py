"""Session memories of growing transcripts: extended from the memory of an earlier prefix
instead of rebuilt from the first message.

A fold's zero-LLM summary rebuilds the session memory of every source message of its range
(`cachepilot.fold.resume`), and the range of the next fold is the same messages and a few
more: rebuilding costs time in proportion to the whole session at every fold. `of(messages)`
finds the memory kept for the longest earlier prefix of `messages` (the very messages, or
equal ones), copies it and feeds it the rest. The result is the memory
`SessionMemory.from_messages(messages)` makes: ingestion is a fold over the messages in
order, with message keys that appending never changes, and the only step that depends on
when it runs (a cap dropping items) is ruled out: a memory that dropped an item is never
extended, and an extension that drops one is made again from the first message.

Bounded (entries, least recently used first; messages held by weak reference, so a kept
memory never keeps a message alive) and thread-safe (the lock guards the entry list only).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from cachepilot.memory.store import SessionMemory
from cachepilot.messages import Message, message_keys
from cachepilot.support.identity_memo import still_held

__all__ = ["SESSION_MEMORIES", "SessionMemories"]


@dataclass(frozen=True, slots=True, eq=False)  # found by identity: equality compared memories
class _Kept:
    refs: tuple[weakref.ref[Message], ...]
    memory: SessionMemory
    """Never changed once kept (extensions work on a copy)."""

    def prefix_of(self, messages: Sequence[Message]) -> bool:
        return len(self.refs) <= len(messages) and still_held(self.refs, messages)


class SessionMemories:
    """Session memories of transcripts, kept to extend (see the module docstring).

    Args:
        max_entries: memories kept (least recently used go first).
    """

    def __init__(self, max_entries: int = 16) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._max = max_entries
        self._kept: list[_Kept] = []  # least recently used first
        self._lock = threading.Lock()
        self.extended = 0
        """Memories made by extending a kept one (per process, since it started)."""

    def of(self, messages: Sequence[Message]) -> SessionMemory:
        """The session memory of `messages`, equal to `SessionMemory.from_messages(messages)`.
        The caller must not change it (it may be kept and shared)."""
        with self._lock:
            kept = list(self._kept)
        best: _Kept | None = None
        for entry in reversed(kept):
            if (best is None or len(entry.refs) > len(best.refs)) and entry.prefix_of(messages):
                best = entry
        if best is not None and len(best.refs) == len(messages):
            self._use(best)
            return best.memory
        keys = message_keys(messages)
        memory: SessionMemory | None = None
        if best is not None and not best.memory.trimmed:
            grown = best.memory.model_copy(deep=True)
            grown.update(messages[len(best.refs) :], keys[len(best.refs) :])
            if not grown.trimmed:
                memory = grown
                self.extended += 1
        if memory is None:
            memory = SessionMemory()
            memory.update(messages, keys)
        entry = _Kept(tuple(weakref.ref(m) for m in messages), memory)
        with self._lock:
            self._kept.append(entry)
            del self._kept[: -self._max]
        return memory

    def _use(self, entry: _Kept) -> None:
        with self._lock:
            if entry in self._kept:
                self._kept.remove(entry)
                self._kept.append(entry)

    def clear(self) -> None:
        """Forget every kept memory."""
        with self._lock:
            self._kept.clear()


SESSION_MEMORIES = SessionMemories()
"""The memories the zero-LLM fold summary extends, shared by every pilot of the process."""

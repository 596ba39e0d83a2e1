"""Per-thread JSON documents kept between processes: the pilot state of a thread.

One row per thread in a `cachepilot_state` table (`thread`, `state`, `updated_at`), the
layout `cachepilot inspect` reads. The Agents SDK plugin keeps its sessions' states here (and
adds SQLAlchemy and Redis stores); the proxy keeps its threads' states here.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["RESERVED_PREFIX", "TABLE", "MemoryStateStore", "SQLiteStateStore", "StateStore"]

TABLE = "cachepilot_state"
RESERVED_PREFIX = "cachepilot:"
"""Document names starting with this are cachepilot's own (the proxy's secret), not threads."""


@runtime_checkable
class StateStore(Protocol):
    """Persistence of one JSON document per thread."""

    async def load(self, thread: str) -> str | None:
        """The saved state of `thread` (JSON text), or None."""
        ...

    async def save(self, thread: str, state: str) -> None:
        """Replace the saved state of `thread`."""
        ...

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        ...


class MemoryStateStore:
    """States in process memory (tests, in-memory sessions)."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    async def load(self, thread: str) -> str | None:
        """The saved state, or None."""
        return self._data.get(thread)

    async def save(self, thread: str, state: str) -> None:
        """Keep `state`."""
        self._data[thread] = state

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        self._data.pop(thread, None)


class SQLiteStateStore:
    """A `cachepilot_state` table in an SQLite file (WAL; safe across threads and processes).

    Args:
        path: the database file; an Agents SDK `SQLiteSession`'s own file is fine (the table
            name does not clash with the session's tables).
    """

    def __init__(self, path: str | Path) -> None:
        text = str(path)
        if not text or text == ":memory:":
            raise ValueError("SQLiteStateStore needs a database file, not ':memory:'")
        self.path = Path(text)
        self._lock = threading.Lock()
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30)
        if not self._ready:
            with self._lock:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {TABLE} "
                    "(thread TEXT PRIMARY KEY, state TEXT NOT NULL, updated_at REAL NOT NULL)"
                )
                conn.commit()
                self._ready = True
        return conn

    def _load(self, thread: str) -> str | None:
        conn = self._connect()
        try:
            row = conn.execute(f"SELECT state FROM {TABLE} WHERE thread = ?", (thread,)).fetchone()
        finally:
            conn.close()
        return None if row is None else str(row[0])

    def _save(self, thread: str, state: str) -> None:
        conn = self._connect()
        try:
            conn.execute(
                f"INSERT INTO {TABLE} (thread, state, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(thread) DO UPDATE SET state = excluded.state, "
                "updated_at = excluded.updated_at",
                (thread, state, time.time()),
            )
            conn.commit()
        finally:
            conn.close()

    def _delete(self, thread: str) -> None:
        conn = self._connect()
        try:
            conn.execute(f"DELETE FROM {TABLE} WHERE thread = ?", (thread,))
            conn.commit()
        finally:
            conn.close()

    async def load(self, thread: str) -> str | None:
        """The saved state, or None."""
        return await asyncio.to_thread(self._load, thread)

    async def save(self, thread: str, state: str) -> None:
        """Replace the saved state."""
        await asyncio.to_thread(self._save, thread, state)

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        await asyncio.to_thread(self._delete, thread)

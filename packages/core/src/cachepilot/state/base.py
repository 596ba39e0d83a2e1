"""Per-thread JSON documents kept between processes: the pilot state of a thread.

One row per thread in a `cachepilot_state` table (`thread`, `state`, `updated_at`,
`version`), the layout `cachepilot inspect` reads. The Agents SDK plugin keeps its sessions'
states here (and adds SQLAlchemy and Redis stores); the proxy keeps its threads' states here.

Stores that several processes share also implement `VersionedStateStore`: every save bumps the
thread's version, `version` reads it cheaply, and `save_if` saves only over the version the
caller last saw (compare-and-set), so two processes serving one thread notice each other. A
new document starts at a random version (`first_version`), so a thread deleted and made again
never shows a version a process saw before: a process holding a copy of the deleted thread
notices on its next version read.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from cachepilot.state.sqlite_connections import connection

__all__ = [
    "RESERVED_PREFIX",
    "TABLE",
    "MemoryStateStore",
    "SQLiteStateStore",
    "StateStore",
    "VersionedStateStore",
    "first_version",
]

TABLE = "cachepilot_state"
RESERVED_PREFIX = "cachepilot:"
"""Document names starting with this are cachepilot's own (the proxy's secret), not threads."""


def first_version() -> int:
    """The version of a newly made document: random in [1, 2**30] (never 0, "none"; room for
    2**30 saves in a 32-bit column), so versions of a deleted thread are not reused."""
    return 1 + secrets.randbelow(2**30)


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


@runtime_checkable
class VersionedStateStore(StateStore, Protocol):
    """A `StateStore` that versions each thread's saves (0: no document), for compare-and-set.

    Every save changes the version (an existing document's goes up by one, a new document's
    starts at `first_version()`)."""

    async def load_versioned(self, thread: str) -> tuple[str | None, int]:
        """The saved state of `thread` and its version."""
        ...

    async def version(self, thread: str) -> int:
        """The version of `thread`'s saved state (cheap: the state is not read)."""
        ...

    async def save_if(self, thread: str, state: str, expected: int) -> int | None:
        """Save `state` if the stored version is still `expected`; the new version, or None
        when another writer saved first."""
        ...


class MemoryStateStore:
    """States in process memory (tests, in-memory sessions)."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[str, int]] = {}

    async def load(self, thread: str) -> str | None:
        """The saved state, or None."""
        found = self._data.get(thread)
        return None if found is None else found[0]

    async def load_versioned(self, thread: str) -> tuple[str | None, int]:
        """The saved state and its version."""
        return self._data.get(thread, (None, 0))

    async def version(self, thread: str) -> int:
        """The saved state's version (0: none)."""
        return self._data.get(thread, (None, 0))[1]

    async def save(self, thread: str, state: str) -> None:
        """Keep `state`."""
        found = self._data.get(thread)
        self._data[thread] = (state, first_version() if found is None else found[1] + 1)

    async def save_if(self, thread: str, state: str, expected: int) -> int | None:
        """Keep `state` if the version is still `expected`."""
        if self._data.get(thread, ("", 0))[1] != expected:
            return None
        version = first_version() if expected == 0 else expected + 1
        self._data[thread] = (state, version)
        return version

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        self._data.pop(thread, None)


class SQLiteStateStore:
    """A `cachepilot_state` table in an SQLite file (WAL; safe across threads and processes).

    Each thread of a process keeps its connection to the file open (a request saves its thread
    twice; a connection opened and closed per statement cost more than the statement), shared
    with the other stores of the same file and bounded per thread
    (`cachepilot.state.sqlite_connections`), and opens it again when the file at `path` is no
    longer the one it opened (moved away, replaced).

    Args:
        path: the database file; an Agents SDK `SQLiteSession`'s own file is fine (the table
            name does not clash with the session's tables).
        synchronous: SQLite's `synchronous` setting for the connections. `NORMAL` (the
            default; with WAL): a commit survives the process being killed, and only a power
            loss or an operating-system crash may undo the last commits (SQLite's advice for
            WAL); `FULL` syncs the log to disk at every commit as well.
    """

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        text = str(path)
        if not text or text == ":memory:":
            raise ValueError("SQLiteStateStore needs a database file, not ':memory:'")
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = Path(text)
        self.synchronous = synchronous
        self._lock = threading.Lock()

    def _open(self) -> sqlite3.Connection:
        # The table is made on every connection opened (rarely: one per thread, again only
        # when the file was replaced), so a file made anew at the path is usable at once.
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            with self._lock:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {TABLE} (thread TEXT PRIMARY KEY, state "
                    "TEXT NOT NULL, updated_at REAL NOT NULL, version INTEGER NOT NULL "
                    "DEFAULT 0)"
                )
                columns = {row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})")}
                if "version" not in columns:  # a table written before versions were kept
                    with contextlib.suppress(sqlite3.OperationalError):  # another process did
                        conn.execute(
                            f"ALTER TABLE {TABLE} ADD COLUMN version INTEGER NOT NULL DEFAULT 0"
                        )
                conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return connection(str(self.path), self.synchronous, self._open)

    def _load(self, thread: str) -> str | None:
        with self._connection() as conn:
            row = conn.execute(f"SELECT state FROM {TABLE} WHERE thread = ?", (thread,)).fetchone()
        return None if row is None else str(row[0])

    def _save(self, thread: str, state: str) -> None:
        with self._connection() as conn:
            conn.execute(
                f"INSERT INTO {TABLE} (thread, state, updated_at, version) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(thread) DO UPDATE SET state = excluded.state, "
                "updated_at = excluded.updated_at, version = version + 1",
                (thread, state, time.time(), first_version()),
            )
            conn.commit()

    def _load_versioned(self, thread: str) -> tuple[str | None, int]:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT state, version FROM {TABLE} WHERE thread = ?", (thread,)
            ).fetchone()
        return (None, 0) if row is None else (str(row[0]), int(row[1]))

    def _version(self, thread: str) -> int:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT version FROM {TABLE} WHERE thread = ?", (thread,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def _save_if(self, thread: str, state: str, expected: int) -> int | None:
        with self._connection() as conn:
            # A row written before versions were kept has version 0, like no row at all.
            cursor = conn.execute(
                f"UPDATE {TABLE} SET state = ?, updated_at = ?, version = version + 1 "
                "WHERE thread = ? AND version = ?",
                (state, time.time(), thread, expected),
            )
            version = expected + 1
            if cursor.rowcount == 0 and expected == 0:
                version = first_version()
                cursor = conn.execute(
                    f"INSERT OR IGNORE INTO {TABLE} (thread, state, updated_at, version) "
                    "VALUES (?, ?, ?, ?)",
                    (thread, state, time.time(), version),
                )
            conn.commit()
        return version if cursor.rowcount == 1 else None

    def _delete(self, thread: str) -> None:
        with self._connection() as conn:
            conn.execute(f"DELETE FROM {TABLE} WHERE thread = ?", (thread,))
            conn.commit()

    async def load(self, thread: str) -> str | None:
        """The saved state, or None."""
        return await asyncio.to_thread(self._load, thread)

    async def save(self, thread: str, state: str) -> None:
        """Replace the saved state."""
        await asyncio.to_thread(self._save, thread, state)

    async def load_versioned(self, thread: str) -> tuple[str | None, int]:
        """The saved state and its version."""
        return await asyncio.to_thread(self._load_versioned, thread)

    async def version(self, thread: str) -> int:
        """The saved state's version (0: none)."""
        return await asyncio.to_thread(self._version, thread)

    async def save_if(self, thread: str, state: str, expected: int) -> int | None:
        """Save if the version is still `expected`; the new version, or None."""
        return await asyncio.to_thread(self._save_if, thread, state, expected)

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        await asyncio.to_thread(self._delete, thread)

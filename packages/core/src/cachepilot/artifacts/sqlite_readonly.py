"""Read-only access to SQLite files: the archive and databases handed to diagnostic commands.

`connect_read_only` never writes to the file, never creates one, takes no write lock and runs
no migration: the file stays byte-identical. A database without a `-wal` or `-journal` file
beside it (no writer at work) is opened `immutable`, so SQLite creates no `-shm`/`-wal` files
next to it either; one with such a file (a live writer) is opened `mode=ro`, which reads the
committed state.

`ReadOnlySQLiteArtifactStore` lists and reads an `SQLiteArtifactStore` archive this way: no
retention run, no access counting; every write raises `PermissionError`.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import ClassVar

from cachepilot.artifacts.base import (
    Artifact,
    ArtifactInfo,
    BaseArtifactStore,
    Encoded,
    artifact_from,
)
from cachepilot.artifacts.sqlite import _INFO_COLUMNS, SCHEMA_VERSION, SQLiteArtifactStore

__all__ = ["ReadOnlySQLiteArtifactStore", "connect_read_only"]

logger = logging.getLogger(__name__)


def connect_read_only(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection that can only read `path` (which must exist).

    Raises:
        ValueError: when the file does not exist or is not an SQLite database.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"no such file: {file}")
    uri = file.resolve().as_uri()  # percent-encodes '?', '#' and '%' in the path
    live = any(Path(f"{file}{suffix}").exists() for suffix in ("-wal", "-journal"))
    query = "mode=ro" if live else "mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(f"{uri}?{query}", uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{file}: not a readable SQLite database ({exc})") from exc
    return conn


class ReadOnlySQLiteArtifactStore(BaseArtifactStore):
    """An `SQLiteArtifactStore` file opened for reading only.

    `list` and `get` work as on the writable store; `put`, `record_access`, `delete`,
    `delete_thread` and `prune` raise `PermissionError`. Nothing is pruned or counted.

    Raises:
        ValueError: when the file is missing, not an artifact archive, or written by a newer
            schema version.
    """

    offload_async: ClassVar[bool] = True
    _logger: ClassVar[logging.Logger] = logger

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._init_store(None, None, None, lambda: 0.0)
        self.path = Path(path).expanduser()
        self._conn = connect_read_only(self.path)
        self._lock = threading.Lock()
        try:
            version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
            tables = {
                row[0]
                for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise ValueError(f"{self.path}: not a readable SQLite database ({exc})") from exc
        if version > SCHEMA_VERSION:
            self._conn.close()
            raise ValueError(
                f"{self.path} uses artifact schema {version}, newer than this cachepilot "
                f"({SCHEMA_VERSION})"
            )
        if "artifacts" not in tables:
            self._conn.close()
            raise ValueError(f"{self.path}: not a cachepilot artifact archive")

    def __repr__(self) -> str:
        return f"ReadOnlySQLiteArtifactStore({str(self.path)!r})"

    def _denied(self) -> PermissionError:
        return PermissionError(f"{self!r} is read-only")

    def _fetch(self, thread: str, ref: str) -> Artifact | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_INFO_COLUMNS}, data FROM artifacts WHERE thread = ? AND ref = ?",
                (thread, ref),
            ).fetchone()
        return (
            None if row is None else artifact_from(SQLiteArtifactStore._info(row), bytes(row[10]))
        )

    def _list_thread(self, thread: str) -> builtins.list[ArtifactInfo]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_INFO_COLUMNS} FROM artifacts WHERE thread = ? "
                "ORDER BY created_at, rowid",
                (thread,),
            ).fetchall()
        return [SQLiteArtifactStore._info(row) for row in rows]

    def _insert(self, thread: str, enc: Encoded, now: float) -> int | None:
        raise self._denied()

    def _count_access(self, thread: str, ref: str, now: float) -> bool:
        raise self._denied()

    def _delete_one(self, thread: str, ref: str) -> bool:
        raise self._denied()

    def _delete_all(self, thread: str) -> int:
        raise self._denied()

    def prune(self, now: float | None = None) -> int:
        """Not on a read-only store.

        Raises:
            PermissionError: always.
        """
        raise self._denied()

    def close(self) -> None:
        """Close the connection."""
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._conn.close()

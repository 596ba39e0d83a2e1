"""SQLite artifact store: the embedded default, safe across threads and processes."""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from cachepilot.artifacts.base import (
    AUTO_PRUNE_INTERVAL_SECONDS,
    DEFAULT_MAX_BYTES_PER_THREAD,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_RETENTION_SECONDS,
    FORGOTTEN_MARK,
    REMOVED_BY_FORGET,
    REMOVED_BY_RETENTION,
    REMOVED_BY_SIZE,
    TOMBSTONE_SECONDS,
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

__all__ = ["SCHEMA_VERSION", "SQLiteArtifactStore", "default_store_path"]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Stored in `PRAGMA user_version`; a file written by a newer schema is refused."""

_MAX_IDLE_CONNECTIONS = 8
_STORE_FILE = "artifacts.sqlite"

# `data` is the last column so scans of metadata never touch the blob's overflow pages.
_SCHEMA_V1 = (
    """
    CREATE TABLE IF NOT EXISTS artifacts (
        thread       TEXT    NOT NULL,
        ref          TEXT    NOT NULL,
        sha256       TEXT    NOT NULL,
        is_text      INTEGER NOT NULL,
        media_type   TEXT    NOT NULL,
        meta         TEXT    NOT NULL,
        size         INTEGER NOT NULL,
        created_at   REAL    NOT NULL,
        last_access  REAL    NOT NULL,
        access_count INTEGER NOT NULL DEFAULT 0,
        data         BLOB    NOT NULL,
        PRIMARY KEY (thread, ref)
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS artifacts_thread_lru
        ON artifacts (thread, last_access, created_at, size)
    """,
    "CREATE INDEX IF NOT EXISTS artifacts_lru ON artifacts (last_access, created_at, size)",
    """
    CREATE TABLE IF NOT EXISTS thread_usage (
        thread TEXT    PRIMARY KEY,
        bytes  INTEGER NOT NULL,
        count  INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    """
    CREATE TRIGGER IF NOT EXISTS artifacts_usage_insert AFTER INSERT ON artifacts BEGIN
        INSERT INTO thread_usage (thread, bytes, count) VALUES (NEW.thread, NEW.size, 1)
            ON CONFLICT (thread) DO UPDATE SET bytes = bytes + excluded.bytes, count = count + 1;
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS artifacts_usage_delete AFTER DELETE ON artifacts BEGIN
        UPDATE thread_usage SET bytes = bytes - OLD.size, count = count - 1
            WHERE thread = OLD.thread;
        DELETE FROM thread_usage WHERE thread = OLD.thread AND count <= 0;
    END
    """,
)

# Why artifacts are gone (retention, size caps), so a recall can say so. Added without a schema
# version bump: older versions ignore the table.
_TOMBSTONES = """
    CREATE TABLE IF NOT EXISTS removed (
        thread TEXT NOT NULL,
        ref    TEXT NOT NULL,
        reason TEXT NOT NULL,
        at     REAL NOT NULL,
        PRIMARY KEY (thread, ref)
    ) WITHOUT ROWID
"""

_INFO_COLUMNS = (
    "ref, thread, is_text, media_type, meta, created_at, last_access, access_count, size, sha256"
)

# Connections inherited through fork() must never be used or closed by the child: keep them
# referenced so garbage collection does not close them either.
_FORKED_CONNECTIONS: list[sqlite3.Connection] = []


def default_store_path() -> Path:
    """The per-user artifact database path; its parent directory is created (mode 0700).

    `$CACHEPILOT_HOME/artifacts.sqlite` when that variable is set, else
    `$XDG_CACHE_HOME/cachepilot/artifacts.sqlite`, else `~/.cache/cachepilot/artifacts.sqlite`
    (`%LOCALAPPDATA%\\cachepilot\\artifacts.sqlite` on Windows).
    """
    home = os.environ.get("CACHEPILOT_HOME", "").strip()
    if home:
        base = Path(home).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        local = os.environ.get("LOCALAPPDATA", "").strip()
        if xdg and Path(xdg).is_absolute():
            root = Path(xdg)
        elif sys.platform == "win32" and local:
            root = Path(local)
        else:
            root = Path.home() / ".cache"
        base = root / "cachepilot"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base / _STORE_FILE


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


class SQLiteArtifactStore(BaseArtifactStore):
    """Artifacts in one SQLite file (WAL), shared safely by threads and processes.

    Each operation borrows a connection from a small pool (connections are never used by two
    threads at once); writes run in `BEGIN IMMEDIATE` transactions and wait up to
    `busy_timeout` seconds for other writers, including other processes. Retention runs on open
    and then at most every 10 minutes on `put`; size caps are enforced on every new `put`.

    Args:
        path: Database file (default: `default_store_path()`); parent dirs are created.
        retention_seconds: Remove artifacts not accessed for this long (None: keep).
        max_bytes_per_thread: Per-thread cap; least-recently-accessed evicted first (None: no cap).
        max_total_bytes: Whole-file cap, same eviction order (None: no cap).
        clock: Time source in seconds (inject one in tests).
        busy_timeout: Seconds to wait for a lock held by another connection or process.
        auto_prune: Apply retention on open and periodically on `put`.

    Raises:
        ValueError: for bad limits, a non-positive timeout, or an in-memory path.
        RuntimeError: when the file was written by a newer schema version.
    """

    offload_async: ClassVar[bool] = True
    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        max_bytes_per_thread: int | None = DEFAULT_MAX_BYTES_PER_THREAD,
        max_total_bytes: int | None = DEFAULT_MAX_TOTAL_BYTES,
        clock: Clock = time.time,
        busy_timeout: float = 30.0,
        auto_prune: bool = True,
    ) -> None:
        self._init_store(retention_seconds, max_bytes_per_thread, max_total_bytes, clock)
        if (
            isinstance(busy_timeout, bool)
            or not isinstance(busy_timeout, int | float)
            or not busy_timeout > 0
        ):
            raise ValueError(f"busy_timeout must be a positive number of seconds: {busy_timeout!r}")
        self._busy_timeout = float(busy_timeout)
        if path is None:
            self.path = default_store_path()
        else:
            raw = os.fspath(path)
            if not isinstance(raw, str) or not raw.strip() or raw.strip() == ":memory:":
                raise ValueError(
                    f"path must name a database file, got {path!r} "
                    "(use InMemoryArtifactStore for an in-memory store)"
                )
            self.path = Path(raw).expanduser()
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._auto_prune = bool(auto_prune)
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        self._create_file_private()
        self._init_schema()
        if self._auto_prune:
            self._next_auto_prune = now_from(self._clock, None) + AUTO_PRUNE_INTERVAL_SECONDS
            self.prune()

    def __repr__(self) -> str:
        return f"SQLiteArtifactStore({str(self.path)!r}, limits={self.limits!r})"

    # -- public API (`put`, `get`, ... come from the base class over these hooks) ----------

    def _insert(self, thread: str, enc: Encoded, now: float) -> int | None:
        """Insert one row, or refresh `last_access` of the row already there.

        Idempotent across processes: the existence check and the insert share one write
        transaction.
        """
        evicted = 0
        with self._transaction() as conn:
            if self._auto_prune and self._auto_prune_due(now):
                evicted += self._delete_expired(conn, now)
            row = conn.execute(
                "SELECT sha256 FROM artifacts WHERE thread = ? AND ref = ?", (thread, enc.ref)
            ).fetchone()
            if row is not None:
                check_same_content(enc, row[0])
                conn.execute(
                    "UPDATE artifacts SET last_access = MAX(last_access, ?) "
                    "WHERE thread = ? AND ref = ?",
                    (now, thread, enc.ref),
                )
                return None
            cursor = conn.execute(
                "INSERT INTO artifacts (thread, ref, sha256, is_text, media_type, meta, size, "
                "created_at, last_access, access_count, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?) "
                "ON CONFLICT (thread, ref) DO NOTHING",
                (
                    thread,
                    enc.ref,
                    enc.sha256,
                    int(enc.is_text),
                    enc.media_type,
                    enc.meta_json,
                    len(enc.data),
                    now,
                    now,
                    enc.data,
                ),
            )
            conn.execute("DELETE FROM removed WHERE thread = ? AND ref = ?", (thread, enc.ref))
            evicted += self._enforce_caps(conn, [thread], keep_rowid=cursor.lastrowid, now=now)
        return evicted

    def _fetch(self, thread: str, ref: str) -> Artifact | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {_INFO_COLUMNS}, data FROM artifacts WHERE thread = ? AND ref = ?",
                (thread, ref),
            ).fetchone()
        return None if row is None else artifact_from(self._info(row), bytes(row[10]))

    def _count_access(self, thread: str, ref: str, now: float) -> bool:
        with self._connection() as conn:
            cursor = conn.execute(
                "UPDATE artifacts SET access_count = access_count + 1, "
                "last_access = MAX(last_access, ?) WHERE thread = ? AND ref = ?",
                (now, thread, ref),
            )
            return cursor.rowcount > 0

    def _list_thread(self, thread: str) -> builtins.list[ArtifactInfo]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_INFO_COLUMNS} FROM artifacts WHERE thread = ? "
                "ORDER BY created_at, rowid",
                (thread,),
            ).fetchall()
        return [self._info(row) for row in rows]

    def _delete_one(self, thread: str, ref: str) -> bool:
        with self._connection() as conn:
            cursor = conn.execute(
                "DELETE FROM artifacts WHERE thread = ? AND ref = ?", (thread, ref)
            )
            return cursor.rowcount > 0

    def _removed_reason(self, thread: str, ref: str) -> str | None:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT reason FROM removed WHERE thread = ? AND ref IN (?, ?) ORDER BY ref = ?",
                (thread, ref, FORGOTTEN_MARK, FORGOTTEN_MARK),
            ).fetchone()
        return None if row is None else str(row[0])

    def _mark_forgotten(self, thread: str) -> None:
        with self._connection() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO removed (thread, ref, reason, at) VALUES (?, ?, ?, ?)",
                (thread, FORGOTTEN_MARK, REMOVED_BY_FORGET, now_from(self._clock, None)),
            )

    def _delete_all(self, thread: str) -> int:
        with self._connection() as conn:
            conn.execute("DELETE FROM removed WHERE thread = ?", (thread,))
            removed = conn.execute("DELETE FROM artifacts WHERE thread = ?", (thread,)).rowcount
        if removed:
            self._vacuum()
        return max(removed, 0)

    def prune(self, now: float | None = None) -> int:
        """Remove artifacts idle longer than the retention, then enforce the caps."""
        current = now_from(self._clock, now)
        with self._transaction() as conn:
            removed = self._delete_expired(conn, current)
            cap = self.limits.max_bytes_per_thread
            threads: builtins.list[str] = []
            if cap is not None:
                threads = [
                    row[0]
                    for row in conn.execute(
                        "SELECT thread FROM thread_usage WHERE bytes > ?", (cap,)
                    ).fetchall()
                ]
            removed += self._enforce_caps(conn, threads, keep_rowid=None, now=current)
        if removed:
            logger.info("pruned %d artifacts from %s", removed, self.path)
            self._vacuum()
        return removed

    @property
    def total_bytes(self) -> int:
        """Bytes of payload currently stored (all threads)."""
        with self._connection() as conn:
            row = conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM thread_usage").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the pooled connections; the store cannot be used afterwards."""
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, []
        for conn in pool:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    # -- connections ---------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout,
            isolation_level=None,  # explicit transactions only
            check_same_thread=False,  # pooled: used by one thread at a time
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA journal_size_limit = 67108864")
        except BaseException:
            conn.close()
            raise
        return conn

    def _acquire(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            if os.getpid() != self._pid:  # forked: the parent's connections are not ours
                _FORKED_CONNECTIONS.extend(self._pool)
                self._pool = []
                self._pid = os.getpid()
            if self._pool:
                return self._pool.pop()
        return self._open()

    def _release(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
                return
        with self._pool_lock:
            if (
                not self._closed
                and os.getpid() == self._pid
                and len(self._pool) < _MAX_IDLE_CONNECTIONS
            ):
                self._pool.append(conn)
                return
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn = self._acquire()
        try:
            yield conn
        finally:
            self._release(conn)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: takes the write lock up front (no deadlock on upgrade)."""
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- schema --------------------------------------------------------------------------

    def _create_file_private(self) -> None:
        """Create the database file readable by this user only (outputs may hold secrets)."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return
        except OSError as exc:  # let sqlite report a real problem with the path
            logger.debug("could not pre-create %s: %s", self.path, exc)
            return
        os.close(fd)

    def _init_schema(self) -> None:
        deadline = time.monotonic() + self._busy_timeout
        delay = 0.01
        while True:
            try:
                self._migrate()
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _migrate(self) -> None:
        with self._connection() as conn:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} uses artifact schema {version}, newer than this cachepilot "
                    f"({SCHEMA_VERSION}); upgrade cachepilot or use another path"
                )
            if version == 0:
                # Only effective before the first table exists; a no-op afterwards.
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            if mode != "wal":
                logger.warning("%s: journal_mode is %s, not wal", self.path, mode)
            conn.execute(_TOMBSTONES)
            if version == SCHEMA_VERSION:
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version < SCHEMA_VERSION:
                    for statement in _SCHEMA_V1:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- retention and caps --------------------------------------------------------------

    def _delete_expired(self, conn: sqlite3.Connection, now: float) -> int:
        retention = self.limits.retention_seconds
        forget = now - max(retention or 0.0, TOMBSTONE_SECONDS)
        conn.execute("DELETE FROM removed WHERE at < ?", (forget,))
        if retention is None:
            return 0
        conn.execute(
            "INSERT OR REPLACE INTO removed (thread, ref, reason, at) "
            "SELECT thread, ref, ?, ? FROM artifacts WHERE last_access < ?",
            (REMOVED_BY_RETENTION, now, now - retention),
        )
        cursor = conn.execute("DELETE FROM artifacts WHERE last_access < ?", (now - retention,))
        return max(cursor.rowcount, 0)

    def _enforce_caps(
        self,
        conn: sqlite3.Connection,
        threads: builtins.list[str],
        keep_rowid: int | None,
        now: float,
    ) -> int:
        removed = 0
        cap = self.limits.max_bytes_per_thread
        if cap is not None:
            for thread in threads:
                row = conn.execute(
                    "SELECT bytes FROM thread_usage WHERE thread = ?", (thread,)
                ).fetchone()
                if row is not None and row[0] > cap:
                    removed += self._evict(
                        conn,
                        row[0] - cap,
                        "SELECT rowid, size FROM artifacts WHERE thread = ? "
                        "ORDER BY last_access, created_at, rowid",
                        (thread,),
                        keep_rowid,
                        now=now,
                    )
        total_cap = self.limits.max_total_bytes
        if total_cap is not None:
            total = int(
                conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM thread_usage").fetchone()[0]
            )
            if total > total_cap:
                removed += self._evict(
                    conn,
                    total - total_cap,
                    "SELECT rowid, size FROM artifacts ORDER BY last_access, created_at, rowid",
                    (),
                    keep_rowid,
                    now=now,
                )
        if removed:
            logger.debug("evicted %d artifacts to respect size caps", removed)
        return removed

    @staticmethod
    def _evict(
        conn: sqlite3.Connection,
        excess: int,
        query: str,
        params: tuple[str, ...],
        keep_rowid: int | None,
        *,
        now: float,
    ) -> int:
        victims: builtins.list[tuple[int]] = []
        cursor = conn.execute(query, params)
        try:
            for rowid, size in cursor:
                if rowid == keep_rowid:
                    continue
                victims.append((rowid,))
                excess -= size
                if excess <= 0:
                    break
        finally:
            cursor.close()
        conn.executemany(
            "INSERT OR REPLACE INTO removed (thread, ref, reason, at) "
            "SELECT thread, ref, ?, ? FROM artifacts WHERE rowid = ?",
            [(REMOVED_BY_SIZE, now, rowid) for (rowid,) in victims],
        )
        conn.executemany("DELETE FROM artifacts WHERE rowid = ?", victims)
        return len(victims)

    def _vacuum(self) -> None:
        """Give freed pages back to the file system (best effort)."""
        try:
            with self._connection() as conn:
                conn.execute("PRAGMA incremental_vacuum").fetchall()
        except sqlite3.Error as exc:
            logger.debug("incremental_vacuum skipped: %s", exc)

    @staticmethod
    def _info(row: tuple[Any, ...]) -> ArtifactInfo:
        return ArtifactInfo(
            ref=row[0],
            thread=row[1],
            is_text=bool(row[2]),
            media_type=row[3],
            meta=load_meta(row[4]),
            created_at=float(row[5]),
            last_access=float(row[6]),
            access_count=int(row[7]),
            size=int(row[8]),
            sha256=row[9],
        )

"""`SQLArtifactStore`: artifacts in an SQL database through SQLAlchemy (PostgreSQL for a team).

Two tables, created on first use: `cachepilot_artifacts` (one row per thread and ref, the
payload included) and `cachepilot_removed` (why a ref is gone: retention, size caps, a
forgotten thread). Several processes can share one database: an insert that loses a race to
another process's insert of the same ref reads theirs, and every write is one transaction.
Needs SQLAlchemy and a driver (`cachepilot[postgres]`: psycopg).
"""

from __future__ import annotations

import builtins
import logging
import time
from typing import Any, ClassVar

from cachepilot.artifacts.base import (
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

__all__ = ["SQLArtifactStore"]

logger = logging.getLogger(__name__)


class SQLArtifactStore(BaseArtifactStore):
    """Artifacts in an SQL database (SQLAlchemy Core), shared safely by processes.

    Args:
        url: an SQLAlchemy URL (`postgresql+psycopg://user@host/db`; a plain
            `postgresql://` URL uses psycopg) or an SQLAlchemy `Engine`.
        prefix: table name prefix.
        retention_seconds: Remove artifacts not accessed for this long (None: keep).
        max_bytes_per_thread: Per-thread cap; least-recently-accessed evicted first.
        max_total_bytes: Whole-database cap, same eviction order.
        clock: Time source in seconds.

    Raises:
        ValueError: for bad limits or a URL SQLAlchemy cannot read.
    """

    offload_async: ClassVar[bool] = True
    _logger: ClassVar[logging.Logger] = logger

    def __init__(
        self,
        url: Any,
        *,
        prefix: str = "cachepilot_",
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        max_bytes_per_thread: int | None = DEFAULT_MAX_BYTES_PER_THREAD,
        max_total_bytes: int | None = DEFAULT_MAX_TOTAL_BYTES,
        clock: Clock = time.time,
    ) -> None:
        from sqlalchemy import (
            Boolean,
            Column,
            Float,
            Index,
            Integer,
            LargeBinary,
            MetaData,
            String,
            Table,
            Text,
            create_engine,
        )
        from sqlalchemy.engine import Engine
        from sqlalchemy.exc import DBAPIError

        self._init_store(retention_seconds, max_bytes_per_thread, max_total_bytes, clock)
        if isinstance(url, Engine):
            self._engine = url
        else:
            text = str(url)
            if text.startswith("postgresql://") or text.startswith("postgres://"):
                text = "postgresql+psycopg://" + text.split("://", 1)[1]
            try:
                self._engine = create_engine(text, pool_pre_ping=True)
            except Exception as exc:
                raise ValueError(f"not a database URL SQLAlchemy can open: {exc}") from exc
        metadata = MetaData()
        self._artifacts = Table(
            f"{prefix}artifacts",
            metadata,
            Column("thread", String(512), primary_key=True),
            Column("ref", String(64), primary_key=True),
            Column("sha256", String(64), nullable=False),
            Column("is_text", Boolean, nullable=False),
            Column("media_type", String(255), nullable=False),
            Column("meta", Text, nullable=False),
            Column("size", Integer, nullable=False),
            Column("created_at", Float, nullable=False),
            Column("last_access", Float, nullable=False),
            Column("access_count", Integer, nullable=False, default=0),
            Column("data", LargeBinary, nullable=False),
            Index(f"{prefix}artifacts_lru", "last_access"),
        )
        self._removed = Table(
            f"{prefix}removed",
            metadata,
            Column("thread", String(512), primary_key=True),
            Column("ref", String(64), primary_key=True),
            Column("reason", String(255), nullable=False),
            Column("at", Float, nullable=False),
        )
        for attempt in range(3):
            try:
                metadata.create_all(self._engine, checkfirst=True)
                break
            except DBAPIError:
                # Another process created the tables at the same time: look again.
                if attempt == 2:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def __repr__(self) -> str:
        return f"SQLArtifactStore({self._engine.url.render_as_string(hide_password=True)!r})"

    # -- hooks -----------------------------------------------------------------------------

    def _insert(self, thread: str, enc: Encoded, now: float) -> int | None:
        thread = _column(thread)
        from sqlalchemy import delete, insert, select
        from sqlalchemy.exc import IntegrityError

        a = self._artifacts
        where = (a.c.thread == thread) & (a.c.ref == enc.ref)
        row = {
            "thread": thread, "ref": enc.ref, "sha256": enc.sha256, "is_text": enc.is_text,
            "media_type": enc.media_type, "meta": enc.meta_json, "size": len(enc.data),
            "created_at": now, "last_access": now, "access_count": 0, "data": enc.data,
        }  # fmt: skip
        for _ in range(3):
            with self._engine.begin() as conn:
                found = conn.execute(select(a.c.sha256).where(where)).first()
                if found is not None:
                    check_same_content(enc, found[0])
                    self._touch(conn, thread, enc.ref, now, count=False)
                    return None
                try:
                    with conn.begin_nested():
                        conn.execute(insert(a).values(**row))
                except IntegrityError:
                    continue  # another process inserted it first: read theirs
                r = self._removed
                conn.execute(delete(r).where((r.c.thread == thread) & (r.c.ref == enc.ref)))
                evicted = self._enforce_caps(conn, thread, enc.ref, now)
                if self._auto_prune_due(now):
                    evicted += self._delete_expired(conn, now)
                return evicted
        raise RuntimeError(f"could not store artifact {enc.ref}: concurrent writers kept racing")

    def _touch(self, conn: Any, thread: str, ref: str, now: float, *, count: bool) -> bool:
        from sqlalchemy import case, update

        a = self._artifacts
        values: dict[str, Any] = {
            "last_access": case((a.c.last_access < now, now), else_=a.c.last_access)
        }
        if count:
            values["access_count"] = a.c.access_count + 1
        result = conn.execute(
            update(a).where((a.c.thread == thread) & (a.c.ref == ref)).values(**values)
        )
        return bool(result.rowcount)

    def _fetch(self, thread: str, ref: str) -> Artifact | None:
        thread = _column(thread)
        from sqlalchemy import select

        a = self._artifacts
        with self._engine.connect() as conn:
            row = conn.execute(
                select(*self._info_columns(), a.c.data).where(
                    (a.c.thread == thread) & (a.c.ref == ref)
                )
            ).first()
        return None if row is None else artifact_from(self._info(row), bytes(row[10]))

    def _count_access(self, thread: str, ref: str, now: float) -> bool:
        thread = _column(thread)
        with self._engine.begin() as conn:
            return self._touch(conn, thread, ref, now, count=True)

    def _list_thread(self, thread: str) -> builtins.list[ArtifactInfo]:
        thread = _column(thread)
        from sqlalchemy import select

        a = self._artifacts
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(*self._info_columns())
                .where(a.c.thread == thread)
                .order_by(a.c.created_at, a.c.ref)
            ).all()
        return [self._info(row) for row in rows]

    def _delete_one(self, thread: str, ref: str) -> bool:
        thread = _column(thread)
        from sqlalchemy import delete

        a = self._artifacts
        with self._engine.begin() as conn:
            result = conn.execute(delete(a).where((a.c.thread == thread) & (a.c.ref == ref)))
        return bool(result.rowcount)

    def _delete_all(self, thread: str) -> int:
        thread = _column(thread)
        from sqlalchemy import delete

        with self._engine.begin() as conn:
            conn.execute(delete(self._removed).where(self._removed.c.thread == thread))
            result = conn.execute(delete(self._artifacts).where(self._artifacts.c.thread == thread))
        return max(int(result.rowcount), 0)

    def _removed_reason(self, thread: str, ref: str) -> str | None:
        thread = _column(thread)
        from sqlalchemy import select

        r = self._removed
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(r.c.ref, r.c.reason).where(
                    (r.c.thread == thread) & r.c.ref.in_([ref, FORGOTTEN_MARK])
                )
            ).all()
        reasons = {str(row[0]): str(row[1]) for row in rows}
        return reasons.get(ref) or reasons.get(FORGOTTEN_MARK)

    def _mark_forgotten(self, thread: str) -> None:
        thread = _column(thread)
        with self._engine.begin() as conn:
            self._tombstones(conn, [(thread, FORGOTTEN_MARK)], REMOVED_BY_FORGET, self._clock())

    def prune(self, now: float | None = None) -> int:
        """Remove artifacts idle longer than the retention, then enforce the caps."""
        from sqlalchemy import func, select

        current = now_from(self._clock, now)
        a = self._artifacts
        with self._engine.begin() as conn:
            removed = self._delete_expired(conn, current)
            cap = self.limits.max_bytes_per_thread
            over = []
            if cap is not None:
                over = [
                    str(row[0])
                    for row in conn.execute(
                        select(a.c.thread).group_by(a.c.thread).having(func.sum(a.c.size) > cap)
                    )
                ]
            for thread in over:
                removed += self._enforce_caps(conn, thread, None, current)
            if not over:
                removed += self._enforce_caps(conn, None, None, current)
        if removed:
            logger.info("pruned %d artifacts", removed)
        return removed

    @property
    def total_bytes(self) -> int:
        """Bytes of payload currently stored (all threads)."""
        from sqlalchemy import func, select

        with self._engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.coalesce(func.sum(self._artifacts.c.size), 0))
                ).scalar_one()
            )

    def close(self) -> None:
        """Release the engine's connections."""
        self._engine.dispose()

    # -- retention and caps -------------------------------------------------------------

    def _delete_expired(self, conn: Any, now: float) -> int:
        from sqlalchemy import delete, select

        a, r = self._artifacts, self._removed
        retention = self.limits.retention_seconds
        conn.execute(delete(r).where(r.c.at < now - max(retention or 0.0, TOMBSTONE_SECONDS)))
        if retention is None:
            return 0
        old = a.c.last_access < now - retention
        victims = [
            (str(t), str(ref)) for t, ref in conn.execute(select(a.c.thread, a.c.ref).where(old))
        ]
        self._tombstones(conn, victims, REMOVED_BY_RETENTION, now)
        conn.execute(delete(a).where(old))
        return len(victims)

    def _enforce_caps(self, conn: Any, thread: str | None, keep: str | None, now: float) -> int:
        """Evict least recently used artifacts past the caps (`keep`: the one just stored)."""
        from sqlalchemy import func, select

        a = self._artifacts
        removed = 0
        scopes: list[tuple[Any, int | None]] = []
        if thread is not None:
            scopes.append((a.c.thread == thread, self.limits.max_bytes_per_thread))
        scopes.append((None, self.limits.max_total_bytes))
        for where, cap in scopes:
            if cap is None:
                continue
            total_query = select(func.coalesce(func.sum(a.c.size), 0))
            if where is not None:
                total_query = total_query.where(where)
            excess = int(conn.execute(total_query).scalar_one()) - cap
            if excess <= 0:
                continue
            order = select(a.c.thread, a.c.ref, a.c.size).order_by(
                a.c.last_access, a.c.created_at, a.c.ref
            )
            if where is not None:
                order = order.where(where)
            victims: list[tuple[str, str]] = []
            for t, ref, size in conn.execute(order):
                if (t, ref) == (thread, keep):
                    continue
                victims.append((str(t), str(ref)))
                excess -= int(size)
                if excess <= 0:
                    break
            removed += self._evict(conn, victims, now)
        return removed

    def _evict(self, conn: Any, victims: builtins.list[tuple[str, str]], now: float) -> int:
        from sqlalchemy import delete

        a = self._artifacts
        self._tombstones(conn, victims, REMOVED_BY_SIZE, now)
        for thread, ref in victims:
            conn.execute(delete(a).where((a.c.thread == thread) & (a.c.ref == ref)))
        return len(victims)

    def _tombstones(
        self, conn: Any, pairs: builtins.list[tuple[str, str]], reason: str, now: float
    ) -> None:
        from sqlalchemy import delete, insert

        r = self._removed
        for thread, ref in pairs:
            conn.execute(delete(r).where((r.c.thread == thread) & (r.c.ref == ref)))
            conn.execute(insert(r).values(thread=thread, ref=ref, reason=reason, at=now))

    # -- rows ----------------------------------------------------------------------------

    def _info_columns(self) -> tuple[Any, ...]:
        a = self._artifacts
        return (a.c.ref, a.c.thread, a.c.is_text, a.c.media_type, a.c.meta, a.c.created_at,
                a.c.last_access, a.c.access_count, a.c.size, a.c.sha256)  # fmt: skip

    @staticmethod
    def _info(row: Any) -> ArtifactInfo:
        return ArtifactInfo(
            ref=str(row[0]),
            thread=_uncolumn(str(row[1])),
            is_text=bool(row[2]),
            media_type=str(row[3]),
            meta=load_meta(row[4]),
            created_at=float(row[5]),
            last_access=float(row[6]),
            access_count=int(row[7]),
            size=int(row[8]),
            sha256=str(row[9]),
        )


def _column(thread: str) -> str:
    """A thread id as stored: PostgreSQL text cannot hold NUL, so backslashes and NULs are
    escaped (reversibly; ids without either are stored as they are)."""
    if "\x00" not in thread and "\\" not in thread:
        return thread
    return thread.replace("\\", "\\\\").replace("\x00", "\\0")


def _uncolumn(stored: str) -> str:
    """The thread id `_column` stored."""
    if "\\" not in stored:
        return stored
    out, chars = [], iter(stored)
    for char in chars:
        if char == "\\":
            out.append("\x00" if next(chars, "") == "0" else "\\")
        else:
            out.append(char)
    return "".join(out)

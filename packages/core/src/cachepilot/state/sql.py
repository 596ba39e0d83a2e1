"""`SQLAlchemyStateStore`: per-thread pilot states in an SQL table through SQLAlchemy (asyncio).

The `cachepilot_state` layout of `cachepilot.state.base` (`thread`, `state`, `updated_at`,
`version`) in any database SQLAlchemy drives: PostgreSQL for a team's proxy processes
(`cachepilot proxy --store postgresql://...`), an Agents SDK `SQLAlchemySession`'s own
database. Versioned (`VersionedStateStore`), so processes sharing it notice each other.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cachepilot.state.base import TABLE, first_version

__all__ = ["SQLAlchemyStateStore"]


class SQLAlchemyStateStore:
    """A `cachepilot_state` table through an SQLAlchemy `AsyncEngine` (created on first use).

    Args:
        engine: the engine (an `SQLAlchemySession`'s own engine, or any async engine).
        table: table name.
        owns_engine: `aclose` disposes of the engine (it was made for this store alone).
    """

    def __init__(self, engine: Any, table: str = TABLE, *, owns_engine: bool = False) -> None:
        from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

        self._engine = engine
        self._metadata = MetaData()
        self._table = Table(
            table,
            self._metadata,
            Column("thread", String(512), primary_key=True),
            Column("state", Text, nullable=False),
            Column("updated_at", Float, nullable=False),
            Column("version", Integer, nullable=False, default=0, server_default="0"),
        )
        self._ready = False
        self._init_lock = asyncio.Lock()
        self._owns_engine = owns_engine

    async def aclose(self) -> None:
        """Dispose of the engine's connections when the store owns it."""
        if self._owns_engine:
            await self._engine.dispose()

    async def _ensure(self) -> None:
        from sqlalchemy.exc import DBAPIError

        if self._ready:
            return
        async with self._init_lock:
            if not self._ready:
                for attempt in range(3):
                    try:
                        async with self._engine.begin() as conn:
                            await conn.run_sync(self._metadata.create_all)
                            await conn.run_sync(self._add_version_column)
                        break
                    except DBAPIError:
                        # Another process created the table at the same time (PostgreSQL's
                        # catalog check is not atomic with the creation): look again.
                        if attempt == 2:
                            raise
                        await asyncio.sleep(0.05 * (attempt + 1))
                self._ready = True

    def _add_version_column(self, conn: Any) -> None:
        """Give a table made before versions were kept its `version` column."""
        from sqlalchemy import inspect, text

        columns = {c["name"] for c in inspect(conn).get_columns(self._table.name)}
        if "version" not in columns:
            conn.execute(
                text(
                    f"ALTER TABLE {self._table.name} ADD COLUMN version INTEGER NOT NULL DEFAULT 0"
                )
            )

    async def load(self, thread: str) -> str | None:
        """The saved state, or None."""
        from sqlalchemy import select

        await self._ensure()
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(self._table.c.state).where(self._table.c.thread == thread)
                )
            ).first()
        return None if row is None else str(row[0])

    async def save(self, thread: str, state: str) -> None:
        """Replace the saved state in one statement: an upsert in the engine's own dialect
        (PostgreSQL and SQLite `ON CONFLICT`, MySQL `ON DUPLICATE KEY`), so concurrent saves of
        one thread never collide; other dialects update, then insert if nothing was there."""
        await self._ensure()
        values = {"thread": thread, "state": state, "updated_at": time.time(),
                  "version": first_version()}  # fmt: skip
        statement = self._upsert(values)
        async with self._engine.begin() as conn:
            if statement is not None:
                await conn.execute(statement)
                return
        await self._update_or_insert(values)

    def _upsert(self, values: dict[str, Any]) -> Any:
        """The dialect's upsert statement, or None when it has none SQLAlchemy knows."""
        from sqlalchemy.dialects import mysql, postgresql, sqlite

        table = self._table
        name = self._engine.dialect.name
        if name in ("postgresql", "sqlite"):
            dialect: Any = postgresql if name == "postgresql" else sqlite
            statement = dialect.insert(table).values(**values)
            return statement.on_conflict_do_update(
                index_elements=[table.c.thread],
                set_={
                    "state": statement.excluded.state,
                    "updated_at": statement.excluded.updated_at,
                    "version": table.c.version + 1,
                },
            )
        if name in ("mysql", "mariadb"):
            upsert = mysql.insert(table).values(**values)
            return upsert.on_duplicate_key_update(
                state=upsert.inserted.state,
                updated_at=upsert.inserted.updated_at,
                version=table.c.version + 1,
            )
        return None

    async def _update_or_insert(self, values: dict[str, Any]) -> None:
        """Portable replace: update; insert when no row was there; a concurrent insert that
        won the race turns into an update."""
        from sqlalchemy import insert, update
        from sqlalchemy.exc import IntegrityError

        table = self._table
        change = (
            update(table)
            .where(table.c.thread == values["thread"])
            .values(
                state=values["state"],
                updated_at=values["updated_at"],
                version=table.c.version + 1,
            )
        )
        for _ in range(3):
            async with self._engine.begin() as conn:
                if (await conn.execute(change)).rowcount:
                    return
            try:
                async with self._engine.begin() as conn:
                    await conn.execute(insert(table).values(**values))
                return
            except IntegrityError:
                continue  # another writer inserted it first: update that row
        raise RuntimeError(f"could not save the state of thread {values['thread']!r}")

    async def load_versioned(self, thread: str) -> tuple[str | None, int]:
        """The saved state and its version."""
        from sqlalchemy import select

        await self._ensure()
        table = self._table
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(table.c.state, table.c.version).where(table.c.thread == thread)
                )
            ).first()
        return (None, 0) if row is None else (str(row[0]), int(row[1]))

    async def version(self, thread: str) -> int:
        """The saved state's version (0: none)."""
        from sqlalchemy import select

        await self._ensure()
        table = self._table
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(select(table.c.version).where(table.c.thread == thread))
            ).first()
        return 0 if row is None else int(row[0])

    async def save_if(self, thread: str, state: str, expected: int) -> int | None:
        """Save if the version is still `expected` (one conditional statement); the new
        version, or None when another writer saved first."""
        from sqlalchemy import insert, update
        from sqlalchemy.exc import IntegrityError

        await self._ensure()
        table = self._table
        now = time.time()
        change = (
            update(table)
            .where((table.c.thread == thread) & (table.c.version == expected))
            .values(state=state, updated_at=now, version=expected + 1)
        )
        async with self._engine.begin() as conn:
            if (await conn.execute(change)).rowcount == 1:
                return expected + 1
        if expected != 0:
            return None
        version = first_version()
        try:
            async with self._engine.begin() as conn:
                row = {"thread": thread, "state": state, "updated_at": now, "version": version}
                await conn.execute(insert(table).values(**row))
        except IntegrityError:
            return None  # another writer created it first
        return version

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        from sqlalchemy import delete

        await self._ensure()
        async with self._engine.begin() as conn:
            await conn.execute(delete(self._table).where(self._table.c.thread == thread))

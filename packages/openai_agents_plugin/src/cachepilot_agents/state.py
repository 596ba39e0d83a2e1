"""Where a thread's `PilotState` (plan, frozen values, counters) is kept between processes.

The state lives beside the session's own history and is never written into it as items (the
model must not see it). `state_store_for(session, fallback)` picks the companion of a session:

- `SQLiteSession` on a file: a side table `cachepilot_state` in the same database file;
- `SQLiteSession(":memory:")`: process memory (the history itself lives no longer);
- `SQLAlchemySession`: a `cachepilot_state` table through the session's own engine;
- `RedisSession`: one key `<key_prefix>:<session_id>:cachepilot_state` on the same client;
- any other `Session`: the fallback store (`CachePilotAgents(state_store=...)`, by default an
  SQLite file `agents_state.sqlite` next to the pilot's artifact archive).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from agents.memory import SQLiteSession

from cachepilot.artifacts import default_store_path
from cachepilot.state_store import TABLE, MemoryStateStore, SQLiteStateStore, StateStore
from cachepilot_agents._sdk_private import redis_session_parts

__all__ = [
    "MemoryStateStore",
    "RedisStateStore",
    "SQLAlchemyStateStore",
    "SQLiteStateStore",
    "StateStore",
    "default_state_path",
    "state_store_for",
]

logger = logging.getLogger(__name__)


class SQLAlchemyStateStore:
    """A `cachepilot_state` table through an SQLAlchemy `AsyncEngine` (created on first use).

    Args:
        engine: the engine (an `SQLAlchemySession`'s own engine, or any async engine).
        table: table name.
    """

    def __init__(self, engine: Any, table: str = TABLE) -> None:
        from sqlalchemy import Column, Float, MetaData, String, Table, Text

        self._engine = engine
        self._metadata = MetaData()
        self._table = Table(
            table,
            self._metadata,
            Column("thread", String(512), primary_key=True),
            Column("state", Text, nullable=False),
            Column("updated_at", Float, nullable=False),
        )
        self._ready = False
        self._init_lock = asyncio.Lock()

    async def _ensure(self) -> None:
        if self._ready:
            return
        async with self._init_lock:
            if not self._ready:
                async with self._engine.begin() as conn:
                    await conn.run_sync(self._metadata.create_all)
                self._ready = True

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
        values = {"thread": thread, "state": state, "updated_at": time.time()}
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
                },
            )
        if name in ("mysql", "mariadb"):
            upsert = mysql.insert(table).values(**values)
            return upsert.on_duplicate_key_update(
                state=upsert.inserted.state, updated_at=upsert.inserted.updated_at
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
            .values(state=values["state"], updated_at=values["updated_at"])
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

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        from sqlalchemy import delete

        await self._ensure()
        async with self._engine.begin() as conn:
            await conn.execute(delete(self._table).where(self._table.c.thread == thread))


class RedisStateStore:
    """One Redis string per thread (`<prefix>:<thread>:cachepilot_state`).

    Args:
        client: an async Redis client (`redis.asyncio.Redis`).
        prefix: key prefix (a `RedisSession`'s `key_prefix`).
        ttl: expiry in seconds (a `RedisSession`'s `ttl`), or None.
    """

    def __init__(self, client: Any, prefix: str = "agents:session", ttl: int | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._ttl = ttl

    def _key(self, thread: str) -> str:
        return f"{self._prefix}:{thread}:{TABLE}"

    async def load(self, thread: str) -> str | None:
        """The saved state, or None."""
        value = await self._client.get(self._key(thread))
        if value is None:
            return None
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    async def save(self, thread: str, state: str) -> None:
        """Replace the saved state."""
        if self._ttl:
            await self._client.set(self._key(thread), state, ex=self._ttl)
        else:
            await self._client.set(self._key(thread), state)

    async def delete(self, thread: str) -> None:
        """Forget `thread`."""
        await self._client.delete(self._key(thread))


def default_state_path() -> Path:
    """`agents_state.sqlite` next to the pilot's default artifact archive."""
    return default_store_path().parent / "agents_state.sqlite"


def state_store_for(session: object, fallback: StateStore) -> StateStore:
    """The companion state store of an Agents SDK session (see the module docstring)."""
    if isinstance(session, SQLiteSession):
        if str(session.db_path) == ":memory:":
            return MemoryStateStore()
        return SQLiteStateStore(session.db_path)
    # By class name (subclasses too): the optional backends are imported only when used.
    kinds = {cls.__name__ for cls in type(session).__mro__}
    engine = getattr(session, "engine", None)
    if "SQLAlchemySession" in kinds and engine is not None:
        return SQLAlchemyStateStore(engine)
    redis = redis_session_parts(session) if "RedisSession" in kinds else None
    if redis is not None:
        client, prefix, ttl = redis
        return RedisStateStore(client, prefix=prefix, ttl=ttl)
    return fallback

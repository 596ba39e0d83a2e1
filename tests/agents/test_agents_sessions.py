"""`CachePilotAgents.session` over the SDK's SQLite, SQLAlchemy and Redis sessions, and others."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, SQLiteSession
from agents.testing import ScriptedModel
from agents_helpers import Clock
from test_agents_runner import coding_steps, read_file

from cachepilot_agents import CachePilotAgents, SQLiteStateStore
from cachepilot_agents.state import (
    MemoryStateStore,
    RedisStateStore,
    SQLAlchemyStateStore,
    state_store_for,
)


async def two_processes(make_pilot: Any, open_session: Any, turns: int = 14) -> tuple[Any, Any]:
    """Run once, then again with a new pilot + plugin over a reopened session."""
    clock = Clock()
    pilot1 = make_pilot()
    cp1 = CachePilotAgents(pilot1, clock=clock)
    model1 = ScriptedModel(coding_steps(turns))
    session1 = cp1.session(await open_session())
    agent1 = cp1.wrap(Agent(name="x", tools=[read_file], model=model1))
    await Runner.run(
        agent1, "go", run_config=cp1.run_config(), hooks=cp1.hooks, session=session1, max_turns=50
    )
    thread = session1.session_id
    saved = pilot1.export_state(thread)
    pilot2 = make_pilot()
    cp2 = CachePilotAgents(pilot2, clock=clock)
    model2 = ScriptedModel(coding_steps(1, prefix="d"))
    session2 = cp2.session(await open_session())
    agent2 = cp2.wrap(Agent(name="x", tools=[read_file], model=model2))
    await Runner.run(
        agent2, "more", run_config=cp2.run_config(), hooks=cp2.hooks, session=session2, max_turns=50
    )
    restored = pilot2.export_state(thread)
    assert restored["plan"] == saved["plan"]
    assert restored["calls"] == saved["calls"] + 2
    assert [i for i in model2.calls[0].input][: len(model1.calls[-1].input)] == list(
        model1.calls[-1].input
    )
    return session2, saved


def test_sqlite_session_keeps_state_in_a_side_table(make_pilot: Any, tmp_path: Path) -> None:
    db = tmp_path / "conv.db"

    async def open_session() -> Any:
        return SQLiteSession("sqlite-user", db)

    session, _ = asyncio.run(two_processes(make_pilot, open_session))
    assert isinstance(session.store, SQLiteStateStore)
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        rows = conn.execute("SELECT thread FROM cachepilot_state").fetchall()
    assert "cachepilot_state" in tables and rows == [("sqlite-user",)]
    items = asyncio.run(session.get_items())
    assert all("cachepilot" not in str(i.get("content", "")) for i in items)  # never as items
    asyncio.run(session.clear_session())
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM cachepilot_state").fetchone() == (0,)


def test_sqlalchemy_session(make_pilot: Any, tmp_path: Path) -> None:
    pytest.importorskip("aiosqlite")
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    url = f"sqlite+aiosqlite:///{tmp_path / 'sa.db'}"

    async def main() -> Any:
        engine = create_async_engine(url)

        async def open_session() -> Any:
            return SQLAlchemySession("sa-user", engine=engine, create_tables=True)

        session, saved = await two_processes(make_pilot, open_session)
        assert isinstance(session.store, SQLAlchemyStateStore)
        assert await session.store.load("sa-user") is not None
        await engine.dispose()
        return saved

    asyncio.run(main())


def test_redis_session(make_pilot: Any) -> None:
    fakeredis = pytest.importorskip("fakeredis")
    from agents.extensions.memory import RedisSession

    async def main() -> None:
        server = fakeredis.FakeServer()
        client = fakeredis.FakeAsyncRedis(server=server)

        async def open_session() -> Any:
            return RedisSession("redis-user", redis_client=client, key_prefix="app")

        session, _ = await two_processes(make_pilot, open_session)
        assert isinstance(session.store, RedisStateStore)
        assert await client.get("app:redis-user:cachepilot_state") is not None
        await session.clear_session()
        assert await client.get("app:redis-user:cachepilot_state") is None

    asyncio.run(main())


class DictSession:
    """A minimal third-party `Session` (the protocol only)."""

    def __init__(self, session_id: str, backing: dict[str, list[Any]]) -> None:
        self.session_id = session_id
        self.session_settings = None
        self._backing = backing

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = self._backing.setdefault(self.session_id, [])
        return list(items[-limit:] if limit else items)

    async def add_items(self, items: list[Any]) -> None:
        self._backing.setdefault(self.session_id, []).extend(items)

    async def pop_item(self) -> Any:
        items = self._backing.setdefault(self.session_id, [])
        return items.pop() if items else None

    async def clear_session(self) -> None:
        self._backing.pop(self.session_id, None)


def test_any_session_uses_the_fallback_store(make_pilot: Any, tmp_path: Path) -> None:
    backing: dict[str, list[Any]] = {}
    fallback = SQLiteStateStore(tmp_path / "state.sqlite")

    async def open_session() -> Any:
        return DictSession("dict-user", backing)

    clock = Clock()

    async def main() -> None:
        for _ in range(2):
            pilot = make_pilot()
            cp = CachePilotAgents(pilot, clock=clock, state_store=fallback)
            session = cp.session(await open_session())
            assert session.store is not fallback  # lazily delegating to it
            model = ScriptedModel(coding_steps(3))
            agent = cp.wrap(Agent(name="x", tools=[read_file], model=model))
            await Runner.run(
                agent, "go", run_config=cp.run_config(), hooks=cp.hooks, session=session
            )
        assert await fallback.load("dict-user") is not None

    asyncio.run(main())


def test_store_selection() -> None:
    memory = MemoryStateStore()
    assert isinstance(state_store_for(SQLiteSession("m"), memory), MemoryStateStore)
    assert state_store_for(object(), memory) is memory
    with pytest.raises(ValueError):
        SQLiteStateStore(":memory:")

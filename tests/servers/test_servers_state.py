"""The Agents plugin's state stores against real PostgreSQL (asyncpg, psycopg) and Redis."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from server_helpers import PrivatePostgres, PrivateRedis, with_driver

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_agents import CachePilotAgents
from cachepilot_agents.state import RedisStateStore, SQLAlchemyStateStore

pytestmark = pytest.mark.timeout(180)

DRIVERS = ["asyncpg", "psycopg"]


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return "\n".join(f"{path}:{i}: value_{i} = {i * 7}" for i in range(400))


def steps(run: int, turns: int = 4) -> list[Any]:
    out: list[Any] = [
        [function_call("read_file", {"path": f"/src/m{run}_{i}.py"}, call_id=f"r{run}c{i}")]
        for i in range(turns)
    ]
    out.append([assistant_message(f"run {run} done")])
    return out


async def _concurrent_saves(store: Any, writers: int = 20) -> list[str]:
    states = [json.dumps({"writer": i, "pad": "x" * 2_000}) for i in range(writers)]
    await asyncio.gather(*(store.save("one-thread", state) for state in states))
    return states


@pytest.mark.parametrize("driver", DRIVERS)
def test_concurrent_saves_of_one_thread(postgres_db: str, driver: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main() -> None:
        engine = create_async_engine(with_driver(postgres_db, driver), pool_size=25)
        try:
            store = SQLAlchemyStateStore(engine)
            for _ in range(3):
                states = await _concurrent_saves(store)
                assert await store.load("one-thread") in states
            await store.delete("one-thread")
            assert await store.load("one-thread") is None
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_portable_replace_under_concurrency(postgres_db: str) -> None:
    """The path for dialects without an upsert: update, else insert, else update again."""
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main() -> None:
        engine = create_async_engine(with_driver(postgres_db, "asyncpg"), pool_size=25)
        try:
            store = SQLAlchemyStateStore(engine)
            store._upsert = lambda values: None  # type: ignore[method-assign]
            states = await _concurrent_saves(store)
            assert await store.load("one-thread") in states
        finally:
            await engine.dispose()

    asyncio.run(main())


@pytest.mark.parametrize("driver", DRIVERS)
def test_concurrent_runs_on_one_sqlalchemy_session(
    postgres_db: str, driver: str, caplog: pytest.LogCaptureFixture
) -> None:
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main() -> None:
        engine = create_async_engine(with_driver(postgres_db, driver), pool_size=20)
        try:
            cp = CachePilotAgents(CachePilot(Config(), store=InMemoryArtifactStore()))
            session = cp.session(SQLAlchemySession("shared", engine=engine, create_tables=True))

            async def one_run(run: int) -> None:
                agent = cp.wrap(Agent(name="x", tools=[read_file], model=ScriptedModel(steps(run))))
                await Runner.run(
                    agent, f"task {run}", run_config=cp.run_config(), hooks=cp.hooks,
                    session=session, max_turns=20,
                )  # fmt: skip

            await asyncio.gather(*(one_run(run) for run in range(4)))
            assert await session.store.load("shared") is not None
        finally:
            await engine.dispose()

    with caplog.at_level(logging.ERROR, logger="cachepilot_agents"):
        asyncio.run(main())
    failed = [r for r in caplog.records if "could not save" in r.getMessage()]
    assert failed == []


def test_restart_mid_run_recovers(private_postgres: PrivatePostgres) -> None:
    """A pooled engine (pre-ping) serves saves again once its own server is back."""
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main() -> None:
        url = with_driver(private_postgres.url, "asyncpg")
        engine = create_async_engine(url, pool_pre_ping=True, pool_size=2)
        try:
            store = SQLAlchemyStateStore(engine)
            await store.save("t", "before")
            await asyncio.to_thread(private_postgres.restart)
            await store.save("t", "after")  # the dead pooled connection is replaced
            assert await store.load("t") == "after"
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_redis_concurrent_saves_and_sessions(redis_url: str) -> None:
    import redis.asyncio as aioredis
    from agents.extensions.memory import RedisSession

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_url)
        prefix = f"cp-test-{id(client)}"
        try:
            store = RedisStateStore(client, prefix=prefix)
            states = await _concurrent_saves(store)
            assert await store.load("one-thread") in states
            cp = CachePilotAgents(CachePilot(Config(), store=InMemoryArtifactStore()))
            session = cp.session(RedisSession("shared", redis_client=client, key_prefix=prefix))

            async def one_run(run: int) -> None:
                agent = cp.wrap(Agent(name="x", tools=[read_file], model=ScriptedModel(steps(run))))
                await Runner.run(
                    agent, f"task {run}", run_config=cp.run_config(), hooks=cp.hooks,
                    session=session, max_turns=20,
                )  # fmt: skip

            await asyncio.gather(*(one_run(run) for run in range(4)))
            assert isinstance(session.store, RedisStateStore)
            assert await client.get(f"{prefix}:shared:cachepilot_state") is not None
            await session.clear_session()
            await store.delete("one-thread")
        finally:
            await client.aclose()

    asyncio.run(main())


def test_redis_restart_mid_run_recovers(private_redis: PrivateRedis) -> None:
    """A client made as the plugin's README says (retry on connection errors) rides over a
    restart of its own server."""
    import redis.asyncio as aioredis
    from redis.exceptions import ConnectionError as RedisConnectionError

    async def main() -> None:
        client = aioredis.Redis.from_url(private_redis.url, retry_on_error=[RedisConnectionError])
        try:
            store = RedisStateStore(client, prefix="p")
            await store.save("t", "before")
            await asyncio.to_thread(private_redis.restart)
            # redis-py reconnects on the next command; the server kept nothing (no persistence).
            await store.save("t", "after")
            assert await store.load("t") == "after"
        finally:
            await client.aclose()

    asyncio.run(main())

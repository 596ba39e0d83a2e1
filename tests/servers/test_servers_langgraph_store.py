"""The LangGraph `PostgresStore` adapter against a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from server_helpers import PrivatePostgres

from cachepilot import CachePilot, Config
from cachepilot.diagnose.metrics import thread_metrics
from cachepilot_langgraph.store import LangGraphArtifactStore

pytestmark = pytest.mark.timeout(180)

pytest.importorskip("langgraph.store.postgres")

BIG = "\n".join(
    f"{i:06d} INFO worker-{i % 7} processed batch {i} in {i % 97} ms" for i in range(4_000)
)
"""About 212 KB of log: far over the bash limit (30,000 characters)."""


def _pooled(url: str) -> Any:
    """The recovering setup: a pool that checks each connection before lending it."""
    from langgraph.store.postgres import PostgresStore
    from psycopg_pool import ConnectionPool

    return PostgresStore.from_conn_string(
        url,
        pool_config={"min_size": 1, "max_size": 8, "check": ConnectionPool.check_connection},
    )


def _ingest(pilot: CachePilot, call: str, thread: str = "t") -> str:
    return pilot.ingest("bash", {"command": f"run {call}"}, BIG + f"\n{call}", call, thread)


def test_single_connection_outage_is_visible_and_bounded(
    private_postgres: PrivatePostgres,
) -> None:
    """`from_conn_string` without a pool never reconnects: the pilot says so and still caps
    what reaches the model."""
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(private_postgres.url) as lg:
        lg.setup()
        pilot = CachePilot(Config(), store=LangGraphArtifactStore(lg))
        first = _ingest(pilot, "c1")
        assert len(first) < 2_000 and 'recall(ref="' in first
        private_postgres.restart()
        during = _ingest(pilot, "c2")
        state = pilot.state("t")
        assert state.archive_failures == 1
        assert thread_metrics(state, "t").archive_failures == 1
        assert len(during) < 31_000  # the size gate held, although nothing could be archived
        assert "archive is unavailable" in during
        assert during.startswith(BIG[:500])


def test_pooled_store_recovers_after_a_restart(private_postgres: PrivatePostgres) -> None:
    with _pooled(private_postgres.url) as lg:
        lg.setup()
        pilot = CachePilot(Config(), store=LangGraphArtifactStore(lg))
        before = _ingest(pilot, "c1")
        private_postgres.restart()
        after = _ingest(pilot, "c2")
        assert len(after) < 2_000 and 'recall(ref="' in after
        assert pilot.state("t").archive_failures == 0
        ref = after.split('recall(ref="', 1)[1][:12]
        assert pilot.recall(ref, lines="1-2", thread="t").endswith(
            "000001 INFO worker-1 processed batch 1 in 1 ms"
        )
        old_ref = before.split('recall(ref="', 1)[1][:12]
        assert "000000 INFO" in pilot.recall(old_ref, lines="1", thread="t")


def test_concurrent_ingests_and_recalls(postgres_db: str) -> None:
    with _pooled(postgres_db) as lg:
        lg.setup()
        pilot = CachePilot(Config(), store=LangGraphArtifactStore(lg))
        errors: list[BaseException] = []
        texts: dict[tuple[str, str], str] = {}

        def worker(thread: str) -> None:
            try:
                for i in range(6):
                    texts[(thread, f"c{i}")] = _ingest(pilot, f"c{i}", thread)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(f"th{n}",)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        assert len(texts) == 48
        for (thread, call), text in texts.items():
            ref = text.split('recall(ref="', 1)[1][:12]
            tail = pilot.recall(ref, lines="4001", thread=thread)
            assert tail.endswith(call), tail
        assert all(pilot.state(f"th{n}").archive_failures == 0 for n in range(8))


def test_async_postgres_store(postgres_db: str) -> None:
    from langgraph.store.postgres import AsyncPostgresStore

    async def main() -> None:
        async with AsyncPostgresStore.from_conn_string(postgres_db) as lg:
            await lg.setup()
            adapter = LangGraphArtifactStore(lg)
            refs = await asyncio.gather(
                *(adapter.aput("a", f"payload {i}" * 100) for i in range(20))
            )
            found = await asyncio.gather(*(adapter.aget("a", ref) for ref in refs))
            assert [a.text for a in found if a is not None] == [
                f"payload {i}" * 100 for i in range(20)
            ]

    asyncio.run(main())

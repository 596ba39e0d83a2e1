"""What `--store` names: where the proxy keeps archived originals and threads' states.

- an SQLite file path: both in that file (`SQLiteArtifactStore`, `SQLiteStateStore`);
- a PostgreSQL URL (`postgresql://user@host:5432/db`): both in that database
  (`SQLArtifactStore` through psycopg, `SQLAlchemyStateStore` through asyncpg; needs
  `cachepilot[postgres]`);
- a Redis URL (`redis://host:6379/0`, `rediss://` for TLS): both in that database
  (`RedisArtifactStore`, `RedisStateStore` under the `cachepilot:proxy` prefix; needs
  `cachepilot[redis]` and a standalone server).

Every kind versions its states, so processes (workers, replicas behind a load balancer) that
share one store agree on each thread (`cachepilot.proxy.memory`).
"""

from __future__ import annotations

import re
from pathlib import Path

from cachepilot.artifacts import ArtifactStore, SQLiteArtifactStore
from cachepilot.state_store import SQLiteStateStore, StateStore

__all__ = ["is_url", "open_stores"]

_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_POSTGRES = ("postgresql", "postgres")
_REDIS = ("redis", "rediss")


def is_url(store: str | Path) -> bool:
    """Whether `--store` names a server by URL rather than an SQLite file."""
    return isinstance(store, str) and _URL.match(store) is not None


def _scheme(url: str) -> tuple[str, str]:
    scheme, rest = url.split("://", 1)
    return scheme.split("+", 1)[0].lower(), rest


def open_stores(store: str | Path) -> tuple[ArtifactStore, StateStore]:
    """The artifact and state stores `--store` names (`ValueError` for an unknown kind)."""
    if not is_url(store):
        return SQLiteArtifactStore(Path(store)), SQLiteStateStore(Path(store))
    scheme, rest = _scheme(str(store))
    if scheme in _POSTGRES:
        try:
            from sqlalchemy.ext.asyncio import create_async_engine

            from cachepilot.artifacts.sql import SQLArtifactStore
            from cachepilot.state_store_sql import SQLAlchemyStateStore
        except ImportError as exc:
            raise ValueError(
                f"a PostgreSQL --store needs the postgres extra: pip install "
                f"'cachepilot[postgres]' ({exc})"
            ) from exc
        artifacts = SQLArtifactStore(f"postgresql+psycopg://{rest}")
        engine = create_async_engine(f"postgresql+asyncpg://{rest}", pool_pre_ping=True)
        return artifacts, SQLAlchemyStateStore(engine, owns_engine=True)
    if scheme in _REDIS:
        return _open_redis(str(store))
    raise ValueError(
        f"--store {scheme}:// is not a kind the proxy knows: give an SQLite file path, a "
        "postgresql:// URL or a redis:// URL"
    )


def _open_redis(url: str) -> tuple[ArtifactStore, StateStore]:
    try:
        import redis
        import redis.asyncio

        from cachepilot.artifacts.redis import RedisArtifactStore
        from cachepilot.state_store_redis import RedisStateStore
    except ImportError as exc:
        raise ValueError(
            f"a Redis --store needs the redis extra: pip install 'cachepilot[redis]' ({exc})"
        ) from exc
    try:
        sync_client = redis.Redis.from_url(url)
        async_client = redis.asyncio.from_url(url)
    except ValueError as exc:
        raise ValueError(f"--store is not a Redis URL redis-py can read: {exc}") from exc
    artifacts = RedisArtifactStore(sync_client)
    return artifacts, RedisStateStore(async_client, prefix="cachepilot:proxy", owns_client=True)

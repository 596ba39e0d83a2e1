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
from collections.abc import Callable
from pathlib import Path
from typing import cast

from cachepilot.artifacts import ArtifactStore, SQLiteArtifactStore
from cachepilot.proxy.deferred import DeferredArtifactStore
from cachepilot.state.base import SQLiteStateStore, StateStore

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


def open_stores(store: str | Path, *, deferred: bool = False) -> tuple[ArtifactStore, StateStore]:
    """The artifact and state stores `--store` names (`ValueError` for an unknown kind or a
    URL that cannot be read).

    `deferred`: the artifact store is opened on first use (`DeferredArtifactStore`), so a
    store that cannot be reached yet does not stop the caller (the state stores connect on
    use anyway); without it, an SQLite file or a PostgreSQL database is opened here.
    """
    if not is_url(store):
        path = Path(store)
        state = SQLiteStateStore(path)
        if deferred:
            return _deferred(lambda: SQLiteArtifactStore(path), "sqlite"), state
        return SQLiteArtifactStore(path), state
    scheme, rest = _scheme(str(store))
    if scheme in _POSTGRES:
        try:
            from sqlalchemy.engine import make_url
            from sqlalchemy.ext.asyncio import create_async_engine

            from cachepilot.artifacts.sql import SQLArtifactStore
            from cachepilot.state.sql import SQLAlchemyStateStore
        except ImportError as exc:
            raise ValueError(
                f"a PostgreSQL --store needs the postgres extra: pip install "
                f"'cachepilot[postgres]' ({exc})"
            ) from exc
        url = f"postgresql+psycopg://{rest}"
        try:
            make_url(url)  # a URL that cannot be read fails here, at start
        except Exception as exc:
            raise ValueError(f"--store is not a PostgreSQL URL SQLAlchemy can read: {exc}") from exc
        engine = create_async_engine(f"postgresql+asyncpg://{rest}", pool_pre_ping=True)
        states = SQLAlchemyStateStore(engine, owns_engine=True)
        if deferred:
            return _deferred(lambda: SQLArtifactStore(url), "postgresql"), states
        return SQLArtifactStore(url), states
    if scheme in _REDIS:
        return _open_redis(str(store))
    raise ValueError(
        f"--store {scheme}:// is not a kind the proxy knows: give an SQLite file path, a "
        "postgresql:// URL or a redis:// URL"
    )


def _deferred(opener: Callable[[], ArtifactStore], name: str) -> ArtifactStore:
    return cast("ArtifactStore", DeferredArtifactStore(opener, name))


def _open_redis(url: str) -> tuple[ArtifactStore, StateStore]:
    try:
        import redis
        import redis.asyncio

        from cachepilot.artifacts.redis import RedisArtifactStore
        from cachepilot.state.redis import RedisStateStore
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

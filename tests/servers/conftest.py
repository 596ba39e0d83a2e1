"""Fixtures of the real-server tests (helpers in `server_helpers`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_helpers import (
    PrivatePostgres,
    PrivateRedis,
    database,
    postgres_url_or_skip,
    redis_url_or_skip,
)


@pytest.fixture
def redis_url() -> str:
    """The shared Redis server (tests use their own key prefixes)."""
    return redis_url_or_skip()


@pytest.fixture
def postgres_db() -> Iterator[str]:
    """A fresh database on the shared PostgreSQL server (libpq URL)."""
    with database(postgres_url_or_skip()) as url:
        yield url


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A Redis server of the test's own (it may restart it)."""
    server = PrivateRedis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of the test's own (it may restart it)."""
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.close()

"""Fixtures for the Agents SDK plugin tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agents_helpers import eager_config

from cachepilot import CachePilot, Config
from cachepilot.artifacts import SQLiteArtifactStore


@pytest.fixture
def make_pilot(tmp_path: Path) -> Iterator[Callable[..., CachePilot]]:
    """Pilots sharing one SQLite archive in `tmp_path` (as two processes would)."""
    stores: list[SQLiteArtifactStore] = []

    def make(config: Config | None = None) -> CachePilot:
        store = SQLiteArtifactStore(tmp_path / "artifacts.sqlite")
        stores.append(store)
        return CachePilot(config or eager_config(), store=store)

    yield make
    for store in stores:
        close = getattr(store, "close", None)
        if callable(close):
            close()

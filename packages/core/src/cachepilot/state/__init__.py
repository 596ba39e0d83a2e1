"""Per-thread pilot states kept between processes: the `StateStore` protocol, memory and
SQLite stores (`base`), SQL through SQLAlchemy (`sql`) and Redis (`redis`). The twin of
`cachepilot.artifacts`.

Part `state` of the core (docs/architecture.md). May import: no other part;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.state.base import (
    MemoryStateStore,
    SQLiteStateStore,
    StateStore,
    VersionedStateStore,
)

__all__ = [
    "MemoryStateStore",
    "SQLiteStateStore",
    "StateStore",
    "VersionedStateStore",
]

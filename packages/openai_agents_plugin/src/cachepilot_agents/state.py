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

import logging
from pathlib import Path

from agents.memory import SQLiteSession

from cachepilot.artifacts import default_store_path
from cachepilot.state.base import MemoryStateStore, SQLiteStateStore, StateStore
from cachepilot.state.redis import RedisStateStore
from cachepilot.state.sql import SQLAlchemyStateStore
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

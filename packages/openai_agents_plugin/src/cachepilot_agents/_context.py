"""Per-run bindings carried in context variables (the SDK passes no session to filters or hooks).

The Agents SDK runs a whole `Runner.run` (session reads, model calls, hooks, tool tasks) in one
asyncio task or in tasks it starts from it, so a context variable set early in a run is seen
by everything later in that run, and never by concurrent runs in other tasks.
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["CURRENT_THREAD", "SESSION_BINDING", "SessionBinding", "next_stamp"]

_STAMPS = itertools.count(1)


def next_stamp() -> int:
    """A process-wide increasing number (orders bindings and run configs)."""
    return next(_STAMPS)


@dataclass(frozen=True, slots=True)
class SessionBinding:
    """A cachepilot session used by the current run."""

    owner: int
    """`id()` of the `CachePilotAgents` that made the session."""
    thread: str
    """The session's thread (its `session_id`)."""
    stamp: int
    """When the session was last used (`next_stamp`)."""


SESSION_BINDING: ContextVar[SessionBinding | None] = ContextVar(
    "cachepilot_agents_session", default=None
)
"""Set by `CachePilotSession` whenever the SDK reads or writes it."""

CURRENT_THREAD: ContextVar[tuple[int, str] | None] = ContextVar(
    "cachepilot_agents_thread", default=None
)
"""(owner id, thread) of the latest model call, set by the input filter; read by the tool
wrappers and the hooks of the same run."""

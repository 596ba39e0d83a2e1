"""Per-run bindings carried in context variables (the SDK passes no session to filters or models).

The Agents SDK runs a whole `Runner.run` (session reads, model calls, hooks, tool tasks) in one
asyncio task or in tasks it starts from it, so a context variable set early in a run is seen
by everything later in that run, and never by concurrent runs in other tasks. Values also
carry the run they belong to, so a run that follows another in the same task never reads
the previous run's binding.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from cachepilot_agents.exchanges import Anchor

__all__ = [
    "PREPARED",
    "SESSION_BINDING",
    "PreparedCall",
    "SessionBinding",
    "next_stamp",
]

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
    run: int | None
    """`id()` of the SDK run that used it (None when the SDK does not say)."""
    compacting: bool = False
    """The session compacts its own history (the model must read it exactly)."""


SESSION_BINDING: ContextVar[SessionBinding | None] = ContextVar(
    "cachepilot_agents_session", default=None
)
"""Set by `CachePilotSession` whenever the SDK reads or writes it."""


Rebuild = Callable[[], Awaitable[tuple[str | None, list[Any]] | None]]


@dataclass(slots=True)
class PreparedCall:
    """What the input filter decided for the model call that follows it."""

    owner: int
    """`id()` of the `CachePilotAgents`."""
    thread: str
    """The call's thread."""
    recall: bool
    """Whether the model may be offered `recall` (its model is the plugin's wrapper)."""
    refs: bool
    """Whether the view names a ref (a reduced result, an exchange, a stub or a fold)."""
    instructions: str | None
    """The instructions handed to the model."""
    last_item: object | None
    """The last input item handed to the model (identity marks the call)."""
    anchor: Anchor | None
    """Where recall exchanges of this call go in later views."""
    agent: str
    """Name of the agent."""
    rebuild: Rebuild | None = None
    """After an emergency fold: the call's new (instructions, input), or None."""
    strip_reasoning_ids: bool = False
    """The run omits reasoning item ids from model input (`reasoning_item_id_policy`)."""


PREPARED: ContextVar[PreparedCall | None] = ContextVar("cachepilot_agents_prepared", default=None)
"""Set by the input filter; read by the model wrapper of the same call."""

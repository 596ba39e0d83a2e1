"""Where a thread's `PilotState` lives in LangGraph state, and how parallel updates merge."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any, NotRequired

from langchain_core.runnables import RunnableConfig

# LangGraph's `MessagesState` is a typing_extensions TypedDict; on Python < 3.12 it cannot be
# combined with a `typing.TypedDict`.
from typing_extensions import TypedDict

from cachepilot import CachePilot
from cachepilot.support.log_labels import thread_label

__all__ = [
    "PILOT_STATE_KEY",
    "SCOPE_KEY",
    "PilotStateMixin",
    "configured_thread",
    "newest_pilot_state",
    "scoped",
    "sync_pilot_state",
    "thread_of",
]

logger = logging.getLogger(__name__)

PILOT_STATE_KEY = "cachepilot"
"""Graph state key holding `PilotState.model_dump(mode="json")`."""

SCOPE_KEY = "cachepilot_scope"
"""Graph state key holding the scope of a run that has no `thread_id` of its own."""


def newest_pilot_state(
    left: Mapping[str, Any] | None, right: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """Reducer for the pilot-state key: of two copies, keep the one with the higher revision.

    Parallel tool calls of one step each write the state; every copy is exported under the
    pilot's lock after its change, so the highest revision contains all of them.
    """
    if right is None:
        return left
    if left is None or not isinstance(left, Mapping) or not isinstance(right, Mapping):
        return right
    left_rev = left.get("revision", 0)
    right_rev = right.get("revision", 0)
    if not isinstance(left_rev, int) or not isinstance(right_rev, int):
        return right
    return right if right_rev >= left_rev else left


class PilotStateMixin(TypedDict):
    """Add to a hand-built graph's state (`class State(MessagesState, PilotStateMixin)`)."""

    cachepilot: NotRequired[Annotated[dict[str, Any] | None, newest_pilot_state]]


def configured_thread(config: RunnableConfig | None) -> str | None:
    """The LangGraph `thread_id` of a run's config, if it has one."""
    if not config:
        return None
    found = (config.get("configurable") or {}).get("thread_id")
    return str(found) if found is not None and str(found) else None


def scoped(thread: str, namespace: str | None = None) -> str:
    """`thread` prefixed by `namespace` (several agents sharing one pilot and thread ids)."""
    return f"{namespace}:{thread}" if namespace else thread


def thread_of(config: RunnableConfig | None, namespace: str | None = None) -> str | None:
    """The cachepilot thread of a run with a LangGraph `thread_id` (prefixed by `namespace`
    when several agents share one pilot and one thread id); None for a run without one, which
    must get a scope of its own (never a shared one)."""
    thread = configured_thread(config)
    return scoped(thread, namespace) if thread is not None else None


def sync_pilot_state(pilot: CachePilot, thread: str, persisted: object) -> None:
    """Make the pilot's live state for `thread` the one persisted in graph state.

    Graph state is the source of truth: a checkpoint resumed in a new process, a fork from
    an older checkpoint or another worker's newer state is loaded; when the revisions match,
    nothing is done (the common case within a run). A missing or unreadable value starts the
    thread fresh (logged when it was unreadable).
    """
    pilot.mark_persisted(thread)  # graph state keeps it: the pilot may let it leave memory
    live = pilot.state(thread)
    if persisted is None:
        if live.revision != 0:
            pilot.load_state(thread, {})
        return
    if not isinstance(persisted, Mapping):
        logger.warning(
            "thread %s: graph state %r is not a pilot state; starting fresh",
            thread_label(thread),
            PILOT_STATE_KEY,
        )
        pilot.load_state(thread, {})
        return
    if persisted.get("revision") == live.revision and live.revision != 0:
        return
    try:
        pilot.load_state(thread, persisted)
    except ValueError:
        logger.warning(
            "thread %s: unreadable pilot state in graph state; starting fresh",
            thread_label(thread),
            exc_info=True,
        )
        pilot.load_state(thread, {})

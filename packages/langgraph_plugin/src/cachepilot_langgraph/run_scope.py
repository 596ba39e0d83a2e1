"""The scope of a hand-built graph's run that has no `thread_id`.

A run with a `thread_id` works in that thread. A run without one (a stateless server) gets a
scope of its own, never a shared one: its archive, frozen prompt values and plan are seen by
no other run, however many run at once.

The pieces of a hand-built graph cannot all read graph state (a chat model sees only its
messages, a reducer not even a config), and message or tool call ids are not unique when a
model makes them up. What every piece of one run does see is the run's LangGraph runtime:
each graph invocation gets its own `RunControl` (shared by its nodes, tools and subgraphs),
so the scope is keyed by that object's identity. Scopes are bounded per pilot: beyond the
limit the least recently used one is dropped with its live state and its archive.

A `control=` passed by the caller to several invocations makes them one run (LangGraph asks
for a fresh `RunControl` per run).
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from cachepilot import CachePilot
from cachepilot_langgraph._framework_private import runtime_of
from cachepilot_langgraph.state import scoped

__all__ = ["RUN_SCOPES_MAX", "RUN_SCOPE_PREFIX", "RunScopes", "run_token"]

logger = logging.getLogger(__name__)

RUN_SCOPES_MAX = 1_024
"""Default bound on live scopes of runs without a thread, per pilot."""

RUN_SCOPE_PREFIX = "run-"
"""Start of a run scope's name (followed by 32 random hex digits)."""

_WARNED: list[bool] = []


def run_token(config: RunnableConfig | Mapping[str, Any] | None) -> object | None:
    """The object identifying the graph invocation `config` belongs to (None outside one)."""
    runtime = runtime_of(config)
    if runtime is None:
        return None
    control = getattr(runtime, "control", None)
    if control is None and not _WARNED:
        _WARNED.append(True)
        # Isolation holds (every call gets a fresh scope); continuity within a run does not.
        logger.warning(
            "this LangGraph has no run control: a run without a thread_id gets a new scope "
            "on every step (refs of earlier steps are not found); pass a thread_id"
        )
    return control


class RunScopes:
    """The live scopes of runs without a thread, for one pilot.

    Args:
        pilot: the pilot whose memory and archive the scopes use.
        limit: how many may be live; beyond it the least recently used is dropped.
    """

    def __init__(
        self,
        pilot: CachePilot,
        limit: int = RUN_SCOPES_MAX,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        # Weak: the pilot's link holds this object and must not keep the pilot alive.
        self._pilot = weakref.ref(pilot)
        self.on_drop: Callable[[str], None] | None = None
        """Called with each dropped scope (the components' own bookkeeping)."""
        self._lock = threading.Lock()
        # (id of the run token, namespace) -> (token, scope). The token is held so its id is
        # not reused while the entry lives; `RunControl` cannot be weakly referenced.
        self._live: OrderedDict[tuple[int, str | None], tuple[object, str]] = OrderedDict()
        self.limit = limit

    def resolve(
        self,
        config: RunnableConfig | Mapping[str, Any] | None,
        namespace: str | None,
        *,
        create: bool = True,
    ) -> str | None:
        """The scope of the run `config` belongs to.

        Outside a graph invocation (no runtime) every call is a run of its own: a fresh
        scope when `create`, else None. Inside one, the run's scope, made on first use when
        `create`.
        """
        token = run_token(config)
        if token is None:
            return self._new(object(), namespace) if create else None
        key = (id(token), namespace)
        with self._lock:
            found = self._live.get(key)
            if found is not None and found[0] is token:
                self._live.move_to_end(key)
                return found[1]
        return self._new(token, namespace) if create else None

    def _new(self, token: object, namespace: str | None) -> str:
        scope = scoped(f"{RUN_SCOPE_PREFIX}{uuid.uuid4().hex}", namespace)
        key = (id(token), namespace)
        evicted: list[str] = []
        with self._lock:
            found = self._live.get(key)
            if found is not None and found[0] is token:  # another piece of the run won the race
                self._live.move_to_end(key)
                return found[1]
            if found is not None:  # a dead token's id was reused
                evicted.append(found[1])
            self._live[key] = (token, scope)
            while len(self._live) > self.limit:
                evicted.append(self._live.popitem(last=False)[1][1])
        for old in evicted:
            self._drop(old)
        return scope

    def is_live(self, scope: str) -> bool:
        """True when `scope` is a live run scope."""
        with self._lock:
            return any(entry[1] == scope for entry in self._live.values())

    def live(self) -> list[str]:
        """The live run scopes, least recently used first."""
        with self._lock:
            return [entry[1] for entry in self._live.values()]

    def release(self, scope: str) -> None:
        """Drop `scope` now (its run ended): live state, caches and archive."""
        with self._lock:
            keys = [k for k, entry in self._live.items() if entry[1] == scope]
            for key in keys:
                del self._live[key]
        self._drop(scope)

    def _drop(self, scope: str) -> None:
        logger.debug("run scope %s dropped", scope)
        if self.on_drop is not None:
            self.on_drop(scope)
        pilot = self._pilot()
        if pilot is not None:
            pilot.drop_thread(scope)

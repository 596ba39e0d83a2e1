"""Which `Runner` run is executing, and scopes that live exactly as long as one run.

A run with no thread of its own (no session, no pinned thread, no group id) must not share a
thread with other runs: its archive, frozen values and plan would leak between users. It gets
a scope of its own, created at its first model call and dropped when the run ends.

The SDK gives filters and models no run object. It does keep one per run in a context
variable for the whole `Runner.run` / `Runner.run_streamed` (its tool-configuration guard), and
that is what `current_run()` reads (a private name: `cachepilot_agents._sdk_private`); on SDK
versions without it, `current_run()` returns None and callers fall back to one scope per run
config.
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from cachepilot.support.log_labels import thread_label
from cachepilot_agents._sdk_private import current_run

__all__ = ["RunScopes", "current_run"]

logger = logging.getLogger(__name__)


class RunScopes:
    """One scope (thread id) per run, released when the run ends.

    Release happens when the run's model cleanup runs (`end`), or at the latest when the SDK
    drops its run object (a weak-reference finalizer). The live count is also bounded: past
    `max_live` the oldest scope is released (a server that leaks runs cannot leak memory).

    Args:
        release: called once with each scope that ends.
        prefix: prefix of the scope ids.
        max_live: bound on live scopes.
    """

    def __init__(
        self, release: Callable[[str], None], *, prefix: str = "run", max_live: int = 10_000
    ) -> None:
        self._release = release
        self._prefix = prefix
        self._max_live = max_live
        self._lock = threading.Lock()
        self._live: OrderedDict[int, tuple[weakref.ref[Any], str, weakref.finalize[Any, Any]]] = (
            OrderedDict()
        )

    def scope(self, run: object) -> str:
        """The scope of `run` (created on first use)."""
        key = id(run)
        evicted: list[str] = []
        with self._lock:
            found = self._live.get(key)
            if found is not None and found[0]() is run:
                return found[1]
            scope = f"{self._prefix}-{uuid.uuid4().hex[:16]}"
            finalizer = weakref.finalize(run, self._finish, key, scope)
            finalizer.atexit = False
            self._live[key] = (weakref.ref(run), scope, finalizer)
            while len(self._live) > self._max_live:
                _, (_, old, old_finalizer) = self._live.popitem(last=False)
                old_finalizer.detach()
                evicted.append(old)
        for old in evicted:
            logger.warning("more than %d runs alive: scope %s released early", self._max_live, old)
            self._call_release(old)
        return scope

    def known(self, run: object) -> str | None:
        """The scope of `run` if it has one."""
        with self._lock:
            found = self._live.get(id(run))
            return found[1] if found is not None and found[0]() is run else None

    def end(self, run: object) -> str | None:
        """Release the scope of `run` now (its end); returns the released scope."""
        with self._lock:
            found = self._live.get(id(run))
            if found is None or found[0]() is not run:
                return None
            del self._live[id(run)]
            found[2].detach()
        self._call_release(found[1])
        return found[1]

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)

    def _finish(self, key: int, scope: str) -> None:
        with self._lock:
            found = self._live.get(key)
            if found is None or found[1] != scope:
                return
            del self._live[key]
        self._call_release(scope)

    def _call_release(self, scope: str) -> None:
        try:
            self._release(scope)
        except Exception:  # a finalizer must never raise
            logger.warning("scope %s: release failed", thread_label(scope), exc_info=True)

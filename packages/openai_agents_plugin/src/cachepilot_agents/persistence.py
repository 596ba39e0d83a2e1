"""Where a thread's pilot state and recall exchanges are kept between processes.

A session's thread keeps its `PilotState` in the session's companion store
(`state.state_store_for`), loaded once per process when the thread is first used and saved
whenever it changed; its recall exchanges are archived (`kind="recall-exchange"`) and come
back with the state. Threads without a session (a group id, a pinned thread, a run's own
scope) live in process memory only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

from cachepilot import CachePilot
from cachepilot.support.log_labels import thread_label
from cachepilot_agents.exchanges import EXCHANGE_KIND, Exchange, ExchangeBook
from cachepilot_agents.session import CachePilotSession
from cachepilot_agents.state import StateStore, state_store_for

__all__ = ["ThreadPersistence"]

logger = logging.getLogger(__name__)


class ThreadPersistence:
    """Loads and saves the state (and recall exchanges) of session threads.

    Args:
        pilot: the pilot whose states are kept.
        exchanges: the plugin's recall exchanges.
        fallback: the store of sessions that have no companion store of their own (called
            only when such a session is used).
    """

    def __init__(
        self, pilot: CachePilot, exchanges: ExchangeBook, fallback: Callable[[], StateStore]
    ) -> None:
        self._pilot = pilot
        self._exchanges = exchanges
        self._fallback = fallback
        self._stores: dict[str, StateStore] = {}
        self._loaded: set[str] = set()
        self._saved: dict[str, str] = {}
        self._companions: weakref.WeakKeyDictionary[Any, StateStore] = weakref.WeakKeyDictionary()

    def companion(self, session: object) -> StateStore:
        """The companion store of `session`."""
        return state_store_for(session, _LazyStore(self._fallback))

    def persists(self, thread: str) -> bool:
        """Whether `thread` is kept in a store."""
        return thread in self._stores

    async def attach_session(self, thread: str, session: object) -> None:
        """Keep `thread`'s state beside `session`; load it once."""
        if isinstance(session, CachePilotSession):
            await self.attach(thread, session.store)
            return
        try:
            store = self._companions.get(session)
        except TypeError:  # not weak-referenceable
            store = None
        if store is None:
            store = self.companion(session)
            with contextlib.suppress(TypeError):  # not weak-referenceable: not memoised
                self._companions[session] = store
        await self.attach(thread, store)

    async def attach(self, thread: str, store: StateStore) -> None:
        """Keep `thread`'s state in `store`; load it (and its recall exchanges) once."""
        self._stores[thread] = store
        if thread in self._loaded and self._pilot.holds(thread):
            return
        self._loaded.add(thread)
        self._saved.pop(thread, None)
        self._pilot.mark_persisted(thread)  # the store keeps it: it may leave memory
        await self._load_exchanges(thread)
        try:
            text = await store.load(thread)
        except Exception:
            logger.error(
                "thread %s: could not load the saved pilot state",
                thread_label(thread),
                exc_info=True,
            )
            return
        if text:
            try:
                self._pilot.load_state(thread, text)
            except Exception:
                logger.error(
                    "thread %s: saved pilot state unreadable; starting fresh", thread_label(thread)
                )
                return
            self._saved[thread] = text
            logger.info("thread %s: pilot state restored", thread_label(thread))

    async def save(self, thread: str) -> None:
        """Save `thread`'s state to its store (when it has one and the state changed)."""
        store = self._stores.get(thread)
        if store is None:
            return
        try:
            text = self._pilot.state(thread).model_dump_json()
            if self._saved.get(thread) == text:
                return
            await store.save(thread, text)
            self._saved[thread] = text
        except Exception:
            logger.error(
                "thread %s: could not save the pilot state", thread_label(thread), exc_info=True
            )

    async def forget(self, thread: str, store: StateStore) -> None:
        """Drop `thread`'s state (live and saved) and its recall exchanges."""
        try:
            await store.delete(thread)
        except Exception:
            logger.error(
                "thread %s: could not delete the saved state", thread_label(thread), exc_info=True
            )
        self._pilot.drop_thread(thread, artifacts=False)
        self._saved.pop(thread, None)
        self._exchanges.forget(thread)
        try:
            for info in await asyncio.to_thread(self._pilot.store.list, thread):
                if info.meta.get("kind") == EXCHANGE_KIND:
                    await asyncio.to_thread(self._pilot.store.delete, thread, info.ref)
        except Exception:
            logger.warning(
                "thread %s: recall exchanges not deleted", thread_label(thread), exc_info=True
            )

    async def archive_exchange(self, thread: str, exchange: Exchange) -> None:
        """Archive a recall exchange of a thread that persists (others keep it in memory)."""
        if thread not in self._stores:
            return
        try:
            await asyncio.to_thread(
                self._pilot.store.put,
                thread,
                exchange.to_json(),
                meta={"kind": EXCHANGE_KIND, "seq": exchange.seq},
                media_type="application/json",
            )
        except Exception:
            logger.warning(
                "thread %s: recall exchange not archived", thread_label(thread), exc_info=True
            )

    async def _load_exchanges(self, thread: str) -> None:
        try:
            infos = await asyncio.to_thread(self._pilot.store.list, thread)
            found: list[Exchange] = []
            for info in infos:
                if info.meta.get("kind") != EXCHANGE_KIND:
                    continue
                artifact = await asyncio.to_thread(self._pilot.store.get, thread, info.ref)
                parsed = Exchange.from_json(artifact.text) if artifact is not None else None
                if parsed is not None:
                    found.append(parsed)
        except Exception:
            logger.warning(
                "thread %s: recall exchanges not restored", thread_label(thread), exc_info=True
            )
            return
        if found:
            self._exchanges.load(thread, found)


class _LazyStore:
    """The fallback store, opened only when a session actually uses it."""

    def __init__(self, fallback: Callable[[], StateStore]) -> None:
        self._fallback = fallback

    async def load(self, thread: str) -> str | None:
        """Delegate."""
        return await self._fallback().load(thread)

    async def save(self, thread: str, state: str) -> None:
        """Delegate."""
        await self._fallback().save(thread, state)

    async def delete(self, thread: str) -> None:
        """Delegate."""
        await self._fallback().delete(thread)

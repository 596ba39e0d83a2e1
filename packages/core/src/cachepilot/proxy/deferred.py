"""An artifact store opened on first use: a proxy starts while its store cannot be reached.

The SQLite and SQL artifact stores open their file or database, and make their tables, when
they are made. A proxy started while its store is down (a PostgreSQL server still starting, a
volume not mounted yet, a directory not yet writable) would stop there. Deferred, the store is
opened when the proxy first needs it (`ProxyEngine.secret`, before any request is prepared),
and again on each later need until it opens; meanwhile requests get a 503 with `Retry-After`
and nothing is sent upstream, as during any outage of the store.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from cachepilot.artifacts import ArtifactStore
from cachepilot.proxy.secret import Secret, SecretUnavailableError, load_secret
from cachepilot.state.base import StateStore

__all__ = ["DeferredArtifactStore", "StoreOpener"]

logger = logging.getLogger(__name__)


class DeferredArtifactStore:
    """The store `opener` makes, made on first use (see the module docstring).

    Args:
        opener: makes the real store (may raise while the store cannot be reached).
        name: what `repr` shows (no credentials).
    """

    def __init__(self, opener: Callable[[], ArtifactStore], name: str) -> None:
        self._opener = opener
        self._name = name
        self._store: ArtifactStore | None = None
        self._lock = threading.Lock()

    @property
    def opened(self) -> bool:
        """Whether the real store has been made."""
        return self._store is not None

    def open(self) -> ArtifactStore:
        """The real store, made now if it was not yet (its error raised while it cannot be)."""
        store = self._store
        if store is None:
            with self._lock:
                if self._store is None:
                    self._store = self._opener()
                store = self._store
        return store

    def __getattr__(self, name: str) -> Any:
        # Only attributes this class lacks come here: every store operation opens the store.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.open(), name)

    def close(self) -> None:
        """Close the real store if it was made."""
        if self._store is not None:
            self._store.close()

    def __repr__(self) -> str:
        state = "open" if self.opened else "not opened yet"
        return f"DeferredArtifactStore({self._name}, {state})"


class StoreOpener:
    """Opens the proxy's stores when first needed: the deferred archive, then the secret.

    Args:
        artifacts: the archive (opened here when it is a `DeferredArtifactStore`).
        states: the state store the secret lives in (None: a process-local secret).
    """

    def __init__(self, artifacts: ArtifactStore | None, states: StateStore | None) -> None:
        self._artifacts = artifacts
        self._states = states
        self._refused = False

    async def secret(self) -> Secret:
        """Open the archive if it waited for its first use, then load the store's secret;
        `SecretUnavailableError` while either cannot be had (asked again on the next call)."""
        archive: Any = self._artifacts
        if isinstance(archive, DeferredArtifactStore):
            try:
                await asyncio.to_thread(archive.open)
            except Exception as exc:
                self._refused = True
                logger.warning(
                    "the artifact store cannot be opened (%s); requests are answered 503 "
                    "until it can",
                    type(exc).__name__,
                )
                logger.debug("the artifact store's error", exc_info=True)
                raise SecretUnavailableError("the proxy's store is unavailable") from exc
        try:
            secret = await load_secret(self._states)
        except SecretUnavailableError:
            self._refused = True
            raise
        if self._refused:
            logger.warning("the proxy's store answers again: requests are served")
            self._refused = False
        return secret

    async def check(self) -> bool:
        """`secret` at start: True when the store answers; else a clear log line, and the
        proxy serves anyway, answering 503 with Retry-After (nothing sent upstream) until
        the store answers."""
        try:
            await self.secret()
        except SecretUnavailableError:
            logger.warning(
                "the proxy's store cannot be reached at start; serving anyway: requests are "
                "answered 503 with Retry-After (nothing is sent upstream) until it answers"
            )
            return False
        return True

"""The shared part of `CachePilot`: settings, the artifact store, per-thread state and caches."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from typing import TYPE_CHECKING, Any

from cachepilot.artifacts import ArtifactStore, SQLiteArtifactStore, default_store_path
from cachepilot.artifacts.base import check_thread
from cachepilot.canonical import (
    Canonicalizer,
    CanonicalState,
    canonical_json,
    canonicalize_tool,
    tool_fingerprint,
)
from cachepilot.canonical import tool_name as schema_name
from cachepilot.config import Config
from cachepilot.fold import Summarizer
from cachepilot.fold.ahead import AheadNotes
from cachepilot.lifecycle import Estimator, RuleEstimator
from cachepilot.maintenance.view_cache import ViewCache
from cachepilot.messages import KeyTracker, Message, PairingIssue, missing_results
from cachepilot.pilot.events import LoopHook
from cachepilot.pilot.state import PilotState
from cachepilot.recall.tool import RECALL_TOOL_NAME, RECALL_TOOL_SCHEMA
from cachepilot.reduce import Pipeline
from cachepilot.reduce.views import ResultViews
from cachepilot.support.log_labels import thread_label
from cachepilot.tokens import TokenCounter

if TYPE_CHECKING:
    from cachepilot.compress import ObservationCompressor

__all__ = ["PilotBase", "check_pilot_thread", "check_request"]

logger = logging.getLogger(__name__)


class PilotBase:
    """The parts every step of a `CachePilot` shares: config, store, per-thread state and the
    per-thread caches, and the helpers of more than one step (canonical view, tool list)."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        store: ArtifactStore | None = None,
        estimator: Estimator | None = None,
        summarizer: Summarizer | None = None,
        compressor: ObservationCompressor | None = None,
        on_loop: LoopHook | None = None,
    ) -> None:
        self.config = config or Config()
        self._on_loop = on_loop
        self._store = store
        self._store_lock = threading.Lock()
        self._states: dict[str, PilotState] = {}
        # Threads by last use (oldest first), for the memory bounds; states of threads in
        # `_persisted` are kept by the caller too, so they may leave memory as well.
        self._recent: OrderedDict[str, int] = OrderedDict()
        self._cache_bytes = 0
        self._persisted: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.RLock()
        self._pipeline = Pipeline(self.config.reduction)
        self._canonicalizer = Canonicalizer(self.config.canonical)
        self._warned_pairing: set[str] = set()
        # Per-thread caches that make a call cost O(new messages); never part of the state.
        self._trackers: dict[str, KeyTracker] = {}
        self._views: dict[str, ViewCache] = {}
        self._tool_tokens: dict[str, int] = {}
        self._fingerprints: dict[tuple[int, ...], tuple[tuple[Mapping[str, Any], ...], str]] = {}
        self._estimator: Estimator = estimator or RuleEstimator()
        self._summarizer = summarizer
        self._compressor = compressor
        self._archive_down = False  # the last archive attempt failed (logged once per outage)
        # The recall tool's schema with sorted keys, one object per pilot (sent every call).
        self._recall_tool: dict[str, Any] = canonicalize_tool(RECALL_TOOL_SCHEMA)
        self._result_views = ResultViews(skip=(RECALL_TOOL_NAME,))
        # The last prepared request of each thread, for folds computed ahead (`precompute`).
        self._ahead_notes = AheadNotes(self.config.max_threads_in_memory)
        self._ahead_worker: ThreadPoolExecutor | None = None  # `precompute_soon`'s, lazily
        self._ahead_lock = threading.Lock()
        self._ahead_queued = 0

    @property
    def store(self) -> ArtifactStore:
        """The artifact store (the default SQLite store is opened here on first use)."""
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = SQLiteArtifactStore(default_store_path())
        return self._store

    @property
    def has_store(self) -> bool:
        """True when a store was given or the default one has been opened."""
        return self._store is not None

    def use_store_if_unset(self, store: ArtifactStore) -> bool:
        """Install `store` unless the pilot already has one (given or opened).

        Plugins call it to route artifacts to their framework's own store (e.g. a LangGraph
        `BaseStore`) when the user did not choose one. Returns True when `store` was installed.
        """
        with self._store_lock:
            if self._store is not None:
                return False
            self._store = store
            return True

    def state(self, thread: str = "default") -> PilotState:
        """The live state of a thread (created empty on first use)."""
        check_pilot_thread(thread)
        with self._lock:
            found = self._states.get(thread)
            if found is None:
                found = PilotState()
                self._states[thread] = found
            return found

    def holds(self, thread: str) -> bool:
        """Whether the thread's state is in memory (False after `drop_thread`, `forget`, or an
        eviction of a persisted thread's state: give it back with `load_state`)."""
        with self._lock:
            return thread in self._states

    def mark_persisted(self, thread: str) -> None:
        """Say that the caller keeps `thread`'s state (graph state, a state store) and gives it
        back with `load_state` whenever `holds(thread)` is False: the pilot may then drop it
        from memory when the thread is among the least recently used
        (`Config.max_threads_in_memory`, `Config.max_cache_bytes`). Other threads' states
        stay in memory until `drop_thread`."""
        check_pilot_thread(thread)
        with self._lock:
            self._persisted.setdefault(thread, time.monotonic())

    def _used(self, thread: str, cache: ViewCache | None) -> None:
        """Note a call of `thread` and keep memory within the bounds (call with the lock).

        Caches go least recently used first once there are more than
        `max_threads_in_memory` of them or they hold more than `max_cache_bytes`; states the
        caller keeps (`mark_persisted`) go, oldest first, once there are more states than
        `max_threads_in_memory` and theirs has been idle for `state_idle_seconds`.
        """
        size = cache.approx_bytes if cache is not None else 0
        self._cache_bytes += size - self._recent.pop(thread, 0)
        self._recent[thread] = size
        limit, budget = self.config.max_threads_in_memory, self.config.max_cache_bytes
        while len(self._recent) > 1 and (len(self._recent) > limit or self._cache_bytes > budget):
            self._drop_caches(next(iter(self._recent)))
        now = time.monotonic()
        if thread in self._persisted:
            self._persisted.move_to_end(thread)
            self._persisted[thread] = now
        idle = now - self.config.state_idle_seconds
        while len(self._states) > limit and self._persisted:
            oldest, last = next(iter(self._persisted.items()))
            if last > idle or oldest == thread:
                break
            self._persisted.pop(oldest)
            self._drop_caches(oldest)
            self._states.pop(oldest, None)
            self._warned_pairing.discard(oldest)

    def _drop_caches(self, thread: str) -> None:
        """Drop a thread's caches (rebuilt from its state on its next call; with the lock)."""
        self._cache_bytes -= self._recent.pop(thread, 0)
        self._trackers.pop(thread, None)
        self._views.pop(thread, None)
        self._result_views.forget(thread)
        self._ahead_notes.drop(thread)

    def load_state(self, thread: str, state: PilotState | Mapping[str, Any] | str) -> PilotState:
        """Install a thread's state from persistence (model, dict or JSON text)."""
        check_pilot_thread(thread)
        if isinstance(state, str):
            loaded = PilotState.model_validate_json(state)
        elif isinstance(state, PilotState):
            loaded = state.model_copy(deep=True)
        else:
            loaded = PilotState.model_validate(state)
        with self._lock:
            self._states[thread] = loaded
        return loaded

    def drop_thread(self, thread: str, *, artifacts: bool = True) -> None:
        """Forget a thread: its live state and caches, and (by default) its archived data.

        For scopes that end with their run (a request without a thread of its own) and for a
        user deleting a conversation. Persisted copies of the state (graph state, sessions)
        belong to the framework and are not touched. Never raises on a store failure (logged).
        """
        check_pilot_thread(thread)
        with self._lock:
            self._cache_bytes -= self._recent.pop(thread, 0)
            self._states.pop(thread, None)
            self._trackers.pop(thread, None)
            self._views.pop(thread, None)
            self._warned_pairing.discard(thread)
            self._persisted.pop(thread, None)
        self._result_views.forget(thread)
        self._ahead_notes.drop(thread)
        if artifacts and self.has_store:
            try:
                self.store.delete_thread(thread)
            except Exception:
                logger.warning(
                    "thread %s: archived data not deleted", thread_label(thread), exc_info=True
                )

    def forget(self, thread: str) -> None:
        """Forget a thread wherever the pilot keeps it: its live state, views and caches, and
        its archived originals; a later recall of one of its refs says it was removed.

        Unlike `drop_thread`, a store failure raises: the caller must know the data may remain.
        Persisted copies of the state that belong to the framework (graph state, sessions,
        the proxy's state store) are the caller's to delete.
        """
        self.drop_thread(thread, artifacts=False)
        store = self.store
        forget_thread = getattr(store, "forget_thread", None)
        if callable(forget_thread):
            forget_thread(thread)
        else:  # a store of another kind: no tombstone, the artifacts go all the same
            store.delete_thread(thread)

    async def aforget(self, thread: str) -> None:
        """Async twin of `forget`."""
        await asyncio.to_thread(self.forget, thread)

    def export_state(self, thread: str = "default") -> dict[str, Any]:
        """A JSON-ready copy of a thread's state."""
        return self.state(thread).model_dump(mode="json")

    def _canonical(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        frozen: CanonicalState,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """The request canonicalized against `frozen` (as given when canonicalization is off)."""
        if self.config.canonicalize:
            return self._canonicalizer.apply(system, messages, tools, frozen)
        return system, list(messages), tools

    def _fingerprint(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """`tool_fingerprint`, memoised for the very tool objects the canonicalizer reuses."""
        memo_key = tuple(id(t) for t in tools)
        hit = self._fingerprints.get(memo_key)
        if hit is not None and all(a is b for a, b in zip(hit[0], tools, strict=True)):
            return hit[1]
        fingerprint = tool_fingerprint(tools)
        self._fingerprints[memo_key] = (tuple(tools), fingerprint)
        if len(self._fingerprints) > 64:
            self._fingerprints.pop(next(iter(self._fingerprints)))
        return fingerprint

    def _tools_tokens(self, tools: Sequence[Mapping[str, Any]], counter: TokenCounter) -> int:
        fingerprint = self._fingerprint(tools)
        known = self._tool_tokens.get(fingerprint)
        if known is None:
            known = sum(counter.count(canonical_json(t)) for t in tools)
            self._tool_tokens[fingerprint] = known
        return known

    def _with_recall(
        self, tools: Sequence[Mapping[str, Any]], recall: bool | None = None
    ) -> list[dict[str, Any]]:
        """Shallow copies of `tools`, plus the recall tool when it is offered and not there."""
        out = [dict(t) for t in tools]
        offer = self.config.recall_tool if recall is None else recall
        if offer and RECALL_TOOL_NAME not in {schema_name(t) for t in out}:
            out.append(self._recall_tool)
        return out

    def _pairing_issues(
        self, cache: ViewCache, view: Sequence[Message], thread: str
    ) -> tuple[list[PairingIssue], list[tuple[int, Message]]]:
        """The pairing issues of `view` to report (once per thread: none after that), and
        the synthetic results its unanswered calls need (`missing_results`)."""
        try:
            issues = cache.pairing_issues(view)  # incremental: the new messages only
        except Exception:  # a check must never cost the turn
            logger.warning("thread %s: pairing check failed", thread_label(thread), exc_info=True)
            return [], []
        missing = missing_results(view, issues) if issues else []
        if thread in self._warned_pairing:
            return [], missing
        if issues:
            self._warned_pairing.add(thread)
        return issues, missing


def check_pilot_thread(thread: object) -> None:
    check_thread(thread)  # the stores' rule: a non-empty str, encodable as UTF-8


def check_request(system: object, messages: object, tools: object) -> None:
    """Fail fast on API misuse (wrong types), with a `ValueError` that says what is wrong."""
    if system is not None and not isinstance(system, str):
        raise ValueError(f"system must be a str or None, not {type(system).__name__}")
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a sequence of Message, not {type(messages).__name__}")
    if all(map(isinstance, messages, repeat(Message))):
        messages = ()  # all fine, checked at C speed: skip the loop that names the culprit
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise ValueError(
                f"messages[{index}] is a {type(message).__name__}, not a cachepilot Message "
                "(convert provider dicts with cachepilot.to_messages)"
            )
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ValueError(f"tools must be a sequence of tool schemas, not {type(tools).__name__}")
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ValueError(f"tools[{index}] is a {type(tool).__name__}, not a mapping")

"""What the hand-built-graph components of one pilot share (node, model, tool node, reducer).

A `CachePilot` keeps each thread's live `PilotState`; graph state keeps the persisted copy
under `"cachepilot"`. Only graph nodes can write graph state, and the model wrapper and the
reducer are not nodes, so the live state may run ahead of graph state between two nodes.
`PilotLink` records, per pilot, what those components need to agree on:

* `synced`: the revision of the copy last loaded from or written to graph state. When graph
  state still holds that revision, the live state descends from it in this process and is
  kept; any other persisted revision (a resume in a new process, a fork from an older
  checkpoint) is loaded, because graph state is the source of truth.
* `committed`: the live revision right after a maintenance node committed a model call; the
  model wrapper then prepares without changing the state again.
* `call_threads`: the thread of each tool call a component saw, for the reducer, which runs
  without a config. A call id seen in two threads (a model that makes its ids up) is
  ambiguous and resolves to no thread, so a result is never ingested into another run.
* `scopes`: the scopes of runs without a `thread_id` (`run_scope.RunScopes`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config, get_store

from cachepilot import CachePilot
from cachepilot_langgraph.convert import content_text
from cachepilot_langgraph.run_scope import RunScopes
from cachepilot_langgraph.state import PILOT_STATE_KEY, sync_pilot_state, thread_of

__all__ = [
    "INGESTED",
    "PilotLink",
    "current_config",
    "current_store",
    "export",
    "is_ingested",
    "link_of",
    "mark_ingested",
    "run_thread",
    "state_update",
    "sync_state",
    "tool_output",
    "use_graph_store",
    "with_content",
]

logger = logging.getLogger(__name__)

INGESTED = "ingested"
"""Value of `response_metadata["cachepilot"]` on tool messages that passed the ingestion gate
(never sent to the model: providers do not serialize `response_metadata`)."""

_CALL_THREADS_MAX = 50_000


@dataclass(slots=True)
class PilotLink:
    """Shared bookkeeping of one pilot's graph components (see the module docstring)."""

    scopes: RunScopes
    lock: threading.Lock = field(default_factory=threading.Lock)
    synced: dict[str, int] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)
    persisted_epochs: dict[str, int] = field(default_factory=dict)
    call_threads: OrderedDict[str, str | None] = field(default_factory=OrderedDict)
    warned: set[str] = field(default_factory=set)

    def note_calls(self, thread: str, messages: Iterable[BaseMessage]) -> None:
        """Remember the thread of the tool calls in `messages` (bounded)."""
        ids = [
            str(call["id"])
            for message in messages
            if isinstance(message, AIMessage)
            for call in message.tool_calls
            if call.get("id")
        ]
        self.note_call_ids(thread, ids)

    def note_call_ids(self, thread: str, call_ids: Iterable[str]) -> None:
        """Remember the thread of these tool call ids (bounded; an id already seen in
        another thread becomes ambiguous)."""
        with self.lock:
            for call_id in call_ids:
                known = self.call_threads.get(call_id, thread)
                self.call_threads[call_id] = thread if known == thread else None
                self.call_threads.move_to_end(call_id)
            while len(self.call_threads) > _CALL_THREADS_MAX:
                self.call_threads.popitem(last=False)

    def thread_of_call(self, call_id: str) -> str | None:
        """The thread a tool call was seen in, if one component saw it in one thread."""
        with self.lock:
            return self.call_threads.get(call_id)

    def forget(self, thread: str) -> None:
        """Drop the bookkeeping of a thread whose scope ended (linear in the bounded map)."""
        with self.lock:
            self.synced.pop(thread, None)
            self.committed.pop(thread, None)
            self.persisted_epochs.pop(thread, None)
            stale = [k for k, v in self.call_threads.items() if v == thread]
            for key in stale:
                del self.call_threads[key]

    def warn_once(self, key: str, message: str, *args: object) -> None:
        """Log a warning the first time `key` comes up."""
        with self.lock:
            if key in self.warned:
                return
            self.warned.add(key)
        logger.warning(message, *args)


_LINKS: weakref.WeakKeyDictionary[CachePilot, PilotLink] = weakref.WeakKeyDictionary()
_LINKS_LOCK = threading.Lock()


def link_of(pilot: CachePilot) -> PilotLink:
    """The `PilotLink` of `pilot` (created on first use, dropped with the pilot)."""
    with _LINKS_LOCK:
        found = _LINKS.get(pilot)
        if found is None:
            found = PilotLink(RunScopes(pilot))
            found.scopes.on_drop = found.forget
            _LINKS[pilot] = found
        return found


def run_thread(pilot: CachePilot, config: RunnableConfig | None, namespace: str | None) -> str:
    """The cachepilot thread of a running step: its `thread_id` (prefixed by `namespace`),
    else the scope of its run (`run_scope.RunScopes`, made on first use)."""
    thread = thread_of(config, namespace)
    if thread is not None:
        return thread
    scope = link_of(pilot).scopes.resolve(config, namespace)
    assert scope is not None  # resolve(create=True) always has one
    return scope


def sync_state(pilot: CachePilot, thread: str, persisted: object) -> None:
    """Bring the live state of `thread` in line with the copy in graph state.

    Keeps the live state when graph state holds the revision this process last synced (the
    live state then only adds this process's own later changes); loads the persisted copy
    otherwise (`sync_pilot_state`).
    """
    link = link_of(pilot)
    revision = persisted.get("revision") if isinstance(persisted, Mapping) else None
    with link.lock:
        synced = link.synced.get(thread)
    if (
        isinstance(revision, int)
        and synced == revision
        and pilot.state(thread).revision >= revision
    ):
        return
    sync_pilot_state(pilot, thread, persisted)
    loaded = pilot.state(thread)
    with link.lock:
        link.synced[thread] = loaded.revision
        link.committed.pop(thread, None)
        link.persisted_epochs[thread] = len(loaded.plan.epochs)


def export(pilot: CachePilot, thread: str) -> dict[str, Any]:
    """The thread's state for graph state (and record it as synced)."""
    exported = pilot.export_state(thread)
    revision = exported.get("revision")
    if isinstance(revision, int):
        link = link_of(pilot)
        with link.lock:
            link.synced[thread] = max(link.synced.get(thread, revision), revision)
    return exported


def state_update(pilot: CachePilot, thread: str) -> dict[str, Any]:
    """`{"cachepilot": <exported state>}`."""
    return {PILOT_STATE_KEY: export(pilot, thread)}


def current_config() -> RunnableConfig | None:
    """The config of the running graph step (None outside a runnable context)."""
    try:
        return get_config()
    except RuntimeError:
        return None


def current_store() -> object | None:
    """The graph's `BaseStore` in the running step, if it has one."""
    try:
        return get_store()
    except Exception:  # outside a graph, or a LangGraph without a runtime store
        return None


def use_graph_store(pilot: CachePilot, store: object | None) -> None:
    """Route the pilot's artifacts to the graph's `BaseStore` when it has no store yet."""
    if store is None or pilot.has_store:
        return
    link = link_of(pilot)
    with link.lock:
        if pilot.has_store:
            return
        from cachepilot_langgraph.store import LangGraphArtifactStore

        try:
            adapter = LangGraphArtifactStore(store)  # type: ignore[arg-type]
        except Exception:
            logger.warning("cannot use the graph's store for artifacts", exc_info=True)
            return
        if pilot.use_store_if_unset(adapter):
            logger.info("artifacts go to the graph's store (%s)", type(store).__name__)


def is_ingested(message: BaseMessage) -> bool:
    """True when `message` is a tool message that already passed the ingestion gate."""
    metadata = getattr(message, "response_metadata", None)
    return isinstance(metadata, Mapping) and metadata.get("cachepilot") == INGESTED


def mark_ingested(message: ToolMessage) -> ToolMessage:
    """A copy of `message` marked as ingested (the same object when it already is)."""
    if is_ingested(message):
        return message
    metadata = {**(message.response_metadata or {}), "cachepilot": INGESTED}
    return message.model_copy(update={"response_metadata": metadata})


def tool_output(message: ToolMessage) -> str:
    """The text a tool message carries (non-text blocks are kept aside, see `with_content`)."""
    return content_text(message.content)


def with_content(message: ToolMessage, text: str) -> ToolMessage:
    """`message` carrying `text` (non-text content blocks such as images are kept)."""
    content = message.content
    if isinstance(content, str):
        return message if text == content else message.model_copy(update={"content": text})
    if isinstance(content, list):
        others = [
            b
            for b in content
            if not (isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text"))
        ]
        if text == content_text(content):
            return message
        blocks: list[Any] = [{"type": "text", "text": text}, *others]
        return message.model_copy(update={"content": blocks if others else text})
    return message.model_copy(update={"content": text})

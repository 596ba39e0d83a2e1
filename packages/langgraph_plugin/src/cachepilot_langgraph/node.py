"""`CachePilotNode`: the maintenance node of a hand-built `StateGraph`.

Add it before the model node (`START -> cachepilot -> agent`, `tools -> cachepilot`). Each
time it runs it

1. loads the thread's `PilotState` from graph state (`"cachepilot"`) when graph state holds
   a copy this process has not seen (a resume, a fork, another worker);
2. commits the coming model call: the scheduler decides whether it is a maintenance point
   (and appends an epoch when it is), the canonical values are frozen or refreshed, and the
   call is counted, exactly as `CachePilot.prepare` does for one call;
3. returns the epoch's edits as same-id replacements and per-id `RemoveMessage`s (so state
   is the view the model is sent, with `add_messages` and delta channels alike) and the
   pilot state.

The model wrapper (`CachePilotChatModel`) then renders the same view without changing the
state again, so a checkpoint taken after this node (an interrupt before the tools, a crash)
resumes to byte-identical requests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from cachepilot import CachePilot
from cachepilot.messages import Message
from cachepilot.support.log_labels import thread_label
from cachepilot_langgraph._shared import (
    current_store,
    link_of,
    run_thread,
    state_update,
    sync_state,
    use_graph_store,
)
from cachepilot_langgraph.convert import MessageConverter, tool_schema
from cachepilot_langgraph.persist import persisted_edits
from cachepilot_langgraph.state import PILOT_STATE_KEY

__all__ = ["CachePilotNode", "SystemPrompt", "ToolLike", "tool_schemas"]

logger = logging.getLogger(__name__)

SystemPrompt = str | Callable[[Any], str | None] | None
"""The system prompt the model node sends: text, or a function of the graph state."""
ToolLike = BaseTool | Mapping[str, Any] | Callable[..., Any] | type
"""Anything `bind_tools` accepts."""


def tool_schemas(tools: Sequence[ToolLike]) -> list[dict[str, Any]]:
    """OpenAI function schemas of `tools` (LangChain tools, dicts, functions, models)."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool, BaseTool | Mapping):
            out.append(tool_schema(tool))
        else:
            out.append(dict(convert_to_openai_tool(tool)))
    return out


def _field(state: object, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def _messages(raw: object) -> list[BaseMessage]:
    if raw is None:
        return []
    items: list[Any] = list(raw) if isinstance(raw, list | tuple) else [raw]
    if all(isinstance(m, BaseMessage) for m in items):
        return items
    # Not a messages channel (no `add_messages`): read it, edits cannot be persisted by id.
    return list(convert_to_messages(items))


class CachePilotNode(Runnable[Any, dict[str, Any]]):
    """Maintenance node to add before the model node of a hand-built `StateGraph`.

    Args:
        pilot: the pilot the graph's model wrapper and tool node share.
        system: the system prompt the model node sends (text, or a function of the state).
            Pass the very text the model node uses: volatile values are frozen from it.
        tools: the tools the model node binds (schemas are computed once).
        namespace: prefix of the cachepilot thread (as given to the other components).
        clock: time source for the cold-cache rule (`time.time`).
        messages_key: the state key holding the messages.
        use_graph_store: route artifacts to the graph's `BaseStore` when the pilot has no
            store of its own yet.
        name: the node's name (for `add_node(node)`).

    Raises:
        ValueError: on a pilot that is not a `CachePilot`, a bad clock or an empty key.
    """

    def __init__(
        self,
        pilot: CachePilot,
        *,
        system: SystemPrompt = None,
        tools: Sequence[ToolLike] = (),
        namespace: str | None = None,
        clock: Callable[[], float] | None = None,
        messages_key: str = "messages",
        use_graph_store: bool = True,
        name: str = "cachepilot",
    ) -> None:
        if not isinstance(pilot, CachePilot):
            raise ValueError(f"pilot must be a CachePilot, not {type(pilot).__name__}")
        if system is not None and not isinstance(system, str) and not callable(system):
            raise ValueError("system must be a str, a function of the state, or None")
        if clock is not None and not callable(clock):
            raise ValueError("clock must be a callable returning Unix time")
        if not isinstance(messages_key, str) or not messages_key:
            raise ValueError("messages_key must be a non-empty state key")
        self.pilot = pilot
        self.system = system
        self.schemas = tool_schemas(tools)
        self.namespace = namespace
        self.messages_key = messages_key
        self.name = name
        self._clock = clock or time.time
        self._use_graph_store = use_graph_store
        self._converter = MessageConverter()

    def _system(self, state: object) -> str | None:
        if callable(self.system):
            found = self.system(state)
            if found is not None and not isinstance(found, str):
                raise ValueError("the system prompt function must return a str or None")
            return found
        return self.system

    def _inputs(
        self, state: object, config: RunnableConfig
    ) -> tuple[str, list[BaseMessage], list[Message], str | None, int]:
        thread = run_thread(self.pilot, config, self.namespace)
        if self._use_graph_store:
            use_graph_store(self.pilot, current_store())
        sync_state(self.pilot, thread, _field(state, PILOT_STATE_KEY))
        messages = _messages(_field(state, self.messages_key))
        last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if last_ai is not None:  # the reducer finds the thread of these calls' results
            link_of(self.pilot).note_calls(thread, (last_ai,))
        core = self._converter.to_core(messages)
        epochs = len(self.pilot.state(thread).plan.epochs)
        return thread, messages, core, self._system(state), epochs

    def _update(
        self,
        thread: str,
        messages: list[BaseMessage],
        core: list[Message],
        epochs_before: int,
    ) -> dict[str, Any]:
        link = link_of(self.pilot)
        plan = self.pilot.state(thread).plan
        with link.lock:
            since = min(link.persisted_epochs.get(thread, epochs_before), epochs_before)
            link.persisted_epochs[thread] = len(plan.epochs)
        update = state_update(self.pilot, thread)
        with link.lock:
            link.committed[thread] = update[PILOT_STATE_KEY]["revision"]
        if len(plan.epochs) > since:
            edits = persisted_edits(messages, core, plan, self._converter)
            if edits:
                update[self.messages_key] = edits
        return update

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Commit the coming model call; return the edits and the pilot state."""
        config = ensure_config(config)
        thread, messages, core, system, epochs = self._inputs(input, config)
        try:
            self.pilot.prepare(system, core, self.schemas, thread, now=self._clock())
        except Exception:  # a maintenance failure must not cost the turn
            logger.warning(
                "thread %s: maintenance node failed; turn goes on",
                thread_label(thread),
                exc_info=True,
            )
            return state_update(self.pilot, thread)
        return self._update(thread, messages, core, epochs)

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Async twin of `invoke` (a fold may call a model: it runs off the event loop)."""
        config = ensure_config(config)
        thread, messages, core, system, epochs = self._inputs(input, config)
        try:
            await self.pilot.aprepare(system, core, self.schemas, thread, now=self._clock())
        except Exception:
            logger.warning(
                "thread %s: maintenance node failed; turn goes on",
                thread_label(thread),
                exc_info=True,
            )
            return state_update(self.pilot, thread)
        return self._update(thread, messages, core, epochs)

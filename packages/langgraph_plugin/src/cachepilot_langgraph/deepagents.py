"""cachepilot inside a `deepagents` harness (`create_deep_agent`), so that it pays.

```python
from cachepilot import CachePilot
from cachepilot_langgraph.deepagents import create_cachepilot_deep_agent

agent = create_cachepilot_deep_agent(model, tools, pilot=CachePilot(),
                                     checkpointer=InMemorySaver())
```

`create_deep_agent(..., middleware=[CachePilotMiddleware(...)])` makes cachepilot a guest that
arrives too late: deepagents moves every tool output over its eviction limit (80,000
characters) to its virtual filesystem before a user middleware sees it, leaving a preview
without the lines that matter; its summarization counts the raw history, not what the model
reads; and its default general-purpose subagent never gets user middleware. The recipe
(`create_cachepilot_deep_agent`) uses deepagents' public extension points only:

* `DeepAgentCachePilotMiddleware` goes among the caller's middleware (last, unless the caller
  lists it), so it orders with them as `CachePilotMiddleware` does in `create_agent`; there
  it sits inside deepagents' `FilesystemMiddleware`, so it ingests each tool output before
  deepagents evicts it: graph state, `state["files"]` and the run's messages stay exactly as
  deepagents alone makes them (the preview, the file), while the model reads cachepilot's
  reduction of the original (error lines kept, the original recallable);
* a second instance takes deepagents' `SummarizationMiddleware` slot (deepagents replaces a
  core middleware by name): cachepilot's folds manage the context in place of a summary that
  counts the raw history and reads the unreduced originals. deepagents hands that slot's
  middleware to its default general-purpose subagent, where it does the whole job; in the
  main agent it only serves `recall`. Each declarative `SubAgent` gets both roles too;
* a graph that runs inside a tool call (a subagent) inherits its caller's `thread_id`; it
  gets a cachepilot thread of its own per invocation, so it never overwrites its caller's.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from deepagents import create_deep_agent
from deepagents.middleware.subagents import GENERAL_PURPOSE_SUBAGENT
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from cachepilot import CachePilot
from cachepilot.messages import Message
from cachepilot.recall import RECALL_TOOL_NAME
from cachepilot.views import result_text, view_key
from cachepilot_langgraph._shared import current_config, sync_state, tool_output
from cachepilot_langgraph.middleware import CachePilotMiddleware
from cachepilot_langgraph.recall_tool import make_recall_tool, recall_thread
from cachepilot_langgraph.state import PILOT_STATE_KEY, SCOPE_KEY, configured_thread, scoped

__all__ = [
    "SLOT",
    "DeepAgentCachePilotMiddleware",
    "create_cachepilot_deep_agent",
    "nested_scope",
    "with_pilot",
]

logger = logging.getLogger(__name__)

SLOT = "SummarizationMiddleware"
"""The deepagents core-middleware name the recipe's middleware replaces."""

_ALIAS = "deepagents-evicted:"
"""Prefix of the `PilotState.views` entry that maps a call id to the view key of its
original output (the state keeps deepagents' preview of it)."""

_TOOL_NODE_PREFIX = "tools:"

ToolResult = ToolMessage | Command[Any]


def nested_scope(config: RunnableConfig | None) -> str | None:
    """The checkpoint namespace of the tool call a graph runs inside (a subagent), or None
    for a graph that does not run inside another graph's tool call."""
    if not config:
        return None
    namespace = (config.get("configurable") or {}).get("checkpoint_ns")
    if not isinstance(namespace, str) or not namespace:
        return None
    # The last segment is the running node's own task; the part before it says where the
    # graph runs. Up to the last tool task: the invocation the subagent belongs to.
    parents = namespace.split("|")[:-1]
    last = max((i for i, p in enumerate(parents) if p.startswith(_TOOL_NODE_PREFIX)), default=-1)
    return "|".join(parents[: last + 1]) if last >= 0 else None


class DeepAgentCachePilotMiddleware(CachePilotMiddleware):
    """`CachePilotMiddleware` for `create_deep_agent` (see the module docstring).

    `create_cachepilot_deep_agent` builds and places the instances; build one yourself to
    give a `CompiledSubAgent`'s graph the same pilot (`create_agent(...,
    middleware=[DeepAgentCachePilotMiddleware(pilot)])`) or to choose its place among your
    middleware.

    Args:
        pilot: the `CachePilot` (see `CachePilotMiddleware`).
        slot: take deepagents' `SummarizationMiddleware` slot (named after it) instead of
            the caller's place.
        acts_for: agent names (`lc_agent_name`, the subagent's name) whose calls this
            instance manages; None: every call. Elsewhere it passes calls through (a slot
            instance still serves `recall`).
        recall_tool: register the `recall` tool (False when another instance in the same
            graph, the slot one, registers it).
        max_evicted: how many views of evicted outputs stay in memory (the archive keeps
            them all).
        **kwargs: the other `CachePilotMiddleware` arguments.
    """

    def __init__(
        self,
        pilot: CachePilot | None = None,
        *,
        slot: bool = False,
        acts_for: Collection[str] | None = None,
        recall_tool: bool = True,
        max_evicted: int = 4_096,
        **kwargs: Any,
    ) -> None:
        super().__init__(pilot, **kwargs)
        if max_evicted < 1:
            raise ValueError(f"max_evicted must be >= 1, got {max_evicted}")
        if acts_for is not None and (
            isinstance(acts_for, str) or not all(isinstance(a, str) for a in acts_for)
        ):
            raise ValueError("acts_for must be a collection of agent names, or None")
        self._slot = slot
        self._acts_for = None if acts_for is None else frozenset(acts_for)
        self._recall_tool = make_recall_tool(self.pilot, thread_of=self._recall_thread)
        self.tools = [self._recall_tool] if self._offer_recall and recall_tool else []
        self._evicted: OrderedDict[tuple[str, str], tuple[Message, Message]] = OrderedDict()
        self._evicted_lock = threading.Lock()
        self._max_evicted = max_evicted

    @property
    def name(self) -> str:
        """`SummarizationMiddleware` for the slot instance, else `CachePilotMiddleware`."""
        return SLOT if self._slot else super().name

    def _acts(self) -> bool:
        """Whether this call belongs to an agent this instance manages."""
        if self._acts_for is None:
            return True
        config = current_config() or {}
        agent = (config.get("metadata") or {}).get("lc_agent_name")
        return isinstance(agent, str) and agent in self._acts_for

    # --- scope ---------------------------------------------------------------------------------

    def _thread(
        self, config: RunnableConfig | None, state: Mapping[str, Any]
    ) -> tuple[str, str | None]:
        """A subagent's run (a graph inside a tool call) is a thread of its own."""
        configured = configured_thread(config)
        nested = nested_scope(config)
        if configured is None or nested is None:
            return super()._thread(config, state)
        thread = scoped(f"{configured}|{nested}", self.namespace)
        # Bounded like runs without a thread id: a subagent's conversation ends with its task.
        self._touch_ephemeral(thread)
        return thread, None

    def _recall_thread(self, config: RunnableConfig | None, state: object) -> str:
        configured = configured_thread(config)
        nested = nested_scope(config)
        if configured is not None and nested is not None:
            return scoped(f"{configured}|{nested}", self.namespace)
        return recall_thread(config, state, self.namespace, self.pilot)

    def _tool_thread(self, request: ToolCallRequest) -> str | None:
        """The thread of a tool call (None before this run's first model call set it)."""
        state = request.state if isinstance(request.state, Mapping) else {}
        config = getattr(request.runtime, "config", None) or current_config()
        if configured_thread(config) is None and not state.get(SCOPE_KEY):
            return None
        thread, _ = self._thread(config, state)
        self._graph_store(getattr(request.runtime, "store", None))
        sync_state(self.pilot, thread, state.get(PILOT_STATE_KEY))
        return thread

    # --- ingestion in front of deepagents' eviction ---------------------------------------------

    def _ingest_now(self, request: ToolCallRequest, result: ToolResult) -> None:
        """Reduce each plain-text result of this call now, as the model call would, and note
        its view key under its call id: when deepagents then evicts the output, the model
        still reads cachepilot's view of the original."""
        if request.tool_call.get("name") == RECALL_TOOL_NAME:
            return
        if not self._offer_recall or not self.pilot.config.reduce:
            return
        thread = self._tool_thread(request)
        if thread is None:
            return
        for message in _found(request, result):
            if not isinstance(message.content, str) or not message.tool_call_id:
                continue  # media results: deepagents' own handling
            self._ingest_one(thread, request, message)

    def _ingest_one(self, thread: str, request: ToolCallRequest, message: ToolMessage) -> None:
        call_id = str(message.tool_call_id)
        self.pilot.ingest_view(
            str(request.tool_call.get("name", "")),
            request.tool_call.get("args"),
            tool_output(message),
            call_id,
            thread,
            alias=_ALIAS + call_id,
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        """Run the tool; ingest its output before deepagents' eviction sees it (the result
        itself goes on unchanged)."""
        result = handler(request)
        if not self._acts():
            return result
        try:
            self._ingest_now(request, result)
        except Exception:  # the agent's run never depends on it
            logger.warning("tool-time ingestion failed; the model call ingests", exc_info=True)
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """Async twin of `wrap_tool_call`."""
        result = await handler(request)
        if not self._acts():
            return result
        try:
            await asyncio.to_thread(self._ingest_now, request, result)
        except Exception:
            logger.warning("tool-time ingestion failed; the model call ingests", exc_info=True)
        return result

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ExtendedModelResponse[Any]:
        """`CachePilotMiddleware.wrap_model_call` for the agents this instance manages."""
        if not self._acts():
            return _passed(handler(request))
        return super().wrap_model_call(request, handler)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ExtendedModelResponse[Any]:
        """Async twin of `wrap_model_call`."""
        if not self._acts():
            return _passed(await handler(request))
        return await super().awrap_model_call(request, handler)

    def _shown_inputs(
        self, request: ModelRequest[Any], thread: str, core: list[Message]
    ) -> tuple[list[Message], frozenset[str]]:
        """Results deepagents evicted are shown as cachepilot's view of their original."""
        core, native = super()._shown_inputs(request, thread, core)
        state = request.state if isinstance(request.state, Mapping) else {}
        files = state.get("files")
        out: list[Message] | None = None
        evicted: set[str] = set()
        for index, message in enumerate(core):
            call_id = message.tool_call_id
            if message.role != "tool" or not call_id:
                continue
            shown = self._evicted_view(thread, message, files)
            if shown is None:
                continue
            if out is None:
                out = list(core)
            out[index] = shown
            evicted.add(call_id)
        if out is None:
            return core, native
        return out, native | evicted

    def _evicted_view(self, thread: str, message: Message, files: object) -> Message | None:
        """The message carrying the view of its original, when the state holds deepagents'
        eviction of that original (its preview names a file with exactly that text)."""
        call_id = str(message.tool_call_id)
        with self._evicted_lock:
            hit = self._evicted.get((thread, call_id))
            if hit is not None and hit[0] is message:
                self._evicted.move_to_end((thread, call_id))
                return hit[1]
        known = self.pilot.view_of(thread, _ALIAS + call_id)
        if known is None:
            return None
        key, ref = known
        if not ref or view_key(message) == key:
            return None  # unreduced, or not evicted: the plain path shows it
        if not _evicts(message, key, files):
            return None  # rewritten by something else: never show what it replaced
        try:
            found = self.pilot.store.get(thread, ref)
        except Exception:
            logger.warning("thread %s: the archive is unavailable", thread, exc_info=True)
            return None
        if found is None:
            return None
        shown = replace(message, content=found.text)
        with self._evicted_lock:
            self._evicted[(thread, call_id)] = (message, shown)
            while len(self._evicted) > self._max_evicted:
                self._evicted.popitem(last=False)
        return shown


def _passed(result: object) -> ExtendedModelResponse[Any]:
    """An inner handler's result as this middleware returns it (nothing added)."""
    if isinstance(result, ExtendedModelResponse):
        return result
    if isinstance(result, AIMessage):
        return ExtendedModelResponse(model_response=ModelResponse(result=[result]), command=None)
    return ExtendedModelResponse(model_response=result, command=None)  # type: ignore[arg-type]


def _found(request: ToolCallRequest, result: object) -> list[ToolMessage]:
    """The tool messages of `result` that answer this call."""
    call_id = request.tool_call.get("id")
    if isinstance(result, ToolMessage):
        found = [result]
    elif isinstance(result, Command) and isinstance(result.update, Mapping):
        messages = result.update.get("messages") or []
        found = [m for m in messages if isinstance(m, ToolMessage)]
    else:
        return []
    return [m for m in found if m.tool_call_id == call_id or len(found) == 1]


def _evicts(message: Message, key: str, files: object) -> bool:
    """True when `message` names a file of `files` whose text is the original of `key`."""
    if not isinstance(files, Mapping):
        return False
    text = result_text(message)
    call_id = str(message.tool_call_id)
    for path, data in files.items():
        if not isinstance(path, str) or path not in text or not isinstance(data, Mapping):
            continue
        content = data.get("content")
        if data.get("encoding", "utf-8") != "utf-8" or not isinstance(content, str):
            continue
        if view_key(Message(role="tool", content=content, tool_call_id=call_id)) == key:
            return True
    return False


def with_pilot(
    subagents: Sequence[Mapping[str, Any]] | None, pilot: CachePilot, **kwargs: Any
) -> list[Any]:
    """`subagents` with the pilot in each declarative `SubAgent` spec: a slot instance in
    place of deepagents' summarization (serving `recall`) and an instance after the spec's
    own middleware. Compiled and async subagents are passed through: build a
    `CompiledSubAgent`'s graph with `DeepAgentCachePilotMiddleware(pilot)`; a spec that fills
    the slot itself is kept as it is."""
    slot = DeepAgentCachePilotMiddleware(pilot, slot=True, acts_for=(), **kwargs)
    full = DeepAgentCachePilotMiddleware(pilot, recall_tool=False, **kwargs)
    out: list[Any] = []
    for spec in subagents or ():
        if "runnable" in spec or "graph_id" in spec:
            out.append(spec)
            continue
        own = list(spec.get("middleware") or [])
        if any(getattr(m, "name", None) in (SLOT, full.name) for m in own):
            out.append(spec)
            continue
        out.append({**spec, "middleware": [slot, *own, full]})
    return out


def create_cachepilot_deep_agent(
    model: Any,
    tools: Sequence[Any] | None = None,
    *,
    pilot: CachePilot | DeepAgentCachePilotMiddleware | None = None,
    middleware: Sequence[Any] = (),
    subagents: Sequence[Any] | None = None,
    **deep_agent_kwargs: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """`deepagents.create_deep_agent` with cachepilot placed so that it pays.

    Args:
        model: as for `create_deep_agent`.
        tools: as for `create_deep_agent`.
        pilot: a `CachePilot` (`CachePilot()` when omitted), or a
            `DeepAgentCachePilotMiddleware` to use as the main agent's instance: list it in
            `middleware` to choose its place (else it goes last).
        middleware: the caller's middleware (as for `create_deep_agent`).
        subagents: as for `create_deep_agent`; each declarative `SubAgent` gets the pilot.
        **deep_agent_kwargs: every other `create_deep_agent` argument.

    Raises:
        ValueError: when `middleware` already fills the `SummarizationMiddleware` slot or
            holds another `CachePilotMiddleware`.
    """
    if any(getattr(m, "name", None) == SLOT for m in middleware):
        raise ValueError(
            f"middleware already holds a {SLOT}: cachepilot takes that slot in a deep agent"
        )
    if isinstance(pilot, DeepAgentCachePilotMiddleware):
        if pilot.name == SLOT:
            raise ValueError("pass the main agent's instance, not a slot instance")
        main = pilot
    else:
        main = DeepAgentCachePilotMiddleware(pilot, recall_tool=False)
    clash = [m for m in middleware if isinstance(m, CachePilotMiddleware) and m is not main]
    if clash:
        raise ValueError(
            "middleware holds its own CachePilotMiddleware; pass its pilot as pilot= instead"
        )
    gp = str(GENERAL_PURPOSE_SUBAGENT["name"])
    slot = DeepAgentCachePilotMiddleware(
        main.pilot, slot=True, acts_for=(gp,), namespace=main.namespace, clock=main.clock
    )
    if main.tools:  # the slot instance serves recall in the main agent
        main.tools = []
    placed = list(middleware) if main in middleware else [*middleware, main]
    agent: CompiledStateGraph[Any, Any, Any, Any] = create_deep_agent(
        model,
        tools,
        middleware=[slot, *placed],
        subagents=with_pilot(subagents, main.pilot, namespace=main.namespace, clock=main.clock),
        **deep_agent_kwargs,
    )
    return agent

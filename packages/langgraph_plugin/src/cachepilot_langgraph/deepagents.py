"""cachepilot inside a `deepagents` harness (`create_deep_agent`), so that it pays.

```python
from cachepilot import CachePilot
from cachepilot_langgraph.deepagents import create_cachepilot_deep_agent

agent = create_cachepilot_deep_agent(model, tools, pilot=CachePilot(),
                                     checkpointer=InMemorySaver())
```

`create_deep_agent(..., middleware=[CachePilotMiddleware(...)])` works, and reads deepagents'
evicted outputs (over 80,000 characters, moved to `/large_tool_results/`) as cachepilot's view
of the file rather than deepagents' preview (`cachepilot_langgraph.evicted`). Two things still
stand in its way: deepagents' summarization counts the raw history, not what the model reads,
and its summarizing call reads the unreduced originals; and its default general-purpose
subagent never gets user middleware. The recipe (`create_cachepilot_deep_agent`) uses
deepagents' public extension points only:

* `DeepAgentCachePilotMiddleware` goes among the caller's middleware (last, unless the caller
  lists it), so it orders with them as `CachePilotMiddleware` does in `create_agent`;
* a second instance takes deepagents' `SummarizationMiddleware` slot (deepagents replaces a
  core middleware by name): cachepilot's folds manage the context in place of the summary.
  deepagents hands that slot's middleware to its default general-purpose subagent, where it
  does the whole job; in the main agent it only serves `recall`. Each declarative `SubAgent`
  gets both roles too;
* a graph that runs inside a tool call (a subagent) inherits its caller's `thread_id`; it
  gets a cachepilot thread of its own per invocation, so it never overwrites its caller's.

Graph state, `state["files"]`, todos and the run's messages stay as deepagents alone makes
them; only what the model reads changes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
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
from langgraph.types import Command

from cachepilot import CachePilot
from cachepilot_langgraph._shared import current_config
from cachepilot_langgraph.middleware import CachePilotMiddleware
from cachepilot_langgraph.recall_tool import make_recall_tool, recall_thread
from cachepilot_langgraph.state import configured_thread, scoped

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
        **kwargs: the other `CachePilotMiddleware` arguments.
    """

    def __init__(
        self,
        pilot: CachePilot | None = None,
        *,
        slot: bool = False,
        acts_for: Collection[str] | None = None,
        recall_tool: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(pilot, **kwargs)
        if acts_for is not None and (
            isinstance(acts_for, str) or not all(isinstance(a, str) for a in acts_for)
        ):
            raise ValueError("acts_for must be a collection of agent names, or None")
        self._slot = slot
        self._acts_for = None if acts_for is None else frozenset(acts_for)
        self._recall_tool = make_recall_tool(self.pilot, thread_of=self._recall_thread)
        self.tools = [self._recall_tool] if self._offer_recall and recall_tool else []

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


def _passed(result: object) -> ExtendedModelResponse[Any]:
    """An inner handler's result as this middleware returns it (nothing added)."""
    if isinstance(result, ExtendedModelResponse):
        return result
    if isinstance(result, AIMessage):
        return ExtendedModelResponse(model_response=ModelResponse(result=[result]), command=None)
    return ExtendedModelResponse(model_response=result, command=None)  # type: ignore[arg-type]


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
    options: dict[str, Any] = {
        "namespace": main.namespace,
        "clock": main.clock,
    }
    slot = DeepAgentCachePilotMiddleware(main.pilot, slot=True, acts_for=(gp,), **options)
    if main.tools:  # the slot instance serves recall in the main agent
        main.tools = []
    placed = list(middleware) if main in middleware else [*middleware, main]
    agent: CompiledStateGraph[Any, Any, Any, Any] = create_deep_agent(
        model,
        tools,
        middleware=[slot, *placed],
        subagents=with_pilot(subagents, main.pilot, **options),
        **deep_agent_kwargs,
    )
    return agent

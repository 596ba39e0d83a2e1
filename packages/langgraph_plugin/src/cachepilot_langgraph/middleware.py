"""`CachePilotMiddleware`: cachepilot for `langchain.agents.create_agent`.

```python
from cachepilot import CachePilot
from cachepilot_langgraph import CachePilotMiddleware

agent = create_agent(model, tools, middleware=[CachePilotMiddleware(CachePilot())],
                     checkpointer=InMemorySaver())
```

* `wrap_tool_call` reduces each tool result at ingestion: only the reduced text reaches state
  and checkpoints; the original is archived and the `recall` tool serves it back.
* `wrap_model_call` runs `prepare`: the model gets a canonical system prompt, the planned view
  and a stable tool list (with `recall` from the first call). When a maintenance epoch is
  appended, its edits are persisted into state by same-id replacement and per-id removal, so
  state is the view (checkpoints and resumes see exactly what the model saw).
* Usage (incl. cached tokens) is recorded from the response's `usage_metadata`.
* The thread's `PilotState` lives in graph state under `"cachepilot"` and survives checkpoint
  and resume; artifacts go to the graph's `BaseStore` when it has one and the pilot was not
  given a store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    OmitFromInput,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from cachepilot import CachePilot
from cachepilot.canonical import tool_name
from cachepilot.fold import is_context_length_error
from cachepilot.messages import Message
from cachepilot.metrics import Metrics, call_metrics, langsmith_metadata
from cachepilot.plan import Plan
from cachepilot.recall import RECALL_TOOL_NAME
from cachepilot.usage import Usage
from cachepilot_langgraph._shared import (
    current_config,
    tool_output,
    use_graph_store,
    with_content,
)
from cachepilot_langgraph.convert import (
    MessageConverter,
    ordered,
    system_text,
    to_langchain,
    tool_schema,
)
from cachepilot_langgraph.persist import persisted_edits
from cachepilot_langgraph.recall_tool import make_recall_tool
from cachepilot_langgraph.state import (
    PILOT_STATE_KEY,
    newest_pilot_state,
    sync_pilot_state,
    thread_of,
)

__all__ = ["CachePilotMiddleware", "CachePilotState", "Prepared"]

logger = logging.getLogger(__name__)


class CachePilotState(AgentState[Any]):
    """Agent state with the thread's pilot state (merged by revision)."""

    # The reducer must be the last annotation: LangGraph reads only `__metadata__[-1]`.
    cachepilot: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput, newest_pilot_state]]


@dataclass(slots=True)
class Prepared:
    """One model call after `prepare`: the request to send and what to persist."""

    request: ModelRequest[Any]
    thread: str
    edits: list[BaseMessage] = field(default_factory=list)
    """Same-id replacements and `RemoveMessage`s that make state equal the view."""
    core: list[Message] = field(default_factory=list)
    system: str | None = None
    schemas: list[dict[str, Any]] = field(default_factory=list)


class CachePilotMiddleware(AgentMiddleware[CachePilotState, Any]):
    """Cache-aware context management for a `create_agent` agent.

    Args:
        pilot: the `CachePilot` to use; `CachePilot()` when omitted (originals go to the
            graph's `BaseStore` when it has one, else to an SQLite file in the per-user cache
            directory, see `CachePilot`).
        namespace: prefix of the cachepilot thread (the LangGraph `thread_id`); set it when
            several agents share one pilot and the same thread ids.
        clock: time source for the cold-cache rule (`time.time`); a replay passes its own.
        use_graph_store: route artifacts to the graph's `BaseStore` when the pilot has no
            store of its own yet.
        metrics: where per-call metrics go (`cachepilot.metrics.Metrics` with its sinks, e.g.
            OpenTelemetry); every call's metrics are also added to the LangSmith run's
            metadata when tracing is on.
    """

    state_schema = CachePilotState

    def __init__(
        self,
        pilot: CachePilot | None = None,
        *,
        namespace: str | None = None,
        clock: Callable[[], float] | None = None,
        use_graph_store: bool = True,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__()
        if pilot is not None and not isinstance(pilot, CachePilot):
            raise ValueError(f"pilot must be a CachePilot, not {type(pilot).__name__}")
        if clock is not None and not callable(clock):
            raise ValueError("clock must be a callable returning Unix time")
        self.pilot = pilot if pilot is not None else CachePilot()
        self.namespace = namespace
        self._clock = clock or time.time
        self._use_graph_store = use_graph_store
        self.metrics = metrics
        self._converter = MessageConverter()
        self._recall_tool = make_recall_tool(self.pilot, namespace=namespace)
        self.tools: list[BaseTool] = [self._recall_tool] if self.pilot.config.recall_tool else []

    @property
    def name(self) -> str:
        """Middleware name (unique per agent)."""
        return "CachePilotMiddleware"

    # --- helpers -----------------------------------------------------------------------------

    def _thread(self, config: RunnableConfig | None) -> str:
        return thread_of(config, self.namespace)

    def _graph_store(self, store: object) -> None:
        if self._use_graph_store:
            use_graph_store(self.pilot, store)

    def _export(self, thread: str) -> dict[str, Any]:
        return self.pilot.export_state(thread)

    def _state_update(self, thread: str, messages: Sequence[BaseMessage]) -> Command[Any]:
        update: dict[str, Any] = {PILOT_STATE_KEY: self._export(thread)}
        if messages:
            update["messages"] = list(messages)
        return Command(update=update)

    # --- model calls -------------------------------------------------------------------------

    def _sync_and_inputs(self, request: ModelRequest[Any]) -> tuple[str, list[Message]]:
        thread = self._thread(current_config())
        self._graph_store(getattr(request.runtime, "store", None))
        state = request.state if isinstance(request.state, dict) else {}
        sync_pilot_state(self.pilot, thread, state.get(PILOT_STATE_KEY))
        return thread, self._converter.to_core(request.messages)

    def _finish_prepare(
        self,
        request: ModelRequest[Any],
        *,
        thread: str,
        core: list[Message],
        epochs_before: int,
        result: tuple[str | None, list[Message], list[dict[str, Any]]],
        system: str | None,
        schemas: list[dict[str, Any]],
    ) -> Prepared:
        out_system, view, out_tools = result
        by_id = {m.id: m for m in request.messages if m.id}
        lc_view = [to_langchain(m, self._converter, by_id) for m in view]
        overrides: dict[str, Any] = {"messages": lc_view}
        if out_system != system:
            overrides["system_message"] = (
                None if out_system is None else SystemMessage(content=out_system)
            )
        names = [tool_name(t) for t in out_tools]
        overrides["tools"] = ordered(request.tools, names)
        plan = self.pilot.state(thread).plan
        edits = (
            self._persisted_edits(request.messages, core, plan)
            if len(plan.epochs) > epochs_before
            else []
        )
        return Prepared(request.override(**overrides), thread, edits, core, system, schemas)

    def _persisted_edits(
        self, messages: Sequence[BaseMessage], core: Sequence[Message], plan: Plan
    ) -> list[BaseMessage]:
        """Same-id replacements and removals that turn state into the planned view."""
        return persisted_edits(messages, core, plan, self._converter)

    def _prepare(self, request: ModelRequest[Any]) -> Prepared:
        thread, core = self._sync_and_inputs(request)
        system = system_text(request.system_message)
        schemas = [tool_schema(t) for t in request.tools]
        epochs_before = len(self.pilot.state(thread).plan.epochs)
        result = self.pilot.prepare(system, core, schemas, thread, now=self._clock())
        return self._finish_prepare(
            request,
            thread=thread,
            core=core,
            epochs_before=epochs_before,
            result=result,
            system=system,
            schemas=schemas,
        )

    async def _aprepare(self, request: ModelRequest[Any]) -> Prepared:
        thread, core = self._sync_and_inputs(request)
        system = system_text(request.system_message)
        schemas = [tool_schema(t) for t in request.tools]
        epochs_before = len(self.pilot.state(thread).plan.epochs)
        result = await self.pilot.aprepare(system, core, schemas, thread, now=self._clock())
        return self._finish_prepare(
            request,
            thread=thread,
            core=core,
            epochs_before=epochs_before,
            result=result,
            system=system,
            schemas=schemas,
        )

    def _record(self, thread: str, response: ModelResponse[Any]) -> None:
        for message in response.result:
            usage = getattr(message, "usage_metadata", None)
            if isinstance(message, AIMessage) and usage:
                try:
                    normalized = Usage.from_langchain(usage)
                    self.pilot.record_usage(normalized, thread)
                except Exception:
                    logger.warning("thread %s: unreadable usage_metadata", thread, exc_info=True)
                    continue
                self._observe(thread, normalized)

    def _observe(self, thread: str, usage: Usage) -> None:
        """Per-call metrics to the sinks and to the LangSmith run (never fails the call)."""
        try:
            state = self.pilot.state(thread)
            epochs = state.plan.epochs
            record = call_metrics(
                usage,
                thread=thread,
                call=state.calls,
                provider=self.pilot.config.provider,
                recalls=state.recalls,
                epoch=epochs[-1].index if epochs else None,
                epoch_reason=epochs[-1].reason if epochs else None,
            )
            totals = self.metrics.record(record) if self.metrics is not None else None
            from langsmith.run_helpers import get_current_run_tree

            run = get_current_run_tree()
            if run is not None:
                run.metadata.update(langsmith_metadata(record, totals))
        except Exception:
            logger.debug("thread %s: metrics not recorded", thread, exc_info=True)

    def _respond(
        self,
        prepared: Prepared,
        result: ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any],
    ) -> ExtendedModelResponse[Any]:
        if isinstance(result, ExtendedModelResponse):
            response = result.model_response
        elif isinstance(result, AIMessage):
            response = ModelResponse(result=[result])
        else:
            response = result
        self._record(prepared.thread, response)
        return ExtendedModelResponse(
            model_response=response,
            command=self._state_update(prepared.thread, prepared.edits),
        )

    def _emergency(self, request: ModelRequest[Any], prepared: Prepared) -> bool:
        folded = self.pilot.emergency_fold(
            prepared.system, prepared.core, prepared.thread, prepared.schemas
        )
        if folded:
            logger.warning("thread %s: context too long; folded and retrying", prepared.thread)
        return folded

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ExtendedModelResponse[Any]:
        """Send the prepared view; persist maintenance edits and pilot state."""
        prepared = self._prepare(request)
        try:
            result = handler(prepared.request)
        except Exception as exc:
            if not is_context_length_error(exc) or not self._emergency(request, prepared):
                raise
            retry = self._prepare(request)
            retry.edits = retry.edits or prepared.edits
            result = handler(retry.request)
            prepared = retry
        return self._respond(prepared, result)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ExtendedModelResponse[Any]:
        """Async twin of `wrap_model_call`."""
        prepared = await self._aprepare(request)
        try:
            result = await handler(prepared.request)
        except Exception as exc:
            if not is_context_length_error(exc) or not self._emergency(request, prepared):
                raise
            retry = await self._aprepare(request)
            retry.edits = retry.edits or prepared.edits
            result = await handler(retry.request)
            prepared = retry
        return self._respond(prepared, result)

    # --- tool calls --------------------------------------------------------------------------

    def _tool_thread(self, request: ToolCallRequest) -> str:
        runtime = request.runtime
        config = getattr(runtime, "config", None) if runtime is not None else None
        self._graph_store(getattr(runtime, "store", None) if runtime is not None else None)
        thread = self._thread(config if config is not None else current_config())
        state = request.state if isinstance(request.state, dict) else {}
        sync_pilot_state(self.pilot, thread, state.get(PILOT_STATE_KEY))
        return thread

    def _reduce(
        self, request: ToolCallRequest, result: ToolMessage | Command[Any], texts: dict[int, str]
    ) -> ToolMessage | Command[Any]:
        """`result` with its tool message(s) carrying the reduced text in `texts`."""
        if isinstance(result, ToolMessage):
            return _reduced(result, texts)
        update = result.update
        if not isinstance(update, dict) or not isinstance(update.get("messages"), list):
            return result
        messages = [
            _reduced(m, texts) if isinstance(m, ToolMessage) else m for m in update["messages"]
        ]
        return Command(
            graph=result.graph,
            update={**update, "messages": messages},
            resume=result.resume,
            goto=result.goto,
        )

    def _to_ingest(self, request: ToolCallRequest, result: object) -> list[ToolMessage]:
        call_id = request.tool_call.get("id")
        if isinstance(result, ToolMessage):
            found = [result]
        elif isinstance(result, Command) and isinstance(result.update, dict):
            found = [m for m in result.update.get("messages") or [] if isinstance(m, ToolMessage)]
        else:
            return []
        return [m for m in found if m.tool_call_id == call_id or len(found) == 1]

    def _finish_tool(
        self,
        request: ToolCallRequest,
        thread: str,
        result: ToolMessage | Command[Any],
        texts: dict[int, str],
    ) -> ToolMessage | Command[Any]:
        reduced = self._reduce(request, result, texts)
        state_update = {PILOT_STATE_KEY: self._export(thread)}
        if isinstance(reduced, ToolMessage):
            return Command(update={"messages": [reduced], **state_update})
        if reduced.graph is None and isinstance(reduced.update, dict):
            return Command(
                update={**reduced.update, **state_update},
                resume=reduced.resume,
                goto=reduced.goto,
            )
        return reduced

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool, then reduce its output at ingestion (recall results pass as they are)."""
        thread = self._tool_thread(request)
        result = handler(request)
        name = str(request.tool_call.get("name", ""))
        texts: dict[int, str] = {}
        if name != RECALL_TOOL_NAME or request.tool is not self._recall_tool:
            for message in self._to_ingest(request, result):
                texts[id(message)] = self.pilot.ingest(
                    name,
                    request.tool_call.get("args"),
                    tool_output(message),
                    str(message.tool_call_id),
                    thread,
                )
        return self._finish_tool(request, thread, result, texts)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of `wrap_tool_call`."""
        thread = self._tool_thread(request)
        result = await handler(request)
        name = str(request.tool_call.get("name", ""))
        texts: dict[int, str] = {}
        if name != RECALL_TOOL_NAME or request.tool is not self._recall_tool:
            for message in self._to_ingest(request, result):
                texts[id(message)] = await self.pilot.aingest(
                    name,
                    request.tool_call.get("args"),
                    tool_output(message),
                    str(message.tool_call_id),
                    thread,
                )
        return self._finish_tool(request, thread, result, texts)


def _reduced(message: ToolMessage, texts: dict[int, str]) -> ToolMessage:
    """`message` with the reduced text ingestion gave it, if it went through ingestion."""
    text = texts.get(id(message))
    return message if text is None else with_content(message, text)

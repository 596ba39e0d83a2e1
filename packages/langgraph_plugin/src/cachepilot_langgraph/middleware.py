"""`CachePilotMiddleware`: cachepilot for `langchain.agents.create_agent`.

```python
from cachepilot import CachePilot
from cachepilot_langgraph import CachePilotMiddleware

agent = create_agent(model, tools, middleware=[CachePilotMiddleware(CachePilot())],
                     checkpointer=InMemorySaver())
```

The middleware changes only what the model reads (`wrap_model_call`); graph state, the run's
result, checkpoints, streams and every other middleware see the plain messages the tools
returned:

* each tool result is ingested the first time a model call carries it (reduced, its original
  archived; what a redaction middleware removed before the model call is never archived) and
  shown as the same reduced text on every later call;
* the model gets a canonical system prompt, the planned view (maintenance epochs live in the
  pilot state and are applied on every call) and a stable tool list with `recall`;
* usage (incl. cached tokens) is recorded from the response's `usage_metadata`;
* the thread's `PilotState` is kept in graph state under the private key `"cachepilot"`
  (checkpointed, never part of the agent's input or output); artifacts go to the graph's
  `BaseStore` when it has one and the pilot was not given a store.

A run without a `thread_id` gets a scope of its own (kept in graph state for the rest of the
invocation); at most `max_ephemeral_scopes` such scopes are kept live, the least recently
used is dropped with its archived data.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.types import Command

from cachepilot import CachePilot
from cachepilot.canonical import tool_name
from cachepilot.diagnose.metrics import Metrics, call_metrics, langsmith_metadata
from cachepilot.fold import is_context_length_error
from cachepilot.messages import Message
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.support.log_labels import thread_label
from cachepilot.usage import Usage
from cachepilot_langgraph._shared import current_config, export, sync_state, use_graph_store
from cachepilot_langgraph.cache_marks import is_anthropic_model, mark_request, uses_breakpoints
from cachepilot_langgraph.convert import (
    MessageConverter,
    ordered,
    system_text,
    to_langchain,
    tool_name_of,
    tool_schema,
)
from cachepilot_langgraph.evicted import EvictedViews
from cachepilot_langgraph.native import mark_stubs, natively_cleared
from cachepilot_langgraph.recall_tool import make_recall_tool
from cachepilot_langgraph.state import (
    PILOT_STATE_KEY,
    SCOPE_KEY,
    configured_thread,
    newest_pilot_state,
    scoped,
)

__all__ = ["CachePilotMiddleware", "CachePilotState", "Prepared"]

logger = logging.getLogger(__name__)


class CachePilotState(AgentState[Any]):
    """Agent state with the thread's pilot state (private: checkpointed, not input or output)."""

    # The reducer must be the last annotation: LangGraph reads only `__metadata__[-1]`.
    cachepilot: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr, newest_pilot_state]]
    cachepilot_scope: NotRequired[Annotated[str | None, PrivateStateAttr]]


@dataclass(slots=True)
class Prepared:
    """One model call after `prepare`: the request to send and what it was built from."""

    request: ModelRequest[Any]
    thread: str
    sent: list[BaseMessage]
    """The message list handed to the inner handler (what inner middleware may append to)."""
    new_scope: str | None = None
    """A scope created for this run (no `thread_id`), to record in graph state."""
    core: list[Message] = field(default_factory=list)
    system: str | None = None
    schemas: list[dict[str, Any]] = field(default_factory=list)
    recall: bool = True
    unmarked: ModelRequest[Any] | None = None
    """The same request without cachepilot's cache marks (None: it placed none)."""
    unmarked_sent: list[BaseMessage] | None = None


def _too_many_marks(exc: BaseException) -> bool:
    """The provider's answer to a request with more cache breakpoints than it allows."""
    try:
        text = str(exc)
    except Exception:
        return False
    return "cache_control" in text and "maximum" in text


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
        recall: register the `recall` tool (default: `pilot.config.recall_tool`). The model
            is shown it, and reduced outputs name refs, only on calls that offer other tools;
            a tool-less agent keeps its plain graph only with `recall=False` (a registered tool
            gives the graph a tools node).
        max_ephemeral_scopes: how many scopes of runs without a `thread_id` stay live.
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
        recall: bool | None = None,
        max_ephemeral_scopes: int = 1_024,
    ) -> None:
        super().__init__()
        if pilot is not None and not isinstance(pilot, CachePilot):
            raise ValueError(f"pilot must be a CachePilot, not {type(pilot).__name__}")
        if clock is not None and not callable(clock):
            raise ValueError("clock must be a callable returning Unix time")
        if max_ephemeral_scopes < 1:
            raise ValueError(f"max_ephemeral_scopes must be >= 1, got {max_ephemeral_scopes}")
        self.pilot = pilot if pilot is not None else CachePilot()
        self.namespace = namespace
        self._clock = clock or time.time
        self._use_graph_store = use_graph_store
        self.metrics = metrics
        self._converter = MessageConverter()
        self._marks_rejected = False
        self._offer_recall = self.pilot.config.recall_tool if recall is None else bool(recall)
        self._recall_tool = make_recall_tool(self.pilot, namespace=namespace)
        self.tools: list[BaseTool] = [self._recall_tool] if self._offer_recall else []
        self._ephemeral: OrderedDict[str, None] = OrderedDict()
        self._ephemeral_lock = threading.Lock()
        self._max_ephemeral = max_ephemeral_scopes
        self._evicted = EvictedViews()

    @property
    def name(self) -> str:
        """Middleware name (unique per agent)."""
        return "CachePilotMiddleware"

    @property
    def clock(self) -> Callable[[], float]:
        """The time source of the cold-cache rule."""
        return self._clock

    # --- scope ---------------------------------------------------------------------------------

    def _thread(
        self, config: RunnableConfig | None, state: Mapping[str, Any]
    ) -> tuple[str, str | None]:
        """(thread, scope created now): the `thread_id`, else this run's own scope."""
        configured = configured_thread(config)
        if configured is not None:
            return scoped(configured, self.namespace), None
        existing = state.get(SCOPE_KEY)
        if isinstance(existing, str) and existing:
            self._touch_ephemeral(existing)
            return existing, None
        scope = scoped(f"run-{uuid.uuid4().hex}", self.namespace)
        self._touch_ephemeral(scope)
        return scope, scope

    def _touch_ephemeral(self, scope: str) -> None:
        dropped: list[str] = []
        with self._ephemeral_lock:
            self._ephemeral[scope] = None
            self._ephemeral.move_to_end(scope)
            while len(self._ephemeral) > self._max_ephemeral:
                dropped.append(self._ephemeral.popitem(last=False)[0])
        for old in dropped:
            self.pilot.drop_thread(old)

    # --- model calls -------------------------------------------------------------------------

    def _graph_store(self, store: object) -> None:
        if self._use_graph_store:
            use_graph_store(self.pilot, store)

    def _inputs(self, request: ModelRequest[Any]) -> tuple[str, str | None, bool, list[Message]]:
        state = request.state if isinstance(request.state, Mapping) else {}
        thread, new_scope = self._thread(current_config(), state)
        self._graph_store(getattr(request.runtime, "store", None))
        sync_state(self.pilot, thread, state.get(PILOT_STATE_KEY))
        others = [t for t in request.tools if tool_name_of(t) != RECALL_TOOL_NAME]
        recall = self._offer_recall and bool(others)
        return thread, new_scope, recall, self._converter.to_core(request.messages)

    def _finish(
        self,
        request: ModelRequest[Any],
        *,
        thread: str,
        new_scope: str | None,
        recall: bool,
        core: list[Message],
        result: tuple[str | None, list[Message], list[dict[str, Any]]],
        system: str | None,
        schemas: list[dict[str, Any]],
    ) -> Prepared:
        out_system, view, out_tools = result
        by_id = {m.id: m for m in request.messages if m.id}
        sent = [to_langchain(m, self._converter, by_id) for m in view]
        # A ContextEditingMiddleware listed after this one leaves the plan's stubs alone.
        sent = mark_stubs(view, sent, request.messages)
        overrides: dict[str, Any] = {"messages": sent}
        if out_system != system:
            overrides["system_message"] = (
                None if out_system is None else SystemMessage(content=out_system)
            )
        names = [tool_name(t) for t in out_tools]
        tools = (
            request.tools
            if recall
            else [t for t in request.tools if tool_name_of(t) != RECALL_TOOL_NAME]
        )
        overrides["tools"] = ordered(tools, names)
        unmarked: ModelRequest[Any] | None = None
        unmarked_sent: list[BaseMessage] | None = None
        if (
            not self._marks_rejected
            and is_anthropic_model(request.model)
            and uses_breakpoints(self.pilot)
        ):
            unmarked_sent = list(sent)
            unmarked = request.override(**{**overrides, "messages": unmarked_sent})
            # Marks go on copies in the request only (never into graph state).
            marked = mark_request(
                self.pilot,
                thread,
                system_text=out_system,
                view=view,
                schemas=out_tools,
                system=overrides.get("system_message", request.system_message),
                messages=sent,
                tools=overrides["tools"],
                options=request.model_settings,
            )
            sent[:] = marked.messages
            if marked.system is not overrides.get("system_message", request.system_message):
                overrides["system_message"] = marked.system
        return Prepared(
            request.override(**overrides),
            thread,
            sent,
            new_scope,
            core,
            system,
            schemas,
            recall,
            unmarked,
            unmarked_sent,
        )

    def _shown_inputs(
        self, request: ModelRequest[Any], thread: str, core: list[Message]
    ) -> tuple[list[Message], frozenset[str]]:
        """The transcript to reduce and the call ids shown as they are: results a
        `ContextEditingMiddleware` listed before this one cleared stay as cleared; results a
        host moved to its virtual filesystem (deepagents) carry the view of their file."""
        native = frozenset(natively_cleared(request.messages))
        state = request.state if isinstance(request.state, Mapping) else {}
        core, evicted = self._evicted.apply(self.pilot, thread, core, state)
        return core, native | evicted

    def _prepare(self, request: ModelRequest[Any]) -> Prepared:
        thread, new_scope, recall, core = self._inputs(request)
        system = system_text(request.system_message)
        schemas = [tool_schema(t) for t in request.tools if tool_name_of(t) != RECALL_TOOL_NAME]
        core, native = self._shown_inputs(request, thread, core)
        shown = self.pilot.reduce_results(core, thread, recall=recall, native=native)
        result = self.pilot.prepare(
            system, shown, schemas, thread, now=self._clock(), recall=recall
        )
        return self._finish(
            request,
            thread=thread,
            new_scope=new_scope,
            recall=recall,
            core=shown,
            result=result,
            system=system,
            schemas=schemas,
        )

    async def _aprepare(self, request: ModelRequest[Any]) -> Prepared:
        thread, new_scope, recall, core = self._inputs(request)
        system = system_text(request.system_message)
        schemas = [tool_schema(t) for t in request.tools if tool_name_of(t) != RECALL_TOOL_NAME]
        core, native = self._shown_inputs(request, thread, core)
        shown = await self.pilot.areduce_results(core, thread, recall=recall, native=native)
        result = await self.pilot.aprepare(
            system, shown, schemas, thread, now=self._clock(), recall=recall
        )
        return self._finish(
            request,
            thread=thread,
            new_scope=new_scope,
            recall=recall,
            core=shown,
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
                    logger.warning(
                        "thread %s: unreadable usage_metadata", thread_label(thread), exc_info=True
                    )
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
        request: ModelRequest[Any],
        prepared: Prepared,
        sent_before: int,
        result: ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any],
    ) -> ExtendedModelResponse[Any]:
        # Inner middleware may append to the list it was handed (LangChain's documented way
        # to add a message); in a plain agent that list is the state's, so carry the appends
        # over to the list this middleware was given.
        appended = prepared.sent[sent_before:]
        if appended and isinstance(request.messages, list):
            request.messages.extend(appended)  # type: ignore[arg-type]
        command: Command[Any] | None = None
        if isinstance(result, ExtendedModelResponse):
            response = result.model_response
            command = result.command
        elif isinstance(result, AIMessage):
            response = ModelResponse(result=[result])
        else:
            response = result
        self._record(prepared.thread, response)
        # What the next call's fold will most likely need, computed while the tools run
        # (in the pilot's background worker; the requests are the same bytes without it).
        self.pilot.precompute_soon(prepared.thread)
        update: dict[str, Any] = {PILOT_STATE_KEY: export(self.pilot, prepared.thread)}
        if prepared.new_scope is not None:
            update[SCOPE_KEY] = prepared.new_scope
        return ExtendedModelResponse(model_response=response, command=_merged(command, update))

    def _emergency(self, prepared: Prepared) -> bool:
        folded = self.pilot.emergency_fold(
            prepared.system,
            prepared.core,
            prepared.thread,
            prepared.schemas,
            recall=prepared.recall,
        )
        if folded:
            logger.warning(
                "thread %s: context too long for the provider; folded history and retrying once",
                thread_label(prepared.thread),
            )
        return folded

    def _retry_request(self, request: ModelRequest[Any], prepared: Prepared) -> Prepared:
        """The request again after an emergency fold, without reloading graph state (which
        does not hold the fold yet)."""
        system = prepared.system
        result = self.pilot.prepare(
            system,
            prepared.core,
            prepared.schemas,
            prepared.thread,
            now=self._clock(),
            maintain=False,
            recall=prepared.recall,
        )
        return self._finish(
            request,
            thread=prepared.thread,
            new_scope=prepared.new_scope,
            recall=prepared.recall,
            core=prepared.core,
            result=result,
            system=system,
            schemas=prepared.schemas,
        )

    def _without_marks(self, exc: BaseException, prepared: Prepared) -> Prepared | None:
        """The request again without cachepilot's marks when the provider refused their
        number (marks an inner middleware adds are not visible here); marking stops."""
        if prepared.unmarked is None or prepared.unmarked_sent is None:
            return None
        if not _too_many_marks(exc):
            return None
        self._marks_rejected = True
        logger.warning(
            "the provider refused the request's cache marks (%s): a middleware listed after "
            "cachepilot adds its own; retrying without cachepilot's marks, and placing none "
            "from now on (list cachepilot after that middleware to keep both)",
            type(exc).__name__,
        )
        return replace(
            prepared,
            request=prepared.unmarked,
            sent=prepared.unmarked_sent,
            unmarked=None,
            unmarked_sent=None,
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ExtendedModelResponse[Any]:
        """Send the prepared view; persist the pilot state."""
        prepared = self._prepare(request)
        sent_before = len(prepared.sent)
        try:
            result = handler(prepared.request)
        except Exception as exc:
            unmarked = self._without_marks(exc, prepared)
            if unmarked is not None:
                prepared = unmarked
            elif not is_context_length_error(exc) or not self._emergency(prepared):
                raise
            else:
                prepared = self._retry_request(request, prepared)
            sent_before = len(prepared.sent)
            result = handler(prepared.request)
        return self._respond(request, prepared, sent_before, result)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ExtendedModelResponse[Any]:
        """Async twin of `wrap_model_call`."""
        prepared = await self._aprepare(request)
        sent_before = len(prepared.sent)
        try:
            result = await handler(prepared.request)
        except Exception as exc:
            unmarked = self._without_marks(exc, prepared)
            if unmarked is not None:
                prepared = unmarked
            elif not is_context_length_error(exc) or not self._emergency(prepared):
                raise
            else:
                prepared = self._retry_request(request, prepared)
            sent_before = len(prepared.sent)
            result = await handler(prepared.request)
        return self._respond(request, prepared, sent_before, result)


def _merged(command: Command[Any] | None, update: dict[str, Any]) -> Command[Any]:
    """`update` added to an inner middleware's command (its own keys win)."""
    if command is None:
        return Command(update=update)
    inner = command.update
    if inner is None:
        merged: Any = update
    elif isinstance(inner, Mapping):
        merged = {**update, **inner}
    else:  # a list of (key, value) pairs
        merged = [*update.items(), *inner]
    return Command(graph=command.graph, update=merged, resume=command.resume, goto=command.goto)

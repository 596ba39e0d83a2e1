"""`CachePilotChatModel`: a chat model wrapper for hand-built graphs.

```python
model = CachePilotChatModel(ChatOpenAI(model="gpt-5.4-mini"), pilot)
response = model.bind_tools(tools).invoke([SystemMessage(prompt), *state["messages"]])
```

Every call is rendered through `CachePilot.prepare(..., maintain=False)`: the system prompt
is canonicalized (volatile values move to a stable block), the thread's plan is applied, and
the tools are bound in a stable order with `recall` among them from the first call. Usage
(cached tokens included) is recorded from the response's `usage_metadata`. The thread is the
LangGraph `thread_id` of the running step; a run without one gets a scope of its own
(shared by the run's other cachepilot components, never by another run).

When a `CachePilotNode` ran before the model node, the call was already committed there and
the wrapper only renders it (the state is left exactly as the node persisted it). Without
the node, the wrapper commits the call itself; the state then reaches graph state with the
next tool node update.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    BaseMessageChunk,
    SystemMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.constants import TAG_NOSTREAM
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from cachepilot import CachePilot
from cachepilot.canonical import tool_name
from cachepilot.fold import is_context_length_error
from cachepilot.messages import Message
from cachepilot.support.log_labels import thread_label
from cachepilot.usage import Usage
from cachepilot_langgraph._framework_private import identifying_params, llm_type
from cachepilot_langgraph._shared import (
    current_config,
    current_store,
    link_of,
    run_thread,
    use_graph_store,
)
from cachepilot_langgraph.cache_marks import is_anthropic_model, mark_request, uses_breakpoints
from cachepilot_langgraph.convert import (
    MessageConverter,
    ordered,
    system_text,
    to_langchain,
)
from cachepilot_langgraph.node import ToolLike, tool_schemas
from cachepilot_langgraph.recall_tool import make_recall_tool

__all__ = ["CachePilotChatModel"]

logger = logging.getLogger(__name__)

_TOOLS_KW = "cachepilot_tools"
_OPTIONS_KW = "cachepilot_tool_options"


@dataclass(slots=True)
class _Call:
    """One prepared model call."""

    thread: str
    messages: list[BaseMessage]
    runnable: Runnable[Any, Any]
    kwargs: dict[str, Any]
    committed: bool
    system: str | None
    core: list[Message]
    schemas: list[dict[str, Any]]


class CachePilotChatModel(BaseChatModel):
    """Wrap a chat model so every call is cache-stable and can recall archived outputs.

    Args:
        model: the chat model to call (anything with `bind_tools`).
        pilot: the pilot shared with the graph's node, tool node and reducer;
            `CachePilot()` when omitted.
        **kwargs: the other fields by name (`namespace`, the prefix of the cachepilot thread
            as given to the other components; `clock`; `use_graph_store`), each documented
            below.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: BaseChatModel
    """The wrapped chat model."""
    pilot: CachePilot = Field(default_factory=CachePilot)
    """The pilot rendering each call."""
    namespace: str | None = None
    """Prefix of the cachepilot thread."""
    clock: Callable[[], float] | None = None
    """Time source for the cold-cache rule (`time.time` when None)."""
    use_graph_store: bool = True
    """Route artifacts to the graph's `BaseStore` when the pilot has none."""
    cache: BaseCache | bool | None = Field(default=False, exclude=True)
    """Never look the wrapper's calls up in an LLM cache: each call renders the thread's
    state (the wrapped model may still use one, on the rendered request)."""

    _converter: MessageConverter = PrivateAttr(default_factory=MessageConverter)
    _recall: BaseTool | None = PrivateAttr(default=None)

    def __init__(self, model: BaseChatModel, pilot: CachePilot | None = None, **kwargs: Any):
        if not isinstance(model, BaseChatModel):
            raise ValueError(f"model must be a LangChain chat model, not {type(model).__name__}")
        if pilot is not None:
            kwargs["pilot"] = pilot
        super().__init__(model=model, **kwargs)  # type: ignore[call-arg]
        if self.pilot.config.recall_tool:
            self._recall = make_recall_tool(self.pilot, namespace=self.namespace)

    @field_validator("clock")
    @classmethod
    def _callable_clock(cls, value: object) -> object:
        if value is not None and not callable(value):
            raise ValueError("clock must be a callable returning Unix time")
        return value

    @property
    def _llm_type(self) -> str:
        return f"cachepilot-{llm_type(self.model)}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"cachepilot": True, "model": identifying_params(self.model)}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools; each call binds them to the wrapped model in a stable order, with
        `recall` added. Extra keyword arguments go to the wrapped model's `bind_tools`."""
        options = dict(kwargs)
        if tool_choice is not None:
            options["tool_choice"] = tool_choice
        return self.bind(**{_TOOLS_KW: list(tools), _OPTIONS_KW: options})

    # --- preparing a call ----------------------------------------------------------------

    def _thread(self) -> str:
        return run_thread(self.pilot, current_config(), self.namespace)

    def _begin(self, messages: list[BaseMessage], kwargs: Mapping[str, Any], thread: str) -> _Call:
        rest = dict(kwargs)
        tools: list[ToolLike] = list(rest.pop(_TOOLS_KW, None) or [])
        options: dict[str, Any] = dict(rest.pop(_OPTIONS_KW, None) or {})
        if self.use_graph_store:
            use_graph_store(self.pilot, current_store())
        system_message = (
            messages[0] if messages and isinstance(messages[0], SystemMessage) else None
        )
        history = messages[1:] if system_message is not None else list(messages)
        system = system_text(system_message)
        core = self._converter.to_core(history)
        schemas = tool_schemas(tools)
        link = link_of(self.pilot)
        with link.lock:
            committed = link.committed.get(thread) == self.pilot.state(thread).revision
        call = _Call(thread, [], self.model, rest, committed, system, core, schemas)
        out_system, view, out_tools = self._render(call)
        by_id = {m.id: m for m in history if m.id}
        lc_view = [to_langchain(m, self._converter, by_id) for m in view]
        if out_system is None:
            head: SystemMessage | None = None
        elif system_message is not None and out_system == system:
            head = system_message
        else:
            head = SystemMessage(content=out_system)
        if is_anthropic_model(self.model) and uses_breakpoints(self.pilot):
            # Marks go on copies in the request only (never into graph state).
            marked = mark_request(
                self.pilot,
                thread,
                system_text=out_system,
                view=view,
                schemas=out_tools,
                system=head,
                messages=lc_view,
                tools=tools,
                options=options,
            )
            head, lc_view = marked.system, marked.messages
        call.messages = ([head] if head is not None else []) + lc_view
        names = [tool_name(t) for t in out_tools]
        candidates: list[Any] = [*tools, *([self._recall] if self._recall is not None else [])]
        bound = ordered(candidates, names)
        if bound:
            call.runnable = self.model.bind_tools(bound, **options)
        elif options:
            call.runnable = self.model.bind(**options)
        return call

    def _render(self, call: _Call) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """`prepare(maintain=False)`; a call the maintenance node committed leaves no trace."""
        pilot, thread = self.pilot, call.thread
        now = (self.clock or time.time)()
        if not call.committed:
            return pilot.prepare(
                call.system, call.core, call.schemas, thread, now=now, maintain=False
            )
        before = pilot.state(thread).model_copy(deep=True)
        result = pilot.prepare(
            call.system, call.core, call.schemas, thread, now=now, maintain=False
        )
        after = pilot.state(thread).canonical
        if after.values != before.canonical.values or after.placement != before.canonical.placement:
            # The node froze values from another system prompt: keep this call's (the model
            # sees them) and say how to fix it.
            link_of(pilot).warn_once(
                "system-mismatch",
                "the CachePilotNode's system prompt differs from the one the model is sent; "
                "pass the same text as `system=` to the node",
            )
            self._recommit(thread)
        else:
            pilot.load_state(thread, before)
        return result

    def _recommit(self, thread: str) -> None:
        link = link_of(self.pilot)
        with link.lock:
            link.committed[thread] = self.pilot.state(thread).revision

    def _finish(self, call: _Call, message: BaseMessage | None) -> None:
        if message is None:
            return
        usage = getattr(message, "usage_metadata", None)
        if usage:
            try:
                self.pilot.record_usage(Usage.from_langchain(usage), call.thread)
            except Exception:
                logger.warning(
                    "thread %s: unreadable usage_metadata", thread_label(call.thread), exc_info=True
                )
        link_of(self.pilot).note_calls(call.thread, (message,))
        if call.committed:
            self._recommit(call.thread)  # a second call in the same step renders the same way

    def _fold(self, call: _Call, exc: Exception) -> bool:
        if not is_context_length_error(exc):
            return False
        folded = self.pilot.emergency_fold(call.system, call.core, call.thread, call.schemas)
        if folded:
            logger.warning(
                "thread %s: context too long; folded and retrying", thread_label(call.thread)
            )
            if call.committed:
                self._recommit(call.thread)
        return folded

    @staticmethod
    def _config(run_manager: Any) -> RunnableConfig:
        # The wrapped model's run nests under this one; `nostream` keeps LangGraph's
        # "messages" stream from emitting every token twice (this run emits them).
        config: RunnableConfig = {"tags": [TAG_NOSTREAM]}
        if run_manager is not None:
            config["callbacks"] = CallbackManager(
                handlers=list(run_manager.inheritable_handlers),
                inheritable_handlers=list(run_manager.inheritable_handlers),
                parent_run_id=run_manager.run_id,
                tags=list(run_manager.inheritable_tags),
                inheritable_tags=list(run_manager.inheritable_tags),
                metadata=dict(run_manager.inheritable_metadata),
                inheritable_metadata=dict(run_manager.inheritable_metadata),
            )
        return config

    # --- BaseChatModel ---------------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        thread = self._thread()
        call = self._begin(messages, kwargs, thread)
        config = self._config(run_manager)
        try:
            result = call.runnable.invoke(call.messages, config, stop=stop, **call.kwargs)
        except Exception as exc:
            if not self._fold(call, exc):
                raise
            call = self._begin(messages, kwargs, thread)
            result = call.runnable.invoke(call.messages, config, stop=stop, **call.kwargs)
        message = _as_ai(result)
        self._finish(call, message)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        thread = self._thread()
        call = await asyncio.to_thread(self._begin, messages, kwargs, thread)
        config = self._config(run_manager)
        try:
            result = await call.runnable.ainvoke(call.messages, config, stop=stop, **call.kwargs)
        except Exception as exc:
            if not await asyncio.to_thread(self._fold, call, exc):
                raise
            call = await asyncio.to_thread(self._begin, messages, kwargs, thread)
            result = await call.runnable.ainvoke(call.messages, config, stop=stop, **call.kwargs)
        message = _as_ai(result)
        self._finish(call, message)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        thread = self._thread()
        call = self._begin(messages, kwargs, thread)
        config = self._config(run_manager)
        merged: BaseMessageChunk | None = None
        for attempt in range(2):
            try:
                for chunk in call.runnable.stream(call.messages, config, stop=stop, **call.kwargs):
                    piece = _as_chunk(chunk)
                    merged = piece if merged is None else merged + piece
                    yield ChatGenerationChunk(message=piece)
                break
            except Exception as exc:
                # Retry only a request the provider refused before any token was produced.
                if attempt or merged is not None or not self._fold(call, exc):
                    raise
                call = self._begin(messages, kwargs, thread)
        self._finish(call, merged)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        thread = self._thread()
        call = await asyncio.to_thread(self._begin, messages, kwargs, thread)
        config = self._config(run_manager)
        merged: BaseMessageChunk | None = None
        for attempt in range(2):
            try:
                async for chunk in call.runnable.astream(
                    call.messages, config, stop=stop, **call.kwargs
                ):
                    piece = _as_chunk(chunk)
                    merged = piece if merged is None else merged + piece
                    yield ChatGenerationChunk(message=piece)
                break
            except Exception as exc:
                if attempt or merged is not None:
                    raise
                if not await asyncio.to_thread(self._fold, call, exc):
                    raise
                call = await asyncio.to_thread(self._begin, messages, kwargs, thread)
        self._finish(call, merged)


def _as_ai(result: object) -> AIMessage:
    if isinstance(result, AIMessage):
        return result
    if isinstance(result, BaseMessage):
        return AIMessage(content=result.content, id=result.id)
    return AIMessage(content=str(result))


def _as_chunk(chunk: object) -> BaseMessageChunk:
    if isinstance(chunk, BaseMessageChunk):
        return chunk
    if isinstance(chunk, AIMessage):
        return AIMessageChunk(
            content=chunk.content,
            tool_call_chunks=[
                {
                    "name": c["name"],
                    "args": json.dumps(c["args"]),
                    "id": c["id"],
                    "index": i,
                    "type": "tool_call_chunk",
                }
                for i, c in enumerate(chunk.tool_calls)
            ],
            usage_metadata=chunk.usage_metadata,
            id=chunk.id,
        )
    return AIMessageChunk(content=str(chunk))

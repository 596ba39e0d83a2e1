"""`PilotModel` and `PilotProvider`: the model answers `recall` itself, the SDK never sees it.

`PilotModel` wraps any Agents SDK `Model`. For a call the plugin's input filter prepared (and
only then), it offers the model one more tool, `recall`; when the model calls it, the wrapper
answers, appends the call and its answer to the input and asks the inner model again, and
returns the final response to the SDK. The run's items, hooks, guardrails, sessions and
`final_output` therefore never contain recall, and every agent whose model goes through the
wrapper can recall (handoff targets, agents whose tools change at run time), without touching
any agent's tools. Outside a prepared call the wrapper is a pass-through.

- Usage: each inner response is recorded in the pilot; the response handed to the SDK carries
  the sum of all of them (requests included).
- Streaming: events pass through as they come until the first client-side tool call of a
  response starts; from there the rest of that response is held until it completes, then
  released (no recall in it) or dropped (recall: answered, and the next response streams).
- Context length: when the provider rejects the prompt as too long, the thread gets an
  emergency fold (persisted) and the call is retried once with the folded view.

`PilotProvider` wraps the run config's model provider so that models resolved by name get the
wrapper. When the plugin made the run config without a provider of the user's, it does what the
SDK does for a run without a run config: one provider per run, closed when the run ends.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Protocol

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelProvider, ModelTracing
from agents.models.multi_provider import MultiProvider
from agents.tool import FunctionTool, Tool
from agents.usage import Usage as SdkUsage
from openai.types.responses import ResponseCompletedEvent, ResponseUsage
from openai.types.responses.response_prompt_param import ResponsePromptParam

from cachepilot.fold import is_context_length_error
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.support.log_labels import thread_label
from cachepilot_agents._context import PreparedCall
from cachepilot_agents._sdk_private import (
    RUN_END_HOOK,
    attach_usage,
    response_usage,
    sends_default_cache_key,
)
from cachepilot_agents.runs import current_run

if TYPE_CHECKING:
    from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest

__all__ = ["MAX_RECALL_ROUNDS", "ModelOwner", "PilotModel", "PilotProvider"]

logger = logging.getLogger(__name__)

MAX_RECALL_ROUNDS = 8
"""Recall rounds answered per model call; past it the model is told to go on without."""

_LIMIT_NOTE = (
    "[recall: the limit of {n} recall rounds for this step is reached; continue with what you have]"
)
_START_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})
_FAIL_EVENTS = frozenset({"response.failed", "response.incomplete", "error", "response.error"})
# Output items the SDK would run on the client side (their events are held, see the module doc).
_CLIENT_CALLS = frozenset(
    {
        "function_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "custom_tool_call",
        "mcp_approval_request",
    }
)


class ModelOwner(Protocol):
    """What the model wrapper and provider ask of their plugin (`CachePilotAgents` is one)."""

    @property
    def recall_tool(self) -> Any:
        """The `recall` tool as models are offered it."""
        ...

    def model(self, model: Model) -> Model:
        """The plugin's wrapper of `model`."""
        ...

    def claim(self, instructions: str | None, items: object) -> PreparedCall | None:
        """The prepared call this model call is, or None."""
        ...

    def with_cache_key(
        self, call: PreparedCall | None, settings: ModelSettings, model: Model
    ) -> ModelSettings:
        """`settings` with the thread's `prompt_cache_key` where one is due."""
        ...

    async def answer_recall(self, arguments: str, call: PreparedCall) -> str:
        """The answer to one recall call."""
        ...

    async def add_exchange(self, call: PreparedCall, items: list[Any]) -> None:
        """Keep a recall exchange in the thread's views."""
        ...

    def record_usage(self, call: PreparedCall, usage: SdkUsage, response_id: str | None) -> None:
        """Record one model request's usage."""
        ...

    async def run_ended(self) -> None:
        """The end of the run executing in this task."""
        ...

    def at_run_end(self, run: object, callback: Callable[[object], Awaitable[None]]) -> None:
        """Call `callback(run)` when `run` ends."""
        ...


def _item_type(item: object) -> str | None:
    value = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
    return value if isinstance(value, str) else None


def _is_recall(item: object) -> bool:
    return _item_type(item) == "function_call" and getattr(item, "name", None) == RECALL_TOOL_NAME


def _kept_for_exchange(output: list[Any]) -> list[Any]:
    """The output items a recall round keeps: messages, reasoning and the recall calls.

    Other client-side calls are dropped (they never ran; the model asks again knowing what it
    recalled); a reasoning item goes with the item right after it.
    """
    kept: list[Any] = []
    pending: list[Any] = []
    for item in output:
        kind = _item_type(item)
        if kind == "reasoning":
            pending.append(item)
            continue
        keep = kind == "message" or _is_recall(item)
        if keep:
            kept.extend(pending)
            kept.append(item)
        pending = []
    return kept


def _response_usage(total: SdkUsage, template: ResponseUsage) -> ResponseUsage:
    """A `ResponseUsage` carrying `total` (and the SDK's lossless copy of it)."""
    summed = template.model_copy(
        update={
            "input_tokens": total.input_tokens,
            "output_tokens": total.output_tokens,
            "total_tokens": total.total_tokens,
            "input_tokens_details": copy.deepcopy(total.input_tokens_details),
            "output_tokens_details": copy.deepcopy(total.output_tokens_details),
        }
    )
    attach_usage(summed, total)  # the SDK's lossless copy (request count, per-request details)
    return summed


class _Round:
    """The state of one wrapped model call across its recall rounds."""

    def __init__(self, call: PreparedCall, system: str | None, items: list[Any]) -> None:
        self.call = call
        self.system = system
        self.base = items
        self.added: list[Any] = []
        self.rounds = 0
        self.folded = False
        self.usage = SdkUsage()

    @property
    def input(self) -> list[Any]:
        return [*self.base, *self.added]


class PilotModel(Model):
    """Wraps `inner` (see the module docstring). Attributes it does not define are `inner`'s.

    Args:
        owner: the `CachePilotAgents` whose input filter prepares the calls.
        inner: the model doing the work.
    """

    def __init__(self, owner: ModelOwner, inner: Model) -> None:
        if isinstance(inner, PilotModel):
            raise ValueError("the model is already wrapped")
        self._owner = owner
        self._inner = inner

    @property
    def inner(self) -> Model:
        """The wrapped model."""
        return self._inner

    @property
    def owner(self) -> ModelOwner:
        """The plugin the wrapper belongs to."""
        return self._owner

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class does not define (e.g. a test double's log).
        if name in ("_inner", "_owner"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    # The SDK (and users) check model classes, e.g. `isinstance(m, OpenAIChatCompletionsModel)`:
    # report the inner model's class, as the inner model would.
    @property  # type: ignore[misc]
    def __class__(self) -> type[Any]:
        return type(self._inner)

    def __copy__(self) -> PilotModel:
        return PilotModel(self._owner, copy.copy(self._inner))

    def __deepcopy__(self, memo: dict[int, Any]) -> PilotModel:
        # The plugin is a shared service (locks, stores): copies share it.
        return PilotModel(self._owner, copy.deepcopy(self._inner, memo))

    def __repr__(self) -> str:
        return f"PilotModel({self._inner!r})"

    # --- the Model interface -----------------------------------------------------------------

    async def close(self) -> None:
        """Close the inner model."""
        await self._inner.close()

    # The SDK's run loop awaits this (private) hook of the model it used when a run ends
    # (`_sdk_private.RUN_END_HOOK`); without it, run resources go when the SDK drops the run.
    async def _cleanup_on_run_end(self, owner: object) -> None:
        """The SDK's end-of-run notice: the inner model's, and the plugin's run resources.

        Both start at once: the plugin's (closing the run's provider, dropping its scope)
        never waits on the inner model's. When the run is cancelled, the plugin's goes on to
        its end without holding the cancellation up, as the SDK's own provider cleanup does
        (a stream consumer that cancels must not wait on a cleanup that cannot finish).
        """
        ours = asyncio.ensure_future(self._owner.run_ended())
        inner_cleanup = getattr(self._inner, RUN_END_HOOK, None)
        try:
            if callable(inner_cleanup):
                await inner_cleanup(owner)
        except asyncio.CancelledError:
            _run_on(ours)
            raise
        except BaseException:
            await _join(ours)
            raise
        await _join(ours)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        """The inner model's advice."""
        return self._inner.get_retry_advice(request)

    def _supports_default_prompt_cache_key(self) -> bool:
        # The SDK asks the model it calls (this wrapper): answer as the inner model would.
        return sends_default_cache_key(self._inner)

    def _offered(self, call: PreparedCall | None, tools: list[Tool]) -> list[Tool] | None:
        """The tools offered with recall, or None when this call does not offer it.

        Offered from the first call to a model that has function tools (their results are
        what gets reduced), so its tool list never changes mid-thread; to any other model
        once its view names a ref (a handoff target reading reduced history).
        """
        if call is None or not call.recall:
            return None
        if any(getattr(t, "name", None) == RECALL_TOOL_NAME for t in tools):
            return None  # a tool of the user's has the name: never shadow it
        if not call.refs and not any(isinstance(t, FunctionTool) for t in tools):
            return None
        return [*tools, self._owner.recall_tool]

    async def get_response(  # noqa: PLR0917 - the SDK's Model signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """Ask the inner model, answering its recall calls first (see the module docstring)."""
        call = self._owner.claim(system_instructions, input)
        offered = self._offered(call, tools)
        model_settings = self._owner.with_cache_key(call, model_settings, self._inner)

        def ask(system: str | None, items: str | list[Any], with_tools: list[Tool]) -> Any:
            return self._inner.get_response(
                system,
                items,
                model_settings,
                with_tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        if call is None or isinstance(input, str):
            plain: ModelResponse = await ask(system_instructions, input, tools)
            return plain
        state = _Round(call, system_instructions, list(input))
        while True:
            try:
                response: ModelResponse = await ask(state.system, state.input, offered or tools)
            except Exception as exc:
                if not await self._fold(state, exc):
                    raise
                continue
            self._owner.record_usage(call, response.usage, response.response_id)
            state.usage.add(response.usage)
            recalls = [i for i in response.output if _is_recall(i)] if offered else []
            if not recalls:
                return dataclasses.replace(response, usage=state.usage)
            if state.rounds > MAX_RECALL_ROUNDS:
                output = [i for i in response.output if not _is_recall(i)]
                logger.warning(
                    "thread %s: recall calls past the limit dropped", thread_label(call.thread)
                )
                return dataclasses.replace(response, output=output, usage=state.usage)
            await self._answer(state, response.output, recalls)

    def stream_response(  # noqa: PLR0917 - the SDK's Model signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Stream the inner model, answering its recall calls (see the module docstring)."""
        call = self._owner.claim(system_instructions, input)
        offered = self._offered(call, tools)
        model_settings = self._owner.with_cache_key(call, model_settings, self._inner)

        def ask(
            system: str | None, items: str | list[Any], with_tools: list[Tool]
        ) -> AsyncIterator[TResponseStreamEvent]:
            return self._inner.stream_response(
                system,
                items,
                model_settings,
                with_tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        if call is None or isinstance(input, str):
            return ask(system_instructions, input, tools)
        return self._stream(_Round(call, system_instructions, list(input)), ask, offered or tools)

    async def _stream(
        self,
        state: _Round,
        ask: Callable[[str | None, list[Any], list[Tool]], AsyncIterator[TResponseStreamEvent]],
        tools: list[Tool],
    ) -> AsyncIterator[TResponseStreamEvent]:
        call = state.call
        recall_on = any(t is self._owner.recall_tool for t in tools)
        while True:
            held: list[TResponseStreamEvent] = []
            holding = False
            completed: ResponseCompletedEvent | None = None
            passed = False
            try:
                stream = ask(state.system, state.input, tools)
                async with aclosing(stream) as events:  # type: ignore[type-var]
                    async for event in events:
                        kind = getattr(event, "type", None)
                        if isinstance(event, ResponseCompletedEvent):
                            completed = event
                            continue
                        if kind in _FAIL_EVENTS:
                            for earlier in held:
                                yield earlier
                            held = []
                            passed = True
                            yield event
                            continue
                        if state.rounds and kind in _START_EVENTS:
                            continue  # one response per turn, as far as the SDK can tell
                        if (
                            recall_on
                            and not holding
                            and kind == "response.output_item.added"
                            and _item_type(getattr(event, "item", None)) in _CLIENT_CALLS
                        ):
                            holding = True
                        if holding:
                            held.append(event)
                            continue
                        passed = True
                        yield event
            except Exception as exc:
                if passed or not await self._fold(state, exc):
                    raise
                continue
            if completed is None:  # no terminal event: the SDK reports it as it would
                for earlier in held:
                    yield earlier
                return
            response = completed.response
            usage = response_usage(response.usage) if response.usage is not None else None
            if usage is not None:
                self._owner.record_usage(call, usage, response.id)
                state.usage.add(usage)
            recalls = [i for i in response.output if _is_recall(i)] if recall_on else []
            if recalls and state.rounds <= MAX_RECALL_ROUNDS:
                await self._answer(state, list(response.output), recalls)
                continue
            if recalls:
                logger.warning(
                    "thread %s: recall calls past the limit dropped", thread_label(call.thread)
                )
                response = response.model_copy(
                    update={"output": [i for i in response.output if not _is_recall(i)]}
                )
                held = [e for e in held if not _is_recall(getattr(e, "item", None))]
            for earlier in held:
                yield earlier
            if state.rounds and response.usage is not None:
                response = response.model_copy(
                    update={"usage": _response_usage(state.usage, response.usage)}
                )
            yield (
                completed.model_copy(update={"response": response})
                if (response is not completed.response)
                else completed
            )
            return

    # --- recall rounds and context-length recovery -------------------------------------------

    async def _answer(self, state: _Round, output: list[Any], recalls: list[Any]) -> None:
        """Answer a round's recall calls; the exchange joins the input and the thread's views."""
        call = state.call
        kept: list[Any] = ModelResponse(
            output=_kept_for_exchange(output), usage=SdkUsage(), response_id=None
        ).to_input_items()
        if call.strip_reasoning_ids:
            kept = [
                {k: v for k, v in item.items() if k != "id"}
                if isinstance(item, dict) and item.get("type") == "reasoning"
                else item
                for item in kept
            ]
        answers: list[Any] = []
        for item in recalls:
            call_id = str(getattr(item, "call_id", ""))
            if state.rounds >= MAX_RECALL_ROUNDS:
                text = _LIMIT_NOTE.format(n=MAX_RECALL_ROUNDS)
            else:
                text = await self._owner.answer_recall(str(getattr(item, "arguments", "")), call)
            answers.append({"type": "function_call_output", "call_id": call_id, "output": text})
        exchange = [*kept, *answers]
        state.added.extend(exchange)
        state.rounds += 1
        await self._owner.add_exchange(call, exchange)

    async def _fold(self, state: _Round, exc: Exception) -> bool:
        """After a context-length error: fold once, rebuild the input; False to re-raise."""
        call = state.call
        if state.folded or call.rebuild is None or not is_context_length_error(exc):
            return False
        state.folded = True
        rebuilt = await call.rebuild()
        if rebuilt is None:
            return False
        state.system, state.base = rebuilt[0], list(rebuilt[1])
        logger.warning(
            "thread %s: the provider rejected the prompt as too long; folded, retrying once",
            thread_label(call.thread),
        )
        return True


class PilotProvider(ModelProvider):
    """Resolves models with `inner` (or a provider per run) and wraps them in `PilotModel`.

    Args:
        owner: the plugin.
        inner: the user's provider (never closed here, as the SDK never closes it), or None:
            then each run gets its own `MultiProvider` (as the SDK makes for a run without a
            run config), closed when the run ends.
    """

    def __init__(
        self,
        owner: ModelOwner,
        inner: ModelProvider | None,
        factory: Callable[[], ModelProvider] = MultiProvider,
    ) -> None:
        self._owner = owner
        self._inner = inner
        self._factory = factory
        self._lock = threading.Lock()
        self._runs: dict[int, tuple[weakref.ref[Any], ModelProvider]] = {}
        self._shared: ModelProvider | None = None

    @property
    def inner(self) -> ModelProvider | None:
        """The user's provider (None when the plugin makes one per run)."""
        return self._inner

    def __copy__(self) -> PilotProvider:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> PilotProvider:
        return self  # holds the runs' providers: copies of a config share it

    def get_model(self, model_name: str | None) -> Model:
        """The inner provider's model, wrapped."""
        return self._owner.model(self._provider().get_model(model_name))

    def _provider(self) -> ModelProvider:
        if self._inner is not None:
            return self._inner
        return self.for_run(current_run())

    def for_run(self, run: object | None) -> ModelProvider:
        """The provider of `run` (made on first use, closed when the run ends)."""
        if self._inner is not None:
            return self._inner
        with self._lock:
            if run is None:  # no run object from the SDK: one provider for this config
                if self._shared is None:
                    self._shared = self._factory()
                return self._shared
            found = self._runs.get(id(run))
            if found is not None and found[0]() is run:
                return found[1]
            provider = self._factory()
            self._runs[id(run)] = (weakref.ref(run), provider)
            # Dropped with the run at the latest (its own end closes it first).
            weakref.finalize(run, self._runs.pop, id(run), None)
        self._owner.at_run_end(run, self.close_run)
        return provider

    async def close_run(self, run: object) -> None:
        """Close the provider `run` used (its end)."""
        with self._lock:
            found = self._runs.get(id(run))
            if found is None or found[0]() is not run:
                return
            del self._runs[id(run)]
        await _close(found[1])

    async def aclose(self) -> None:
        """Close the user's provider, or every provider this one made."""
        if self._inner is not None:
            await self._inner.aclose()
            return
        with self._lock:
            providers = [p for _, p in self._runs.values()]
            self._runs.clear()
            if self._shared is not None:
                providers.append(self._shared)
            self._shared = None
        for provider in providers:
            await _close(provider)


async def _close(provider: ModelProvider) -> None:
    """Close a provider a run made, as the SDK does for its own: finished despite repeated
    cancellation (then the cancellation goes on), a failure logged, never raised."""

    async def close() -> None:
        try:
            await provider.aclose()
        except Exception:
            logger.warning("Failed to close model provider created for run", exc_info=True)

    await _settle(asyncio.ensure_future(close()))


_RUNNING_ON: set[asyncio.Future[Any]] = set()
"""Cleanups left running by a cancelled run (held here: the loop keeps only weak refs)."""


def _run_on(task: asyncio.Future[Any]) -> None:
    """Let `task` finish on its own; its failure is logged, never lost."""
    if task.done():
        _log_failure(task)
        return
    _RUNNING_ON.add(task)
    task.add_done_callback(_RUNNING_ON.discard)
    task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("a run-end cleanup failed", exc_info=task.exception())


async def _join(task: asyncio.Future[Any]) -> None:
    """Wait for `task`; if the waiter is cancelled meanwhile, `task` runs on (`_run_on`)."""
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        _run_on(task)
        raise


async def _settle(task: asyncio.Future[Any]) -> None:
    """Wait for `task` to finish even through repeated cancellation, then re-raise it."""
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                continue
        raise

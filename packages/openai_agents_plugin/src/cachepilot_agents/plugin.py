"""`CachePilotAgents`: cachepilot for the OpenAI Agents SDK, through the SDK's own extension points.

```python
cp = CachePilotAgents(CachePilot())
session = SQLiteSession("user-1")
result = await Runner.run(agent, task, session=session, run_config=cp.run_config(session=session))
```

The run config is the one object to pass. It changes only what the model reads: tool return
values, `RunResult` items, `final_output`, hooks, guardrails and session items stay exactly what
the plain SDK produces.

- `run_config(base)`: a copy of `base` (or a new `RunConfig`) whose `call_model_input_filter`
  shows the model the pilot's view (`filter`, `view`), and whose model provider wraps every
  model in `PilotModel` (`model`): the model is offered `recall` and the wrapper answers it.
- `model(m)`: the wrapper for a `Model` instance an agent holds (the provider never sees
  those); `wrap(agent)` does it in place for an agent and the agents it hands off to (the
  agents stay the same objects). A model that is not wrapped reads the plain input.
- `session(inner)`: optional; any `Session` whose id is the thread, with the thread's
  `PilotState` kept beside it (`run_config(session=...)` does the same for a session passed
  to the SDK as it is).
- `hooks` / `hooks_with(user_hooks)`: optional; usage is recorded by the model wrapper.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from agents import Agent, RunConfig, RunHooks
from agents.handoffs import Handoff
from agents.lifecycle import RunHooksBase
from agents.memory import Session
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelProvider
from agents.run_config import ModelInputData
from agents.usage import Usage as SdkUsage

from cachepilot import CachePilot
from cachepilot.artifacts.base import check_thread
from cachepilot.diagnose.metrics import call_metrics, thread_metrics
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.support.log_labels import thread_label
from cachepilot.usage import Usage
from cachepilot_agents._context import PREPARED, PreparedCall
from cachepilot_agents._sdk_private import handoff_target, sends_default_cache_key
from cachepilot_agents.exchanges import ExchangeBook
from cachepilot_agents.filter import PilotInputFilter
from cachepilot_agents.hooks import CachePilotHooks, RequestUsage
from cachepilot_agents.items import TranscriptBuilder
from cachepilot_agents.media import MediaNotes
from cachepilot_agents.model import PilotModel, PilotProvider
from cachepilot_agents.persistence import ThreadPersistence
from cachepilot_agents.runs import RunScopes, current_run
from cachepilot_agents.session import CachePilotSession, session_proxy
from cachepilot_agents.state import SQLiteStateStore, StateStore, default_state_path
from cachepilot_agents.tools import answer_recall, recall_tool
from cachepilot_agents.tracing import agents_custom_span
from cachepilot_agents.view import ToolSchemas, build_view

__all__ = ["CachePilotAgents", "PilotInputFilter", "PromptCacheKeyMode", "prompt_cache_key_for"]

logger = logging.getLogger(__name__)

AgentT = TypeVar("AgentT", bound=Agent[Any])

_PROMPT_CACHE_KEY = "prompt_cache_key"

PromptCacheKeyMode = Literal["sdk", "always", "never"]
"""When the plugin adds a thread-derived `prompt_cache_key` (`CachePilotAgents(prompt_cache_key=)`):
where the SDK sends its default one, on every call, or never."""
_CACHE_KEY_MODES: tuple[PromptCacheKeyMode, ...] = ("sdk", "always", "never")
_MAX_REQUESTS = 10_000


def prompt_cache_key_for(thread: str, prefix: str = "cachepilot") -> str:
    """The `prompt_cache_key` of a thread: a digest, so ids never leave the process."""
    digest = hashlib.sha256(thread.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{prefix}-{digest}"


def _has_cache_key(settings: ModelSettings | None) -> bool:
    if settings is None:
        return False
    return any(
        isinstance(extra, dict) and _PROMPT_CACHE_KEY in extra
        for extra in (settings.extra_args, settings.extra_body)
    )


class CachePilotAgents:
    """cachepilot for the OpenAI Agents SDK (see the module docstring).

    Args:
        pilot: the `CachePilot` doing the work (its config, archive and per-thread state).
        default_thread: a thread for runs with no session, pinned thread or group id. By
            default such a run gets a scope of its own, dropped when it ends: nothing is
            shared between runs through a default thread.
        state_store: where sessions that have no companion store of their own keep the pilot
            state (see `cachepilot_agents.state`); by default an SQLite file next to the
            pilot's archive.
        clock: the time source for the cold-cache rule (seconds since the epoch); `time.time`.
        max_media_chars: inline image / file data in tool results longer than this is
            archived and the model reads a note naming it; shorter media reach it unchanged.
        prompt_cache_key: when the plugin gives a model call a thread-derived
            `prompt_cache_key` (`PromptCacheKeyMode`). `"sdk"` (default): only where the SDK
            itself sends its default key (official OpenAI endpoints) and the call carries
            none; an OpenAI-compatible server (LiteLLM, vLLM, Ollama, Azure...) gets exactly
            the plain SDK's request. `"always"`: every call that carries none, whatever the
            endpoint (for a server that accepts the field). `"never"`: none. A key the call
            already carries, or a `prompt_cache_key` entry in the model settings'
            `extra_args` / `extra_body` (even one that disables it, e.g. `openai.omit`), is
            never replaced.
        cache_key_prefix: prefix of those keys.
        trace_metrics: add a `cachepilot` custom span with each request's cache metrics to the
            SDK's trace (off by default: the trace stays the plain SDK's).
    """

    def __init__(
        self,
        pilot: CachePilot,
        *,
        default_thread: str | None = None,
        state_store: StateStore | None = None,
        clock: Callable[[], float] | None = None,
        max_media_chars: int = 1_000_000,
        prompt_cache_key: PromptCacheKeyMode = "sdk",
        cache_key_prefix: str = "cachepilot",
        trace_metrics: bool = False,
    ) -> None:
        if not isinstance(pilot, CachePilot):
            raise ValueError(f"pilot must be a CachePilot, not {type(pilot).__name__}")
        if default_thread is not None:
            check_thread(default_thread)
        if isinstance(max_media_chars, bool) or not isinstance(max_media_chars, int):
            raise ValueError("max_media_chars must be an int")
        if max_media_chars < 1:
            raise ValueError(f"max_media_chars must be >= 1, not {max_media_chars}")
        if prompt_cache_key not in _CACHE_KEY_MODES:
            raise ValueError(
                f"prompt_cache_key must be one of {', '.join(_CACHE_KEY_MODES)}, "
                f"not {prompt_cache_key!r}"
            )
        if not isinstance(cache_key_prefix, str) or not cache_key_prefix.strip():
            raise ValueError("cache_key_prefix must be a non-empty string")
        if state_store is not None and not isinstance(state_store, StateStore):
            raise ValueError("state_store must implement load / save / delete (StateStore)")
        self._pilot = pilot
        self.fixed_default_thread = default_thread
        self._state_store = state_store
        self._clock = clock or time.time
        self._max_media_chars = max_media_chars
        self.prompt_cache_key: PromptCacheKeyMode = prompt_cache_key
        self.cache_key_prefix = cache_key_prefix
        self.trace_metrics = trace_metrics
        self.requests: list[RequestUsage] = []
        """Usage of the latest model requests (bounded), in order."""
        self._hooks = CachePilotHooks(self)
        self._recall = recall_tool()
        self.exchanges = ExchangeBook()
        self.media = MediaNotes(pilot, max_media_chars)
        self.tool_schemas = ToolSchemas()
        self._builders: dict[str, TranscriptBuilder] = {}
        self.persistence = ThreadPersistence(pilot, self.exchanges, lambda: self.state_store)
        self._lock = threading.Lock()
        self._models: dict[int, tuple[weakref.ref[Model], weakref.ref[PilotModel]]] = {}
        self._run_end: dict[int, tuple[weakref.ref[Any], list[RunEnd]]] = {}
        self._scopes = RunScopes(self._release_scope)
        self._warned: set[str] = set()

    def __copy__(self) -> CachePilotAgents:
        return self  # a service (pilot, stores, locks): copies of configs share it

    def __deepcopy__(self, memo: dict[int, Any]) -> CachePilotAgents:
        return self

    # --- properties --------------------------------------------------------------------------

    @property
    def pilot(self) -> CachePilot:
        """The pilot."""
        return self._pilot

    @property
    def default_thread(self) -> str | None:
        """The thread given for runs without one (None: each such run has its own scope)."""
        return self.fixed_default_thread

    @property
    def max_media_chars(self) -> int:
        """Inline media longer than this is archived."""
        return self._max_media_chars

    @property
    def state_store(self) -> StateStore:
        """The fallback state store (opened on first use)."""
        if self._state_store is None:
            self._state_store = SQLiteStateStore(default_state_path())
        return self._state_store

    @property
    def recall_tool(self) -> Any:
        """The `recall` tool as models are offered it (a `FunctionTool`; the SDK never runs it)."""
        return self._recall

    @property
    def live_scopes(self) -> int:
        """Runs alive with a scope of their own."""
        return len(self._scopes)

    # --- run config --------------------------------------------------------------------------

    def run_config(
        self,
        base: RunConfig | dict[str, Any] | None = None,
        *,
        thread: str | None = None,
        session: Session | None = None,
    ) -> RunConfig:
        """A copy of `base` (a `RunConfig`, its dictionary form, or None) with the pilot's
        filter and model provider.

        The user's own `call_model_input_filter` keeps running, before the pilot's; the
        user's model provider (or `base.model`) is wrapped, not replaced; everything else in
        `base` is kept. `thread` pins the thread for runs with this config; `session` makes
        the session's id the thread (read at each call: ids may be created lazily) and keeps
        its pilot state beside it. Model calls get a thread-derived `prompt_cache_key` as the
        `prompt_cache_key` mode says (by default only where the SDK itself sends one).
        """
        owns_provider = base is None
        if isinstance(base, dict):
            # The SDK's dictionary form: without a provider in it, the run owns its provider.
            owns_provider = "model_provider" not in base
            base = _coerce(base)
        if base is not None and not isinstance(base, RunConfig):
            raise ValueError(f"base must be a RunConfig or a dict, not {type(base).__name__}")
        if thread is not None:
            check_thread(thread)
        if session is not None:
            for name in ("get_items", "add_items"):
                if not callable(getattr(session, name, None)):
                    raise ValueError(f"session must be an Agents SDK Session (missing {name}())")
            if isinstance(session, CachePilotSession) and session._owner is not self:
                raise ValueError("this session is wrapped by another CachePilotAgents")
        config = dataclasses.replace(base) if base is not None else RunConfig()
        user_filter = config.call_model_input_filter
        if isinstance(user_filter, PilotInputFilter) and user_filter.owner is self:
            user_filter = user_filter.user_filter  # the base was one of ours: never stack twice
        pilot_filter = PilotInputFilter(self, user_filter, thread, session)
        config.call_model_input_filter = pilot_filter
        pilot_filter.run_config = config
        provider: ModelProvider | None = config.model_provider
        if isinstance(provider, PilotProvider) and provider._owner is self:
            provider = provider.inner
        # A run config of the user's keeps its provider (the SDK never closes it); without
        # one, the plugin makes one per run and closes it, as the SDK does without a config.
        config.model_provider = PilotProvider(self, None if owns_provider else provider)
        if isinstance(config.model, Model):
            config.model = self.model(config.model)
        return config

    # --- models ------------------------------------------------------------------------------

    def model(self, model: Model) -> PilotModel:
        """The plugin's wrapper of `model` (one per model object; a wrapper is returned as is)."""
        if isinstance(model, PilotModel):
            if model.owner is not self:
                raise ValueError("this model is wrapped by another CachePilotAgents")
            return model
        if not isinstance(model, Model):
            raise ValueError(f"model must be an Agents SDK Model, not {type(model).__name__}")
        with self._lock:
            found = self._models.get(id(model))
            if found is not None:
                known, wrapper = found[0](), found[1]()
                if known is model and wrapper is not None:
                    return wrapper
            wrapped = PilotModel(self, model)
            try:  # held weakly: the wrapper lives as long as whoever holds it (an agent...)
                self._models[id(model)] = (weakref.ref(model), weakref.ref(wrapped))
            except TypeError:  # not weak-referenceable: no memo
                return wrapped
            weakref.finalize(wrapped, self._forget_model, id(model))
            return wrapped

    def _forget_model(self, key: int) -> None:
        with self._lock:
            found = self._models.get(key)
            if found is not None and found[1]() is None:
                del self._models[key]

    def wrap(self, agent: AgentT) -> AgentT:
        """Give `agent` (and the agents it hands off to) the model wrapper, in place.

        Needed only for agents that hold a `Model` instance: models resolved by name come
        from the run config's provider, wrapped already. The agent objects stay the same
        (identity, tools, hooks, handoffs untouched); only their `model` attribute becomes
        the wrapper, which is a pass-through outside runs with this plugin's run config.
        Returns `agent`.
        """
        if not isinstance(agent, Agent):
            raise ValueError(f"wrap expects an agents.Agent, not {type(agent).__name__}")
        seen: set[int] = set()
        pending: list[Agent[Any]] = [agent]
        while pending:
            current = pending.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            if isinstance(current.model, Model):
                current.model = self.model(current.model)
            for target in current.handoffs:
                if isinstance(target, Agent):
                    pending.append(target)
                elif isinstance(target, Handoff):
                    found = handoff_target(target)
                    if isinstance(found, Agent):
                        pending.append(found)
        return agent

    def model_is_ours(self, agent: Agent[Any], config: RunConfig | None) -> bool:
        """Whether the SDK will call one of this plugin's wrappers for `agent` under `config`
        (the SDK's own resolution order: run config model, agent model, provider)."""
        provider = config.model_provider if config is not None else None
        chosen = config.model if config is not None else None
        if isinstance(chosen, Model):
            return isinstance(chosen, PilotModel) and chosen.owner is self
        if not isinstance(chosen, str) and isinstance(agent.model, Model):
            return isinstance(agent.model, PilotModel) and agent.model.owner is self
        return isinstance(provider, PilotProvider) and provider._owner is self

    # --- hooks -------------------------------------------------------------------------------

    @property
    def hooks(self) -> CachePilotHooks:
        """Run hooks (optional: they only forward; usage is recorded by the model wrapper)."""
        return self._hooks

    def hooks_with(self, user_hooks: RunHooks[Any] | None) -> CachePilotHooks:
        """Hooks that run `user_hooks` (every hook); the same as passing `user_hooks`."""
        if user_hooks is not None and not isinstance(user_hooks, RunHooksBase):
            raise ValueError(f"user_hooks must be RunHooks, not {type(user_hooks).__name__}")
        return CachePilotHooks(self, user_hooks)

    # --- sessions and state ------------------------------------------------------------------

    def session(self, inner: Session, *, store: StateStore | None = None) -> CachePilotSession:
        """Wrap any Agents SDK `Session`; its `session_id` becomes the pilot thread.

        Items pass through unchanged; the proxy reports the inner session's class, so the SDK
        treats it as the session it wraps.

        Args:
            inner: the session holding the history (SQLite, SQLAlchemy, Redis, OpenAI
                conversations, your own...).
            store: where the pilot state goes; by default the session's companion store
                (`cachepilot_agents.state.state_store_for`).
        """
        if isinstance(inner, CachePilotSession):
            if inner._owner is self:
                return inner
            raise ValueError("this session is already wrapped by another CachePilotAgents")
        for name in ("get_items", "add_items", "pop_item", "clear_session"):
            if not callable(getattr(inner, name, None)):
                raise ValueError(f"inner must be an Agents SDK Session (missing {name}())")
        if store is not None and not isinstance(store, StateStore):
            raise ValueError("store must implement load / save / delete (StateStore)")
        chosen = store or self.persistence.companion(inner)
        return session_proxy(self, inner, chosen)

    async def attach_session(self, thread: str, session: Session) -> None:
        """Keep `thread`'s state beside `session` (a session not wrapped); load it once."""
        await self.persistence.attach_session(thread, session)

    async def attach(self, thread: str, store: StateStore) -> None:
        """Keep `thread`'s state in `store`; load it (and its recall exchanges) once."""
        await self.persistence.attach(thread, store)

    async def save_state(self, thread: str) -> None:
        """Save `thread`'s state to its store (when it has one and the state changed)."""
        await self.persistence.save(thread)

    async def forget(self, thread: str, store: StateStore) -> None:
        """Drop `thread`'s state (live and saved) and its recall exchanges."""
        await self.persistence.forget(thread, store)
        self._builders.pop(thread, None)
        self.media.forget(thread)

    # --- runs and scopes ---------------------------------------------------------------------

    def run_scope(self, run: object) -> str:
        """The scope of a run with no thread of its own (created on first use)."""
        return self._scopes.scope(run)

    def at_run_end(self, run: object, callback: RunEnd) -> None:
        """Call `callback(run)` when `run` ends (once)."""
        with self._lock:
            found = self._run_end.get(id(run))
            if found is None or found[0]() is not run:
                found = (weakref.ref(run), [])
                self._run_end[id(run)] = found
                weakref.finalize(run, self._run_end.pop, id(run), None)
            found[1].append(callback)

    async def run_ended(self) -> None:
        """The end of the run executing in this task: release its scope and resources."""
        PREPARED.set(None)  # the last call's view is not kept alive by the caller's context
        run = current_run()
        if run is None:
            return
        with self._lock:
            found = self._run_end.pop(id(run), None)
        if found is not None and found[0]() is run:
            for callback in found[1]:
                try:
                    await callback(run)
                except Exception:
                    logger.warning("a run-end cleanup failed", exc_info=True)
        if self._scopes.known(run) is not None:
            await asyncio.to_thread(self._scopes.end, run)

    def _release_scope(self, scope: str) -> None:
        """Everything a run's own scope held: memory, its archive, its exchanges."""
        self._pilot.drop_thread(scope)
        self._builders.pop(scope, None)
        self.exchanges.forget(scope)
        self.media.forget(scope)

    # --- the filter's work -------------------------------------------------------------------

    def builder(self, thread: str) -> TranscriptBuilder:
        """The transcript builder of `thread`."""
        with self._lock:
            return self._builders.setdefault(thread, TranscriptBuilder())

    def recall_offered(self, agent: Agent[Any], config: RunConfig | None) -> bool:
        """Whether the model of `agent` may be offered `recall` (refs are shown only then).

        The wrapper offers it only when something could be recalled (function tools, tool
        results or maintenance epochs; see `PilotModel`).
        """
        if not self._pilot.config.recall_tool or not self.model_is_ours(agent, config):
            return False
        names = {getattr(t, "name", None) for t in agent.tools}
        return RECALL_TOOL_NAME not in names

    async def filter_input(
        self,
        model_data: ModelInputData,
        agent: Agent[Any],
        thread: str,
        source: PilotInputFilter,
    ) -> ModelInputData:
        """The pilot's view of one model call's input, for `thread`."""
        PREPARED.set(None)
        config = source.run_config
        provider = config.model_provider if config is not None else None
        if isinstance(provider, PilotProvider) and provider._owner is self:
            provider.for_run(current_run())  # a run's provider exists from its start
        if not self.model_is_ours(agent, config):
            # A model the plugin cannot reach (a Model instance that was not wrapped): it
            # reads the plain input, so no ref is ever shown to a model that cannot recall.
            self._warn_foreign(agent)
            return _plain(model_data)
        try:
            data, call = await build_view(
                self,
                model_data,
                agent,
                thread,
                recall=self.recall_offered(agent, config),
                now=self._clock,
                strip_reasoning_ids=(
                    config is not None and config.reasoning_item_id_policy == "omit"
                ),
            )
        except Exception:
            logger.warning(
                "thread %s: cachepilot could not prepare this call; input sent unchanged",
                thread_label(thread),
                exc_info=True,
            )
            return _plain(model_data)
        PREPARED.set(call)
        if call is not None:
            # What the next call's fold will most likely need, computed while the model
            # answers and the tools run (the requests are the same bytes without it).
            self._pilot.precompute_soon(call.thread)
        return data

    def _warn_foreign(self, agent: Agent[Any]) -> None:
        name = str(agent.name)
        if name in self._warned:
            return
        self._warned.add(name)
        logger.warning(
            "agent %r holds a model cachepilot does not wrap: its calls are sent as they are "
            "(wrap it with CachePilotAgents.model(...) or .wrap(agent))",
            name,
        )

    # --- what the model wrapper asks ---------------------------------------------------------

    def claim(self, instructions: str | None, items: object) -> PreparedCall | None:
        """The prepared call this model call is, or None (then the wrapper passes through)."""
        call = PREPARED.get()
        if call is None or call.owner != id(self) or call.instructions != instructions:
            return None
        if isinstance(items, list):
            last = items[-1] if items else None
            if last is not call.last_item:
                return None
        return call

    def with_cache_key(
        self, call: PreparedCall | None, settings: ModelSettings, model: Model
    ) -> ModelSettings:
        """`settings` with the thread's `prompt_cache_key`, where the mode asks for one and
        neither the call nor its settings carry one (see `prompt_cache_key`)."""
        if call is None or self.prompt_cache_key == "never" or _has_cache_key(settings):
            return settings
        if self.prompt_cache_key == "sdk" and not sends_default_cache_key(model):
            return settings  # the SDK sends no default key there: neither does the plugin
        key = prompt_cache_key_for(call.thread, self.cache_key_prefix)
        return dataclasses.replace(
            settings, extra_args={**(settings.extra_args or {}), _PROMPT_CACHE_KEY: key}
        )

    async def answer_recall(self, arguments: str, call: PreparedCall) -> str:
        """The answer to one recall call of `call`'s model."""
        try:
            return await answer_recall(self._pilot, arguments, call.thread)
        except Exception:
            logger.warning("thread %s: recall failed", thread_label(call.thread), exc_info=True)
            return "[recall failed: the archive could not be read; try again later]"

    async def add_exchange(self, call: PreparedCall, items: list[Any]) -> None:
        """Keep a recall exchange in the thread's views (archived when the thread persists)."""
        if call.anchor is None:
            return
        exchange = self.exchanges.add(call.thread, call.anchor, items)
        await self.persistence.archive_exchange(call.thread, exchange)

    def record_usage(self, call: PreparedCall, usage: SdkUsage, response_id: str | None) -> None:
        """Record one model request's usage (never fails the call)."""
        try:
            record = Usage.from_agents_sdk(usage)
            self._pilot.record_usage(record, call.thread)
            self.requests.append(RequestUsage(call.thread, call.agent, record, response_id))
            if len(self.requests) > _MAX_REQUESTS:
                del self.requests[: len(self.requests) - _MAX_REQUESTS]
        except Exception:
            logger.warning("could not record the usage of a model call", exc_info=True)
            return
        if self.trace_metrics:
            self._trace(call.thread, record)

    def _trace(self, thread: str, usage: Usage) -> None:
        """The call's metrics as a custom span in the SDK's trace (never fails the call)."""
        try:
            pilot = self._pilot
            state = pilot.state(thread)
            epochs = state.plan.epochs
            record = call_metrics(
                usage,
                thread=thread,
                call=state.calls,
                provider=pilot.config.provider,
                recalls=state.recalls,
                epoch=epochs[-1].index if epochs else None,
                epoch_reason=epochs[-1].reason if epochs else None,
            )
            with agents_custom_span(record, thread_metrics(state, thread)):
                pass
        except Exception:
            logger.debug("thread %s: no metrics span", thread, exc_info=True)


RunEnd = Callable[[object], Awaitable[None]]


def _coerce(base: dict[str, Any]) -> RunConfig:
    """A run config from its dictionary form, read as the SDK reads it (its init fields; any
    other key is refused with the SDK's message)."""
    names = {f.name for f in dataclasses.fields(RunConfig) if f.init}
    unknown = sorted(str(name) for name in base if name not in names)
    if unknown:
        raise ValueError(f"Unknown run_config settings: {', '.join(unknown)}")
    try:
        return RunConfig(**base)
    except TypeError as exc:
        raise ValueError(str(exc)) from exc


def _plain(model_data: ModelInputData) -> ModelInputData:
    """The input as it came (a copy of the list; items untouched)."""
    return ModelInputData(input=list(model_data.input), instructions=model_data.instructions)

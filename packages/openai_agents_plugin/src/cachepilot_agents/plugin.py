"""`CachePilotAgents`: cachepilot for the OpenAI Agents SDK, through the SDK's own extension points.

```python
cp = CachePilotAgents(CachePilot())
agent = cp.wrap(Agent(name="coder", instructions=..., tools=[...]))
result = await Runner.run(agent, task, run_config=cp.run_config(), hooks=cp.hooks,
                          session=cp.session(SQLiteSession("user-1")))
```

- `wrap(agent)`: a clone whose function tools ingest their results, plus the `recall` tool
  (handoff agents are wrapped too).
- `run_config(base)`: the base `RunConfig` (or a new one) with a `call_model_input_filter` that
  rebuilds the pilot's view of the history before every model call. The SDK does not persist
  what a filter returns, so the view is recomputed each call from the history and the
  thread's persisted plan: byte-identical between maintenance points.
- `hooks` / `hooks_with(user_hooks)`: run hooks recording each call's usage.
- `session(inner)`: the inner session plus the thread's `PilotState` in a companion store.

**Thread id** (whose plan, archive and state a call uses), first match wins:
1. `run_config(thread=...)` or `run_config(session=...)`: pinned for that run config;
2. the `session_id` of the cachepilot session the run uses (`session=cp.session(...)`);
3. the run config's `group_id`;
4. this `CachePilotAgents`'s default thread (`default_thread`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from agents import Agent, FunctionTool, RunConfig, RunHooks
from agents.handoffs import Handoff, handoff
from agents.lifecycle import RunHooksBase
from agents.memory import Session
from agents.model_settings import ModelSettings
from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
from agents.tool_context import ToolContext

from cachepilot import CachePilot
from cachepilot.artifacts.base import check_thread
from cachepilot.recall import RECALL_TOOL_NAME
from cachepilot_agents._context import CURRENT_THREAD, SESSION_BINDING, next_stamp
from cachepilot_agents.hooks import CachePilotHooks, RequestUsage
from cachepilot_agents.items import TranscriptBuilder
from cachepilot_agents.session import CachePilotSession
from cachepilot_agents.state import (
    SQLiteStateStore,
    StateStore,
    default_state_path,
    state_store_for,
)
from cachepilot_agents.tools import ingesting_tool, recall_tool

__all__ = ["CachePilotAgents", "PilotInputFilter", "prompt_cache_key_for"]

logger = logging.getLogger(__name__)

AgentT = TypeVar("AgentT", bound=Agent[Any])

_PROMPT_CACHE_KEY = "prompt_cache_key"
_MEMO_MAX = 64


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


class PilotInputFilter:
    """The `call_model_input_filter` of a `CachePilotAgents` run config.

    Runs the user's own filter first (when the base run config had one), then replaces the
    input with the pilot's view. Never mutates its input; on any failure the input is sent
    as it came (logged).
    """

    def __init__(
        self,
        owner: CachePilotAgents,
        user_filter: CallModelInputFilter | None,
        thread: str | None,
    ) -> None:
        self.owner = owner
        self.user_filter = user_filter
        self.pinned_thread = thread
        self.run_config: RunConfig | None = None
        self._stamp = next_stamp()

    def thread(self) -> str:
        """The thread of the current call (see the module docstring for the rule)."""
        if self.pinned_thread is not None:
            return self.pinned_thread
        binding = SESSION_BINDING.get()
        if binding is not None and binding.owner == id(self.owner) and binding.stamp > self._stamp:
            return binding.thread
        group = self.run_config.group_id if self.run_config is not None else None
        if isinstance(group, str) and group.strip():
            return group.strip()
        return self.owner.default_thread

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Filter one model call's input."""
        if self.user_filter is not None:
            result = self.user_filter(data)
            updated = await result if inspect.isawaitable(result) else result
            if not isinstance(updated, ModelInputData):
                raise TypeError("the user's call_model_input_filter must return ModelInputData")
            data = CallModelData(model_data=updated, agent=data.agent, context=data.context)
        return await self.owner.filter_input(data.model_data, data.agent, self.thread())


class CachePilotAgents:
    """cachepilot for the OpenAI Agents SDK (see the module docstring).

    Args:
        pilot: the `CachePilot` doing the work (its config, archive and per-thread state).
        default_thread: the thread of runs with no session, pinned thread or group id; by
            default a fresh id per `CachePilotAgents`, so instances never mix their threads.
        state_store: where `session()` keeps the state of sessions that have no companion
            store of their own (see `cachepilot_agents.state`); by default an SQLite file next
            to the pilot's archive.
        clock: the time source for the cold-cache rule (seconds since the epoch); `time.time`.
        max_media_chars: inline image / file data (data URL or base64) longer than this is
            archived and replaced by a text note; shorter media reach the model unchanged.
        set_prompt_cache_key: add a thread-derived `prompt_cache_key` to the run config's
            model settings when the thread is known when the run config is built and no key
            is set there yet.
        cache_key_prefix: prefix of those keys.
    """

    def __init__(
        self,
        pilot: CachePilot,
        *,
        default_thread: str | None = None,
        state_store: StateStore | None = None,
        clock: Callable[[], float] | None = None,
        max_media_chars: int = 1_000_000,
        set_prompt_cache_key: bool = True,
        cache_key_prefix: str = "cachepilot",
    ) -> None:
        if not isinstance(pilot, CachePilot):
            raise ValueError(f"pilot must be a CachePilot, not {type(pilot).__name__}")
        if default_thread is not None:
            check_thread(default_thread)
        if isinstance(max_media_chars, bool) or not isinstance(max_media_chars, int):
            raise ValueError("max_media_chars must be an int")
        if max_media_chars < 1:
            raise ValueError(f"max_media_chars must be >= 1, not {max_media_chars}")
        if not cache_key_prefix.strip():
            raise ValueError("cache_key_prefix must be a non-empty string")
        if state_store is not None and not isinstance(state_store, StateStore):
            raise ValueError("state_store must implement load / save / delete (StateStore)")
        self._pilot = pilot
        self.default_thread = default_thread or f"agents-{uuid.uuid4().hex[:12]}"
        self._state_store = state_store
        self._clock = clock or time.time
        self._max_media_chars = max_media_chars
        self.set_prompt_cache_key = set_prompt_cache_key
        self.cache_key_prefix = cache_key_prefix
        self.requests: list[RequestUsage] = []
        """Usage of every model call seen by `hooks`, in order."""
        self._hooks = CachePilotHooks(self)
        self._recall = recall_tool(self)
        self._builders: dict[str, TranscriptBuilder] = {}
        self._stores: dict[str, StateStore] = {}
        self._loaded: set[str] = set()
        self._saved: dict[str, str] = {}
        self._schemas: dict[tuple[int, ...], tuple[tuple[object, ...], list[dict[str, Any]]]] = {}
        self._warned: set[str] = set()

    # --- properties used by the tool wrappers ------------------------------------------------

    @property
    def pilot(self) -> CachePilot:
        """The pilot."""
        return self._pilot

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
    def recall_tool(self) -> FunctionTool:
        """The `recall` FunctionTool `wrap` adds."""
        return self._recall

    # --- threads -----------------------------------------------------------------------------

    def current_thread(self) -> str:
        """The thread of the model call running in this task (the default thread outside)."""
        current = CURRENT_THREAD.get()
        if current is not None and current[0] == id(self):
            return current[1]
        return self.default_thread

    def tool_thread(self, context: ToolContext[Any]) -> str:
        """The thread a tool call belongs to."""
        current = CURRENT_THREAD.get()
        if current is not None and current[0] == id(self):
            return current[1]
        config = getattr(context, "run_config", None)
        filt = getattr(config, "call_model_input_filter", None)
        if isinstance(filt, PilotInputFilter) and filt.owner is self:
            return filt.thread()
        return self.default_thread

    # --- wrap --------------------------------------------------------------------------------

    def wrap(self, agent: AgentT) -> AgentT:
        """A clone of `agent` (and of the agents it hands off to) with ingesting tools + recall.

        Function tools are wrapped (see `cachepilot_agents.tools`); hosted tools, MCP servers,
        `Handoff` objects and everything else stay as they are. The original agent is not
        changed. The tool list is fixed here, so it never changes mid-thread.

        Raises:
            ValueError: when the agent already has a different tool named `recall`.
        """
        if not isinstance(agent, Agent):
            raise ValueError(f"wrap expects an agents.Agent, not {type(agent).__name__}")
        return self._wrap(agent, {})

    def _wrap(self, agent: AgentT, memo: dict[int, Agent[Any]]) -> AgentT:
        known = memo.get(id(agent))
        if known is not None:
            return cast("AgentT", known)
        if any(t is self._recall for t in agent.tools):
            return agent  # wrapped already
        tools: list[Any] = []
        for tool in agent.tools:
            if isinstance(tool, FunctionTool) and tool.name == RECALL_TOOL_NAME:
                raise ValueError(
                    f"agent {agent.name!r} already has a tool named {RECALL_TOOL_NAME!r}; "
                    "rename it or turn the pilot's recall tool off (Config(recall_tool=False))"
                )
            tools.append(ingesting_tool(self, tool) if isinstance(tool, FunctionTool) else tool)
        if self._pilot.config.recall_tool:
            tools.append(self._recall)
        clone = cast("AgentT", agent.clone(tools=tools))
        memo[id(agent)] = clone
        clone.handoffs = [
            self._wrap(target, memo) if isinstance(target, Agent) else target
            for target in agent.handoffs
        ]
        return clone

    # --- run config --------------------------------------------------------------------------

    def run_config(
        self,
        base: RunConfig | None = None,
        *,
        thread: str | None = None,
        session: Session | None = None,
    ) -> RunConfig:
        """A copy of `base` (or a new `RunConfig`) with the pilot's input filter.

        The user's own `call_model_input_filter` keeps running, before the pilot's. Everything
        else in `base` is kept. `thread` (or `session`'s id) pins the thread for runs with this
        config. When the thread is known here (pinned, or `base.group_id`) and no
        `prompt_cache_key` is set in `base.model_settings`, a thread-derived key is added to
        its `extra_args` (the SDK itself sets one only for official OpenAI endpoints, and only
        per run when there is no session or group id).
        """
        if base is not None and not isinstance(base, RunConfig):
            raise ValueError(f"base must be a RunConfig, not {type(base).__name__}")
        if thread is None and session is not None:
            thread = getattr(session, "session_id", None)
        if thread is not None:
            check_thread(thread)
        config = dataclasses.replace(base) if base is not None else RunConfig()
        user_filter = config.call_model_input_filter
        if isinstance(user_filter, PilotInputFilter) and user_filter.owner is self:
            user_filter = user_filter.user_filter  # the base was one of ours: never stack twice
        pilot_filter = PilotInputFilter(self, user_filter, thread)
        config.call_model_input_filter = pilot_filter
        pilot_filter.run_config = config
        known = thread or (config.group_id.strip() if config.group_id else None)
        if self.set_prompt_cache_key and known and not _has_cache_key(config.model_settings):
            key = prompt_cache_key_for(known, self.cache_key_prefix)
            extra = ModelSettings(extra_args={_PROMPT_CACHE_KEY: key})
            config.model_settings = (
                config.model_settings.resolve(extra) if config.model_settings else extra
            )
        return config

    # --- hooks -------------------------------------------------------------------------------

    @property
    def hooks(self) -> CachePilotHooks:
        """Run hooks recording every model call's usage (pass as `Runner.run(hooks=...)`)."""
        return self._hooks

    def hooks_with(self, user_hooks: RunHooks[Any] | None) -> CachePilotHooks:
        """Hooks that run `user_hooks` (every hook) and record usage."""
        if user_hooks is not None and not isinstance(user_hooks, RunHooksBase):
            raise ValueError(f"user_hooks must be RunHooks, not {type(user_hooks).__name__}")
        return CachePilotHooks(self, user_hooks)

    # --- sessions and state ------------------------------------------------------------------

    def session(self, inner: Session, *, store: StateStore | None = None) -> CachePilotSession:
        """Wrap any Agents SDK `Session`; its `session_id` becomes the pilot thread.

        Args:
            inner: the session holding the history (SQLite, SQLAlchemy, Redis, your own...).
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
        chosen = store or state_store_for(inner, _LazyStore(self))
        return CachePilotSession(self, inner, chosen)

    async def attach(self, thread: str, store: StateStore) -> None:
        """Keep `thread`'s state in `store`; load it from there once per process."""
        self._stores[thread] = store
        if thread in self._loaded:
            return
        self._loaded.add(thread)
        try:
            text = await store.load(thread)
        except Exception:
            logger.error("thread %s: could not load the saved pilot state", thread, exc_info=True)
            return
        if text:
            try:
                self._pilot.load_state(thread, text)
            except Exception:
                logger.error("thread %s: saved pilot state unreadable; starting fresh", thread)
                return
            self._saved[thread] = text
            logger.info("thread %s: pilot state restored", thread)

    async def save_state(self, thread: str) -> None:
        """Save `thread`'s state to its store (when it has one and the state changed)."""
        store = self._stores.get(thread)
        if store is None:
            return
        try:
            text = self._pilot.state(thread).model_dump_json()
            if self._saved.get(thread) == text:
                return
            await store.save(thread, text)
            self._saved[thread] = text
        except Exception:
            logger.error("thread %s: could not save the pilot state", thread, exc_info=True)

    async def forget(self, thread: str, store: StateStore) -> None:
        """Drop `thread`'s state (live and saved); its archive is kept until retention."""
        try:
            await store.delete(thread)
        except Exception:
            logger.error("thread %s: could not delete the saved state", thread, exc_info=True)
        from cachepilot import PilotState

        self._pilot.load_state(thread, PilotState())
        self._saved.pop(thread, None)
        self._builders.pop(thread, None)

    # --- the filter's work -------------------------------------------------------------------

    async def filter_input(
        self, model_data: ModelInputData, agent: Agent[Any], thread: str
    ) -> ModelInputData:
        """The pilot's view of one model call's input, for `thread`."""
        CURRENT_THREAD.set((id(self), thread))
        items = list(model_data.input)
        try:
            builder = self._builders.setdefault(thread, TranscriptBuilder())
            transcript = builder.build(items)
            tools = self._tool_schemas(agent)
            system, view, _ = await self._pilot.aprepare(
                model_data.instructions, transcript.messages, tools, thread, now=self._clock()
            )
            out = transcript.render(view, self._pilot.state(thread).plan)
        except Exception:
            logger.warning(
                "thread %s: cachepilot could not prepare this call; input sent unchanged",
                thread,
                exc_info=True,
            )
            return ModelInputData(input=items, instructions=model_data.instructions)
        await self.save_state(thread)
        return ModelInputData(input=out, instructions=system)

    def _tool_schemas(self, agent: Agent[Any]) -> list[dict[str, Any]]:
        """Chat-style schemas of the agent's function tools and handoffs (memoised)."""
        sources: tuple[object, ...] = (agent, *agent.tools, *agent.handoffs)
        key = tuple(id(s) for s in sources)
        hit = self._schemas.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], sources, strict=True)):
            return hit[1]
        schemas: list[dict[str, Any]] = []
        names: set[str] = set()
        for tool in agent.tools:
            if isinstance(tool, FunctionTool):
                names.add(tool.name)
                schemas.append(_schema(tool.name, tool.description, tool.params_json_schema))
        for target in agent.handoffs:
            try:
                item = target if isinstance(target, Handoff) else handoff(target)
            except Exception:
                continue
            schemas.append(_schema(item.tool_name, item.tool_description, item.input_json_schema))
        if (
            self._pilot.config.recall_tool
            and RECALL_TOOL_NAME not in names
            and agent.name not in self._warned
        ):
            self._warned.add(agent.name)
            logger.warning(
                "agent %r was not wrapped with CachePilotAgents.wrap: its tool results are not "
                "reduced and the model cannot call recall",
                agent.name,
            )
        self._schemas[key] = (sources, schemas)
        if len(self._schemas) > _MEMO_MAX:
            self._schemas.pop(next(iter(self._schemas)))
        return schemas


def _schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


class _LazyStore:
    """The owner's fallback store, opened only when a session actually uses it."""

    def __init__(self, owner: CachePilotAgents) -> None:
        self._owner = owner

    async def load(self, thread: str) -> str | None:
        """Delegate."""
        return await self._owner.state_store.load(thread)

    async def save(self, thread: str, state: str) -> None:
        """Delegate."""
        await self._owner.state_store.save(thread, state)

    async def delete(self, thread: str) -> None:
        """Delegate."""
        await self._owner.state_store.delete(thread)

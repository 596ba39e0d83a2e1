"""The `recall` tool as a LangChain tool (schema byte-identical to `RECALL_TOOL_SCHEMA`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_config
from langgraph.prebuilt import ToolRuntime

from cachepilot import CachePilot
from cachepilot.recall.tool import (
    DEFAULT_MAX_CHARS,
    RECALL_TOOL_DESCRIPTION,
    RECALL_TOOL_NAME,
    RECALL_TOOL_PARAMETERS,
)
from cachepilot_langgraph.state import SCOPE_KEY, configured_thread, scoped

__all__ = ["ThreadResolver", "make_recall_tool", "recall_thread"]


def _config() -> RunnableConfig | None:
    try:
        return get_config()
    except RuntimeError:
        return None


def _max_chars(value: object) -> int:
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return DEFAULT_MAX_CHARS
    return number if number > 0 else DEFAULT_MAX_CHARS


def recall_thread(
    config: RunnableConfig | None,
    state: object,
    namespace: str | None = None,
    pilot: CachePilot | None = None,
) -> str:
    """The thread a recall reads: the run's `thread_id`, else the run's own scope (kept in
    graph state by the middleware, or the hand-built graph's run scope of `pilot`).

    A run with neither (nothing was archived for it) gets a fresh, empty scope: it can never
    read another run's data.
    """
    configured = configured_thread(config)
    if configured is not None:
        return scoped(configured, namespace)
    if isinstance(state, Mapping):
        scope = state.get(SCOPE_KEY)
        if isinstance(scope, str) and scope:
            return scope
    if pilot is not None:
        from cachepilot_langgraph._shared import link_of

        found = link_of(pilot).scopes.resolve(config, namespace, create=False)
        if found is not None:
            return found
    return scoped(f"run-{uuid.uuid4().hex}", namespace)


ThreadResolver = Callable[[RunnableConfig | None, object], str]
"""`(config, graph state) -> thread` of a recall (a middleware that scopes threads its own way)."""


def make_recall_tool(
    pilot: CachePilot,
    *,
    namespace: str | None = None,
    thread_of: ThreadResolver | None = None,
) -> BaseTool:
    """A tool named `recall` serving `pilot.recall` for the running thread.

    The thread is the LangGraph `thread_id` of the run that calls it (prefixed by
    `namespace`), else the run's own scope, so one thread can never read another's artifacts.
    `thread_of`, when given, resolves the thread instead (it must agree with the middleware
    that archived the originals).
    """

    def resolve(state: object) -> str:
        if thread_of is not None:
            return thread_of(_config(), state)
        return recall_thread(_config(), state, namespace, pilot)

    def run(
        ref: str,
        lines: str | None = None,
        grep: str | None = None,
        max_chars: Any = DEFAULT_MAX_CHARS,
        runtime: ToolRuntime | None = None,
    ) -> str:
        state = runtime.state if runtime is not None else None
        thread = resolve(state)
        return pilot.recall(str(ref), lines, grep, _max_chars(max_chars), thread=thread)

    async def arun(
        ref: str,
        lines: str | None = None,
        grep: str | None = None,
        max_chars: Any = DEFAULT_MAX_CHARS,
        runtime: ToolRuntime | None = None,
    ) -> str:
        state = runtime.state if runtime is not None else None
        thread = resolve(state)
        return await pilot.arecall(str(ref), lines, grep, _max_chars(max_chars), thread=thread)

    return StructuredTool(
        name=RECALL_TOOL_NAME,
        description=RECALL_TOOL_DESCRIPTION,
        args_schema=dict(RECALL_TOOL_PARAMETERS),
        func=run,
        coroutine=arun,
    )

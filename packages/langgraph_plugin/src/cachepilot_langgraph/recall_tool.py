"""The `recall` tool as a LangChain tool (schema byte-identical to `RECALL_TOOL_SCHEMA`)."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_config

from cachepilot import CachePilot
from cachepilot.recall import (
    DEFAULT_MAX_CHARS,
    RECALL_TOOL_DESCRIPTION,
    RECALL_TOOL_NAME,
    RECALL_TOOL_PARAMETERS,
)
from cachepilot_langgraph.state import thread_of

__all__ = ["make_recall_tool"]


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


def make_recall_tool(pilot: CachePilot, *, namespace: str | None = None) -> BaseTool:
    """A tool named `recall` serving `pilot.recall` for the running thread.

    The thread is the LangGraph `thread_id` of the run that calls it (prefixed by
    `namespace`), so one thread can never read another's artifacts.
    """

    def run(
        ref: str,
        lines: str | None = None,
        grep: str | None = None,
        max_chars: Any = DEFAULT_MAX_CHARS,
    ) -> str:
        thread = thread_of(_config(), namespace)
        return pilot.recall(str(ref), lines, grep, _max_chars(max_chars), thread=thread)

    async def arun(
        ref: str,
        lines: str | None = None,
        grep: str | None = None,
        max_chars: Any = DEFAULT_MAX_CHARS,
    ) -> str:
        thread = thread_of(_config(), namespace)
        return await pilot.arecall(str(ref), lines, grep, _max_chars(max_chars), thread=thread)

    return StructuredTool(
        name=RECALL_TOOL_NAME,
        description=RECALL_TOOL_DESCRIPTION,
        args_schema=dict(RECALL_TOOL_PARAMETERS),
        func=run,
        coroutine=arun,
    )

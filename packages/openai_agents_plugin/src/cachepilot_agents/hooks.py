"""`CachePilotHooks`: run hooks that forward to the user's own; `RequestUsage` records.

The plugin needs no hooks: the model wrapper records each request's usage (recall rounds
included). `CachePilotAgents.hooks` / `hooks_with(mine)` remain for code that passes them; they
call every hook of the user's hooks with the arguments the SDK gave, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents import Agent, RunHooks
from agents.items import ModelResponse, TResponseInputItem
from agents.run_context import AgentHookContext, RunContextWrapper
from agents.tool import Tool

from cachepilot.usage import Usage

__all__ = ["CachePilotHooks", "RequestUsage"]


@dataclass(frozen=True, slots=True)
class RequestUsage:
    """The usage of one model request, as the provider reported it."""

    thread: str
    """The pilot thread the call belonged to."""
    agent: str
    """Name of the agent that made the call."""
    usage: Usage
    """Input, cached (read), cache-write, output and reasoning tokens."""
    response_id: str | None = None
    """The provider's response id, when it gave one."""


class CachePilotHooks(RunHooks[Any]):
    """`RunHooks` that run every hook of `inner` (the user's), unchanged.

    Args:
        owner: the `CachePilotAgents` they belong to.
        inner: the user's own run hooks, or None.
    """

    def __init__(self, owner: object, inner: RunHooks[Any] | None = None) -> None:
        super().__init__()
        self._owner = owner
        self.inner = inner

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """Forward to the user's hooks."""
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """Forward to the user's hooks."""
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Forward to the user's hooks."""
        if self.inner is not None:
            await self.inner.on_agent_start(context, agent)

    async def on_agent_end(
        self, context: AgentHookContext[Any], agent: Agent[Any], output: Any
    ) -> None:
        """Forward to the user's hooks."""
        if self.inner is not None:
            await self.inner.on_agent_end(context, agent, output)

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """Forward to the user's hooks."""
        if self.inner is not None:
            await self.inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """Forward to the user's hooks."""
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """Forward to the user's hooks."""
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

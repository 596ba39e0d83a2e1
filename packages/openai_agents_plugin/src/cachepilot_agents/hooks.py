"""`CachePilotHooks`: run hooks that record each model call's usage, around the user's own."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents import Agent, RunHooks
from agents.items import ModelResponse, TResponseInputItem
from agents.run_context import AgentHookContext, RunContextWrapper
from agents.tool import Tool

from cachepilot.metrics import agents_custom_span, call_metrics, thread_metrics
from cachepilot.usage import Usage

if TYPE_CHECKING:
    from cachepilot_agents.plugin import CachePilotAgents

__all__ = ["CachePilotHooks", "RequestUsage"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RequestUsage:
    """The usage of one model call, as the provider reported it."""

    thread: str
    """The pilot thread the call belonged to."""
    agent: str
    """Name of the agent that made the call."""
    usage: Usage
    """Input, cached (read), cache-write, output and reasoning tokens."""
    response_id: str | None = None
    """The provider's response id, when it gave one."""


class CachePilotHooks(RunHooks[Any]):
    """`RunHooks` recording usage in the pilot on `on_llm_end`; every hook also runs `inner`'s.

    Args:
        owner: the `CachePilotAgents` whose pilot gets the usage.
        inner: the user's own run hooks (called first, for every hook), or None.
    """

    def __init__(self, owner: CachePilotAgents, inner: RunHooks[Any] | None = None) -> None:
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
        """Forward, then record the call's usage (incl. cached and cache-write tokens)."""
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)
        try:
            usage = Usage.from_agents_sdk(response.usage)
            thread = self._owner.current_thread()
            self._owner.pilot.record_usage(usage, thread)
            self._owner.requests.append(
                RequestUsage(thread, str(agent.name), usage, getattr(response, "response_id", None))
            )
        except Exception:  # accounting must never cost the turn
            logger.warning("could not record the usage of a model call", exc_info=True)
            return
        self._trace(thread, usage)

    def _trace(self, thread: str, usage: Usage) -> None:
        """The call's metrics as a custom span in the SDK's trace (never fails the call)."""
        try:
            pilot = self._owner.pilot
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

"""Run a recorded session end to end through a real `create_agent` agent.

The model is `ChatOpenAI` talking real HTTP to the replay provider, which serves the session's
recorded assistant turns and prices each request body it receives with the cache simulator.
Tools are registered under the recorded names and schemas; their results are the recorded
outputs, served by call id from a `wrap_tool_call` middleware placed inside cachepilot's (so
ingestion sees them exactly as it would see a real tool's). Each recorded user message starts
one `invoke` on the same thread. So the measured cost is that of the requests the framework
really serialized, with or without `CachePilotMiddleware`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.sim import get_profile
from cachepilot.tokens import get_counter
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.replay import ReplayProvider, ReplayRecord, ReplayScript
from cachepilot_bench.traces import Session
from cachepilot_langgraph.middleware import CachePilotMiddleware

__all__ = [
    "AgentReplay",
    "PerCallSystemPrompt",
    "RecordedResults",
    "invocations",
    "pick_sessions",
    "prompt_due",
    "replay_session",
    "replay_tools",
]

logger = logging.getLogger(__name__)

_MISSING = "[no recorded output for this call]"


@dataclass(slots=True)
class AgentReplay:
    """What one session cost through the real agent."""

    session_id: str
    source: str
    strategy: str
    calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    input_cost_usd: float = 0.0
    cost_usd: float = 0.0
    prefix_breaks: int = 0
    unserved_turns: int = 0
    extra_requests: int = 0
    """Requests after the script ran out (not billed)."""
    error: str | None = None
    epochs: int = 0
    per_call_input_usd: list[float] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        """Cached input tokens / input tokens."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    def add_records(self, records: Sequence[ReplayRecord], provider_profile: str) -> None:
        """Price the provider's records of this replay under `provider_profile`."""
        profile = get_profile(provider_profile)
        for record in records:
            if record.turn is None:
                # The recorded session ended with a pending call: the agent's extra request
                # after it has no recorded counterpart, so it is not billed.
                self.extra_requests += 1
                continue
            cost = profile.cost(record.usage)
            self.calls += 1
            self.input_tokens += record.usage.input_tokens
            self.cached_tokens += record.usage.cached_tokens
            self.input_cost_usd += cost.input_usd
            self.cost_usd += cost.input_usd + cost.output_usd
            self.per_call_input_usd.append(cost.input_usd)
            if record.index > 0 and not record.prefix_extends:
                self.prefix_breaks += 1


def replay_tools(script: ReplayScript) -> list[BaseTool]:
    """Tools with the recorded names and schemas (their results come from the script)."""

    def make(schema: dict[str, Any]) -> BaseTool:
        function = schema.get("function", schema)
        name = str(function.get("name", "tool"))
        parameters = function.get("parameters") or {"type": "object", "properties": {}}

        def unreachable(**_: Any) -> str:
            return _MISSING

        return StructuredTool(
            name=name,
            description=str(function.get("description", "") or name),
            args_schema=dict(parameters),
            func=unreachable,
        )

    return [make(dict(s)) for s in script.tool_schemas()]


class RecordedResults(AgentMiddleware[Any, Any]):
    """Answers every tool call with the recorded output of the same call id."""

    def __init__(self, script: ReplayScript) -> None:
        super().__init__()
        self._script = script

    @property
    def name(self) -> str:
        return "RecordedToolResults"

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        call_id = str(request.tool_call.get("id") or "")
        output = self._script.output_for(call_id)
        return ToolMessage(
            content=output if output is not None else _MISSING,
            tool_call_id=call_id,
            name=str(request.tool_call.get("name", "")),
        )


class PerCallSystemPrompt(AgentMiddleware[Any, Any]):
    """Sends the i-th prompt of `prompts` as the system prompt of the i-th model call (the
    last one after that): recorded agents that change their prompt every call."""

    def __init__(self, prompts: Sequence[str]) -> None:
        super().__init__()
        self._prompts = list(prompts)
        self._calls = 0

    @property
    def name(self) -> str:
        return "RecordedSystemPrompt"

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        prompt = self._prompts[min(self._calls, len(self._prompts) - 1)]
        self._calls += 1
        return handler(request.override(system_message=SystemMessage(content=prompt)))


def invocations(script: ReplayScript) -> list[list[str]]:
    """User messages per `invoke`: the prompts recorded before the same turn, grouped."""
    groups: dict[int, list[str]] = {}
    for turn, message in script.prompts:
        groups.setdefault(turn, []).append(message.text)
    return [groups[turn] for turn in sorted(groups)]


def replay_session(
    session: Session,
    *,
    with_cachepilot: bool,
    provider_profile: str = "openai-gpt-5.4-mini",
    config: Config | None = None,
) -> AgentReplay:
    """Run `session` through `create_agent` against the replay provider and price it.

    Never raises for a session the agent cannot follow: the error is in the result.
    """
    from langchain_openai import ChatOpenAI

    name = "cachepilot" if with_cachepilot else "vanilla"
    result = AgentReplay(session.id, session.source, name)
    script = ReplayScript.from_session(session)
    if not script.prompts or script.prompts[0][0] != 0:
        result.error = "the session does not start with a user message"
        return result
    hidden = estimate_hidden_prefix(session, get_counter())
    per_call = session.meta.get("system_per_call")
    prompts = [str(p) for p in per_call] if isinstance(per_call, list) and per_call else None
    with ReplayProvider(script, profile=provider_profile, hidden_prefix_tokens=hidden) as provider:
        llm = ChatOpenAI(
            model=session.model or "gpt-5.4-mini",
            base_url=provider.base_url,
            api_key=provider.api_key,  # type: ignore[arg-type]
            max_retries=0,
        )
        middleware: list[AgentMiddleware[Any, Any]] = []
        if prompts:
            middleware.append(PerCallSystemPrompt(prompts))
        pilot: CachePilot | None = None
        if with_cachepilot:
            pilot = CachePilot(
                config or Config(provider=provider_profile), store=InMemoryArtifactStore()
            )
            middleware.append(CachePilotMiddleware(pilot, clock=provider.clock))
        middleware.append(RecordedResults(script))
        agent = create_agent(
            llm,
            replay_tools(script),
            system_prompt=None if prompts else script.system,
            middleware=middleware,
            checkpointer=InMemorySaver(),
        )
        run_config: RunnableConfig = {
            "configurable": {"thread_id": "replay"},
            "recursion_limit": 10_000,
        }
        try:
            for texts in invocations(script):
                if provider.remaining == 0:
                    break
                agent.invoke({"messages": [HumanMessage(t) for t in texts]}, run_config)
                # A recorded turn without tool calls followed by another turn (no user message
                # between): ask again with the same history.
                while provider.remaining and not prompt_due(script, len(provider.records)):
                    agent.invoke({"messages": []}, run_config)
        except Exception as exc:  # the replay of a strange trace must not stop a benchmark
            logger.warning("session %s: %s", session.id, exc, exc_info=True)
            result.error = f"{type(exc).__name__}: {exc}"
        records = provider.records
        result.unserved_turns = provider.remaining
    result.add_records(records, provider_profile)
    if pilot is not None:
        result.epochs = len(pilot.state("replay").plan.epochs)
    return result


def prompt_due(script: ReplayScript, served: int) -> bool:
    """True when a recorded user message comes before the next turn to serve."""
    return any(turn == served for turn, _ in script.prompts)


def pick_sessions(sessions: Sequence[Session], per_source: int, max_calls: int) -> list[Session]:
    """The first `per_source` sessions of each source with at most `max_calls` model calls
    (the end-to-end benchmarks replay the same ones)."""
    chosen: dict[str, list[Session]] = {}
    for session in sessions:
        bucket = chosen.setdefault(session.source, [])
        if len(bucket) < per_source and len(session.assistant_indices) <= max_calls:
            bucket.append(session)
    return [s for bucket in chosen.values() for s in bucket]

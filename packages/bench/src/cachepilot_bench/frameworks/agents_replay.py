"""Run a recorded session through a real Agents SDK `Runner` against the replay provider.

The replay provider (`cachepilot_bench.replay.ReplayProvider`) is an OpenAI-compatible endpoint on
loopback that answers each model request with the next recorded assistant turn and reports the
usage a provider cache would bill for the request body it actually received. Replay tools return
the recorded tool outputs, so the agent walks the recorded session end to end, through the SDK's
real model classes and the real `openai` client, with or without cachepilot, and the cost is
measured on what the framework really sent.

```python
from cachepilot_bench.replay import ReplayProvider, ReplayScript

with ReplayProvider(script) as provider:
    plain = await run_script(script, provider)
    cp = CachePilotAgents(CachePilot(), clock=provider.clock)
    piloted = await run_script(script, provider, plugin=cp)
```
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    SQLiteSession,
)
from agents.models.interface import Model
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

from cachepilot.sim import get_profile
from cachepilot.usage import Usage
from cachepilot_agents.plugin import CachePilotAgents
from cachepilot_bench.replay import ReplayProvider, ReplayRecord, ReplayScript

__all__ = ["ReplayRun", "replay_agent", "replay_tools", "run_script"]

logger = logging.getLogger(__name__)

Api = Literal["responses", "chat"]

MISSING_OUTPUT = "[no output was recorded for this tool call]"


@dataclass
class ReplayRun:
    """What one replay of a script cost, from the provider's records."""

    records: list[ReplayRecord]
    """One per model request served."""
    final_outputs: list[Any] = field(default_factory=list)
    """Each run's final output (one run per recorded user prompt)."""
    interrupted: int = 0
    """Runs that ended on the turn budget (the recording stopped mid-turn)."""

    @property
    def usage(self) -> Usage:
        """Summed simulated usage of every request."""
        total = Usage()
        for record in self.records:
            total = total + record.usage
        return total

    def cost_usd(self, profile: str = "openai-gpt-5.4-mini") -> float:
        """Total cost under a provider profile."""
        return get_profile(profile).cost(self.usage).total_usd

    def input_cost_usd(self, profile: str = "openai-gpt-5.4-mini") -> float:
        """Input-side cost (cached, uncached, cache writes) under a provider profile."""
        return get_profile(profile).cost(self.usage).input_usd

    @property
    def prefix_breaks(self) -> int:
        """Requests that did not extend the previous one."""
        return sum(1 for r in self.records[1:] if not r.prefix_extends)


def replay_tools(script: ReplayScript) -> list[FunctionTool]:
    """One FunctionTool per tool of the script, returning the recorded output of each call."""

    def make(name: str, description: str, parameters: dict[str, Any]) -> FunctionTool:
        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            output = script.output_for(str(context.tool_call_id))
            return MISSING_OUTPUT if output is None else output

        return FunctionTool(
            name=name,
            description=description,
            params_json_schema=parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    tools: list[FunctionTool] = []
    seen: set[str] = set()
    for schema in script.tool_schemas():
        function = schema.get("function", {})
        name = str(function.get("name") or "")
        if not name or name in seen:
            continue
        seen.add(name)
        parameters = function.get("parameters")
        if not isinstance(parameters, dict):
            parameters = {"type": "object", "properties": {}, "additionalProperties": True}
        tools.append(make(name, str(function.get("description") or ""), parameters))
    return tools


def replay_agent(
    script: ReplayScript,
    provider: ReplayProvider,
    *,
    api: Api = "responses",
    model: str = "gpt-5.4-mini",
    client: AsyncOpenAI | None = None,
) -> Agent[Any]:
    """An agent with the script's system prompt and replay tools, on the SDK's OpenAI model.

    Args:
        script: the recorded session.
        provider: a started replay provider.
        api: `responses` or `chat`.
        model: the model name sent (the provider ignores it).
        client: the `AsyncOpenAI` client to use (closing it is the caller's job); by default a
            new one on the provider's URL.
    """
    if client is None:
        client = AsyncOpenAI(base_url=provider.base_url, api_key=provider.api_key, max_retries=0)
    sdk_model: Model
    if api == "chat":
        sdk_model = OpenAIChatCompletionsModel(model, client)
    elif api == "responses":
        sdk_model = OpenAIResponsesModel(model, client)
    else:
        raise ValueError(f"api must be 'responses' or 'chat', not {api!r}")
    return Agent(
        name="replay",
        instructions=script.system,
        tools=list(replay_tools(script)),
        model=sdk_model,
    )


def _segments(script: ReplayScript) -> list[tuple[str, int]]:
    """(user text, number of turns) per recorded prompt."""
    prompts = sorted(((start, m.text) for start, m in script.prompts), key=lambda p: p[0])
    if not prompts:
        prompts = [(0, "Continue.")]
    out: list[tuple[str, int]] = []
    for index, (start, text) in enumerate(prompts):
        end = prompts[index + 1][0] if index + 1 < len(prompts) else len(script.turns)
        if end > start:  # a prompt with no recorded reply: the next prompt starts a run anyway
            out.append((text or "Continue.", end - start))
    return out


async def run_script(
    script: ReplayScript,
    provider: ReplayProvider,
    *,
    plugin: CachePilotAgents | None = None,
    api: Api = "responses",
    streamed: bool = False,
    session_id: str | None = None,
    base: RunConfig | None = None,
) -> ReplayRun:
    """Replay `script` through `Runner` (one run per recorded user prompt, one session).

    Args:
        script: the recorded session.
        provider: a started replay provider (it is re-loaded with `script`).
        plugin: cachepilot for the run, or None for the plain SDK. Build it with
            `clock=provider.clock` so the cold-cache rule sees the recorded times.
        api: `responses` (`OpenAIResponsesModel`) or `chat` (`OpenAIChatCompletionsModel`).
        streamed: use `Runner.run_streamed`.
        session_id: the session (and thread) id; a fresh one by default.
        base: the user's own run config, merged with the plugin's.
    """
    provider.load(script)
    client = AsyncOpenAI(base_url=provider.base_url, api_key=provider.api_key, max_retries=0)
    agent = replay_agent(script, provider, api=api, client=client)
    inner = SQLiteSession(session_id or f"replay-{uuid.uuid4().hex[:12]}")
    session: Any = inner
    config = base or RunConfig()
    if plugin is not None:
        agent = plugin.wrap(agent)  # the agent holds a model instance: wrap it in place
        config = plugin.run_config(base, session=inner)
    config.tracing_disabled = True
    run = ReplayRun(records=[])
    try:
        for text, turns in _segments(script):
            try:
                if streamed:
                    streaming = Runner.run_streamed(
                        agent,
                        text,
                        run_config=config,
                        session=session,
                        max_turns=turns,
                    )
                    async for _ in streaming.stream_events():
                        pass
                    run.final_outputs.append(streaming.final_output)
                else:
                    result = await Runner.run(
                        agent,
                        text,
                        run_config=config,
                        session=session,
                        max_turns=turns,
                    )
                    run.final_outputs.append(result.final_output)
            except MaxTurnsExceeded:
                run.interrupted += 1
                logger.debug("replay run stopped at its turn budget (%d turns)", turns)
    finally:
        inner.close()
        await client.close()
    run.records = provider.records
    return run

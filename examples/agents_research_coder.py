"""A tool-heavy coding agent on the OpenAI Agents SDK, with and without cachepilot.

The agent ("Forge") reads, greps, runs tests and edits a small inventory project shipped with
cachepilot, using real tools over those files (`cachepilot_bench.demo_workload`). The agent code is
ordinary Agents SDK code; cachepilot attaches through one run config (`run_config`), plus
`wrap` where the agent holds a model instance.

Without an API key (the default) the model side is the replay provider: an OpenAI-compatible
endpoint on 127.0.0.1 that answers with the recorded replies of the built-in demo session and
reports the usage a prompt cache would bill for the bytes the SDK really sent. It is not a
language model; it makes the comparison exact and free. The same agent runs twice, plain and
with cachepilot, over the SDK's real `OpenAIResponsesModel` (or `--api chat`).

With `--live` and `OPENAI_API_KEY` set, the agent runs once with cachepilot against the real
API (model `--model`, default gpt-5.4-mini) and prints the usage the API reported.

Run:
    uv run python examples/agents_research_coder.py [--api responses|chat]
    OPENAI_API_KEY=... uv run python examples/agents_research_coder.py --live
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, Runner, SQLiteSession, set_tracing_disabled
from agents.tool_context import ToolContext

from cachepilot import CachePilot, SQLiteArtifactStore
from cachepilot.sim import get_profile
from cachepilot.usage import Usage
from cachepilot_agents import CachePilotAgents
from cachepilot_bench.demo_workload import (
    DEMO_TOOL_SCHEMAS,
    DemoToolState,
    build_demo_session,
    run_demo_tool,
)
from cachepilot_bench.frameworks.agents_replay import run_script
from cachepilot_bench.replay import ReplayProvider, ReplayScript

PROFILE = "openai-gpt-5.4-mini"


def coding_tools(state: DemoToolState) -> list[FunctionTool]:
    """read_file, list_dir, grep, bash, fetch_url, edit_file over the shipped project."""

    def make(schema: dict[str, Any]) -> FunctionTool:
        name = schema["function"]["name"]

        async def invoke(_context: ToolContext[Any], arguments: str) -> str:
            return run_demo_tool(name, arguments, state)

        return FunctionTool(
            name=name,
            description=schema["function"]["description"],
            params_json_schema=schema["function"]["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    return [make(schema) for schema in DEMO_TOOL_SCHEMAS]


def row(label: str, usage: Usage, requests: int, breaks: int) -> str:
    cost = get_profile(PROFILE).cost(usage)
    hit = usage.cached_tokens / usage.input_tokens if usage.input_tokens else 0.0
    return (
        f"{label:<12} {requests:>8} {usage.input_tokens:>12,} {hit:>8.1%} {breaks:>7} "
        f"{cost.input_usd:>10.4f} {cost.total_usd:>10.4f}"
    )


async def replay(api: str, workdir: Path) -> None:
    script = ReplayScript.from_session(build_demo_session())
    print(f"Replaying the demo session ({len(script.turns)} model calls) over the {api} API\n")
    header = f"{'run':<12} {'requests':>8} {'input tok':>12} {'hit':>8} {'breaks':>7}"
    print(f"{header} {'input $':>10} {'total $':>10}")
    with ReplayProvider(script, profile=PROFILE) as provider:
        plain = await run_script(script, provider, api=api)  # type: ignore[arg-type]
        print(row("plain SDK", plain.usage, len(plain.records), plain.prefix_breaks))
        pilot = CachePilot(store=SQLiteArtifactStore(workdir / "artifacts.sqlite"))
        cp = CachePilotAgents(pilot, clock=provider.clock)
        piloted = await run_script(script, provider, plugin=cp, api=api, session_id="forge-demo")  # type: ignore[arg-type]
        print(row("cachepilot", piloted.usage, len(piloted.records), piloted.prefix_breaks))
    saved = 1 - piloted.input_cost_usd(PROFILE) / plain.input_cost_usd(PROFILE)
    epochs = pilot.state("forge-demo").plan.epochs
    print(f"\ninput cost saved: {saved:.0%}; maintenance points: {[e.reason for e in epochs]}")


async def live(model: str, workdir: Path) -> None:
    pilot = CachePilot(store=SQLiteArtifactStore(workdir / "artifacts.sqlite"))
    cp = CachePilotAgents(pilot)
    session = SQLiteSession("forge-live", workdir / "session.db")
    agent = Agent(
        name="forge",
        instructions=build_demo_session().messages[0].text,
        tools=list(coding_tools(DemoToolState())),
        model=model,  # a model name: the run config's provider gives it the wrapper
    )
    task = (
        "The inventory report double-counts items that expired today. Find the bug, fix it "
        "with edit_file, and run the tests with bash to confirm."
    )
    result = await Runner.run(
        agent,
        task,
        run_config=cp.run_config(session=session),
        session=session,
        max_turns=40,
    )
    print(result.final_output, "\n")
    total = Usage()
    for request in cp.requests:
        total = total + request.usage
    print(row("cachepilot", total, len(cp.requests), 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", choices=["responses", "chat"], default="responses")
    parser.add_argument("--live", action="store_true", help="use the real API (OPENAI_API_KEY)")
    parser.add_argument("--model", default=os.environ.get("CACHEPILOT_LIVE_MODEL", "gpt-5.4-mini"))
    args = parser.parse_args()
    set_tracing_disabled(not args.live)
    with tempfile.TemporaryDirectory() as tmp:
        if args.live:
            if not os.environ.get("OPENAI_API_KEY"):
                raise SystemExit("--live needs OPENAI_API_KEY")
            asyncio.run(live(args.model, Path(tmp)))
        else:
            asyncio.run(replay(args.api, Path(tmp)))


if __name__ == "__main__":
    main()

"""The Agents plugin computes ahead, after each preparation, what the next maintenance point
will most likely need (`MaintenanceConfig.fold_ahead`): a real `Runner` run sends
byte-identical inputs with it on and off, and what it computed is used."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents_helpers import dumps, eager_config

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold.ahead import SUMMARY_STAGES
from cachepilot_agents import CachePilotAgents


@pytest.fixture(autouse=True)
def _fresh_stages() -> Iterator[None]:
    SUMMARY_STAGES.clear()
    yield
    SUMMARY_STAGES.clear()


@function_tool
def run_step(step: int) -> str:
    """Run one build step."""
    return "\n".join(
        f"step {step}: target_{step}_{i} built in {i * 37 % 900} ms" for i in range(60)
    )


def steps(turns: int) -> list[Any]:
    out: list[Any] = [
        [function_call("run_step", {"step": i}, call_id=f"c{i}")] for i in range(turns)
    ]
    return [*out, [assistant_message("Built.")]]


def run(*, ahead: bool, slow_model: bool = False) -> tuple[list[str], CachePilot]:
    SUMMARY_STAGES.clear()
    config = eager_config(fold_min_tokens=1_000, fold_protect_tokens=2_000, fold_ahead=ahead)
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    if slow_model:  # the model answers after the computation ahead is done
        soon = pilot.precompute_soon

        def waited(thread: str = "default") -> Future[bool] | None:
            future = soon(thread)
            if future is not None:
                future.result(timeout=120)
            return future

        pilot.precompute_soon = waited  # type: ignore[method-assign]
    model = ScriptedModel(steps(40))
    cp = CachePilotAgents(pilot, default_thread="build")
    agent = cp.wrap(Agent(name="builder", instructions="Build it.", tools=[run_step], model=model))

    async def main() -> None:
        await Runner.run(agent, "build", run_config=cp.run_config(), hooks=cp.hooks, max_turns=60)

    asyncio.run(main())
    return [dumps([dumps(i) for i in call.input]) for call in model.calls], pilot


def test_inputs_are_the_same_with_folds_computed_ahead() -> None:
    plain, pilot = run(ahead=False)
    assert any(d.apply and d.reason.endswith("fold") for d in pilot.state("build").decisions)
    assert SUMMARY_STAGES.stats.computed == 0
    assert run(ahead=True)[0] == plain
    assert run(ahead=True, slow_model=True)[0] == plain
    assert SUMMARY_STAGES.stats.used > 0  # what was computed ahead was used

"""The real Agents SDK `Runner` with instructions that change on every model call (a budget
counting down, a session id, a build number): with the plugin the model reads each call's
current values, the input only grows between maintenance points, and another session reads
nothing of the first."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from agents import Agent, Runner, SQLiteSession, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents_helpers import dumps, is_prefix

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical import CanonicalConfig
from cachepilot.canonical.notes import read_placeholders, resolve_placeholders
from cachepilot_agents import CachePilotAgents

CANONICAL = CanonicalConfig(clock_resolution_seconds=0)


@function_tool
def run_step(step: int) -> str:
    """Run one build step."""
    return "\n".join(f"step {step}: line {i:04d} ok" for i in range(50))


def prompt_for(user: str, call: int) -> str:
    return (
        "You are the build agent of the platform team.\n"
        f"User: {user}\n"
        f"Remaining budget: {5000 - 150 * call} tokens\n"
        f"Session {call:02d}f0c2e41-77aa\n"
        f"Build #{4711 + call}\n"
        "Run the steps you need, then answer briefly.\n"
    )


def texts(item: Any) -> list[str]:
    """The texts of one input item (message content or tool output)."""
    if not isinstance(item, dict):
        item = item.model_dump() if hasattr(item, "model_dump") else {}
    out: list[str] = []
    for key in ("content", "output"):
        value = item.get(key)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            out.extend(p.get("text", "") for p in value if isinstance(p, dict))
    return out


def model_reads(system: str, items: list[Any]) -> str:
    values = read_placeholders([system, *(t for item in items for t in texts(item))], CANONICAL)
    return resolve_placeholders(system, values, CANONICAL)


def run_session(cp: CachePilotAgents, user: str, tmp_path: Path) -> tuple[ScriptedModel, list[str]]:
    steps = [[function_call("run_step", {"step": i}, call_id=f"{user}-{i}")] for i in range(6)]
    model = ScriptedModel([*steps, [assistant_message("done")]])
    prompts: list[str] = []

    def instructions(_ctx: Any, _agent: Any) -> str:
        prompts.append(prompt_for(user, len(prompts)))
        return prompts[-1]

    agent = cp.wrap(Agent(name="builder", instructions=instructions, tools=[run_step], model=model))
    session = cp.session(SQLiteSession(f"s-{user}", tmp_path / "s.db"))
    result = asyncio.run(
        Runner.run(
            agent,
            "Build the project.",
            run_config=cp.run_config(),
            hooks=cp.hooks,
            session=session,
            max_turns=20,
        )
    )
    assert result.final_output == "done"
    stored = asyncio.run(session.get_items())
    assert not any("context-update" in dumps(i) for i in stored)  # the session is the host's
    return model, prompts


def test_runner_reads_the_current_values_on_every_call(tmp_path: Path) -> None:
    pilot = CachePilot(
        Config(canonical=CANONICAL, maintenance={"enabled": False}),
        store=InMemoryArtifactStore(),
    )
    cp = CachePilotAgents(pilot)
    model, prompts = run_session(cp, "alice-7731", tmp_path)
    calls = model.calls
    assert len(calls) == 7 == len(prompts)
    for call, prompt in zip(calls, prompts, strict=True):
        assert model_reads(call.system_instructions or "", list(call.input)) == prompt
    for before, after in itertools.pairwise(calls[1:]):
        assert before.system_instructions == after.system_instructions
        assert is_prefix(before.input, after.input)

    other, other_prompts = run_session(cp, "bob-2209", tmp_path)
    for call, prompt in zip(other.calls, other_prompts, strict=True):
        assert "alice-7731" not in dumps([call.system_instructions, list(call.input)])
        assert model_reads(call.system_instructions or "", list(call.input)) == prompt

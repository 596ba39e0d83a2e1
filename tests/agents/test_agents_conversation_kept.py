"""A plain chat under the real Agents SDK `Runner` with the plugin: the file the user pasted in
turn 2 stays in the model's view for the rest of the chat, on a warm and on a cold cache
(DESIGN §2.7: a tool-less exchange is conversation, never finished work)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agents import Agent, Runner, SQLiteSession
from agents.testing import ScriptedModel, assistant_message
from agents_helpers import Clock

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_agents import CachePilotAgents

PASTED = "".join(
    f"def handler_{i}(request):\n    return respond(request, code={i * 7 + 3})\n"
    for i in range(1_700)
)


@pytest.mark.parametrize("step", [5.0, 3_600.0], ids=["warm-cache", "cold-cache"])
def test_a_pasted_file_stays_in_view_under_the_runner(tmp_path: Path, step: float) -> None:
    turns = ["Hi! I will paste a module.", "Here it is:\n\n" + PASTED]
    turns += [f"What code does handler_{n * 100} return?" for n in range(3, 9)]
    model = ScriptedModel([[assistant_message(f"Answer {i}.")] for i in range(len(turns))])
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    cp = CachePilotAgents(pilot, clock=Clock(step=step))
    agent = cp.wrap(Agent(name="chat", model=model))
    session = cp.session(SQLiteSession("chat", tmp_path / "chat.db"))

    async def chat() -> None:
        for text in turns:
            await Runner.run(agent, text, run_config=cp.run_config(), session=session)

    asyncio.run(chat())
    calls = model.calls
    assert len(calls) == len(turns)
    for call in calls[1:]:
        assert any(PASTED in _text(item) for item in call.input)
    assert not any(e.kind == "fold" for ep in pilot.state("chat").plan.epochs for e in ep.edits)


def _text(item: object) -> str:
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""

"""The pilot state checkpointed with every step stays as large as the live work."""

from __future__ import annotations

from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import TOOLS, ScriptedChatModel, coding_responder

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_langgraph import CachePilotMiddleware


def _pilot_bytes(saver: InMemorySaver) -> tuple[int, int]:
    """(bytes of every checkpointed copy of the pilot state, bytes of the last copy)."""
    copies = sorted(
        ((key[3], len(blob[1])) for key, blob in saver.blobs.items() if key[2] == "cachepilot"),
        key=lambda item: str(item[0]),
    )
    return sum(size for _, size in copies), copies[-1][1]


def test_checkpointed_pilot_state_stays_small() -> None:
    saver = InMemorySaver()
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    model = ScriptedChatModel(responder=coding_responder(150))
    agent = create_agent(model, TOOLS, middleware=[CachePilotMiddleware(pilot)], checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": 1_000}
    agent.invoke({"messages": [("user", "build it")]}, config)
    state = pilot.state("t")
    assert state.lifecycle.settled_units > 50  # stubbed work left the registry
    total, last = _pilot_bytes(saver)
    # Before settling: about 130 KB in the last copy and 19 MiB in all (about 61 KB and 7.5 MiB
    # now: graph state keeps the tools' own outputs, so the plan holds its stubs, and the
    # views map adds about 38 bytes per tool result).
    assert last < 70_000, last
    assert total < 9 * 2**20, total

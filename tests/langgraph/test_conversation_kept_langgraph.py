"""A plain chat through `create_agent` with `CachePilotMiddleware`: the file the user pasted in
turn 2 stays in the model's view for the rest of the chat, with and without recall (DESIGN
§2.7: a tool-less exchange is conversation, never finished work)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_langgraph import CachePilotMiddleware

PASTED = "".join(
    f"def handler_{i}(request):\n    return respond(request, code={i * 7 + 3})\n"
    for i in range(1_700)
)


@pytest.mark.parametrize("recall", [True, False])
def test_a_pasted_file_stays_in_view_through_the_middleware(scripted: Any, recall: bool) -> None:
    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        return AIMessage(content=f"Answer {i}.")

    model = scripted(respond)
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    agent = create_agent(
        model, [], middleware=[CachePilotMiddleware(pilot, recall=recall)],
        checkpointer=InMemorySaver(),
    )  # fmt: skip
    config: Any = {"configurable": {"thread_id": "chat"}}
    turns = ["Hi! I will paste a module.", "Here it is:\n\n" + PASTED]
    turns += [f"What code does handler_{n * 100} return?" for n in range(3, 9)]
    for text in turns:
        agent.invoke({"messages": [HumanMessage(text)]}, config)
    requests = model.requests
    assert len(requests) == len(turns)
    for request in requests[1:]:
        assert any(PASTED in str(m.get("content")) for m in request["messages"])
    # Every message of the chat reached the model as the user and the model wrote it.
    last = [(m["role"], m["content"]) for m in requests[-1]["messages"]]
    assert [c for r, c in last if r == "user"][-len(turns) :] == turns
    assert not any(e.kind == "fold" for ep in pilot.state("chat").plan.epochs for e in ep.edits)

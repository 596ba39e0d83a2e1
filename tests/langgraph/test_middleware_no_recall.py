"""`CachePilotMiddleware(recall=False)`: maintenance still shrinks the history, and nothing
the model reads names a `recall(...)` it is not offered (stubs, argument previews, folds)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import run_command, tool_call

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold import FOLD_HEADER_PREFIX
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot_langgraph import CachePilotMiddleware


def _pilot() -> CachePilot:
    maintenance = MaintenanceConfig(
        prune=True,
        schedule="fixed",
        every=1,
        protect_results=2,
        protect_tool_tokens=0,
        min_prune_tokens=0,
    )
    return CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())


def _run(scripted: Any, recall: bool, fail_at: int | None = None) -> list[dict[str, Any]]:
    failed: list[int] = []

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == fail_at and not failed:
            failed.append(i)
            raise ValueError("This model's maximum context length is 128000 tokens")
        return (
            tool_call("run_command", {"command": f"make step{i}"}, i) if i < 8 else AIMessage("ok")
        )

    model = scripted(respond)
    middleware = CachePilotMiddleware(_pilot(), recall=recall)
    agent = create_agent(
        model, [run_command], middleware=[middleware], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage("build it")]}, {"configurable": {"thread_id": "t"}})
    return list(model.requests)


@pytest.mark.parametrize("recall", [True, False])
def test_maintenance_texts_follow_the_recall_offer(scripted: Any, recall: bool) -> None:
    requests = _run(scripted, recall)
    sent = [json.dumps(r["messages"]) for r in requests]
    assert any("output pruned" in s for s in sent), "maintenance must have stubbed outputs"
    assert any("recall(" in s for s in sent) is recall
    offered = {t["function"]["name"] for r in requests for t in r["tools"]}
    assert ("recall" in offered) is recall
    if not recall:
        assert any("tokens; full text elided]" in s for s in sent)


def test_the_emergency_fold_names_no_recall_without_the_tool(scripted: Any) -> None:
    requests = _run(scripted, recall=False, fail_at=6)
    sent = [json.dumps(r["messages"]) for r in requests]
    assert any(FOLD_HEADER_PREFIX in s for s in sent), "the retry must carry the fold"
    assert not any("recall(" in s for s in sent)

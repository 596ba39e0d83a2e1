"""`CachePilotMiddleware` in the same `create_agent` as LangChain's own context management
(`ContextEditingMiddleware` + `ClearToolUsesEdit`, `SummarizationMiddleware`), in both orders.

Each run is compared with the plain agent that has only the native middleware: the agent's
messages are the same, no tool result is both cleared by LangChain and stubbed by cachepilot,
what cachepilot reduced stays recallable, and a summarized range is never folded again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    SummarizationMiddleware,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import REF, ScriptedChatModel, command_log, read_note, run_command, tool_call

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig, is_stub
from cachepilot_langgraph import CachePilotMiddleware

THREAD = "native"
CONFIG = {"configurable": {"thread_id": THREAD}}
PLACEHOLDER = "[cleared]"
SUMMARY_HEAD = "Here is a summary of the conversation to date:"
CALLS = 14


def _responder(messages: list[BaseMessage], i: int) -> AIMessage:
    if i < CALLS:
        if i % 3 == 2:
            return tool_call("read_note", {"name": f"n{i}"}, i)
        return tool_call("run_command", {"command": f"make step{i}"}, i)
    return AIMessage(content="done")


def _summarizer(messages: list[BaseMessage], i: int) -> AIMessage:
    return AIMessage(content=f"summary {i}: ran make steps, read notes")


def _pilot(**maintenance: Any) -> CachePilot:
    # Maintenance every 3 calls with small protections: stubs happen within the short run.
    config = MaintenanceConfig(
        prune=True,
        schedule="fixed",
        every=3,
        protect_results=2,
        protect_tool_tokens=0,
        min_prune_tokens=0,
        **maintenance,
    )
    return CachePilot(Config(maintenance=config), store=InMemoryArtifactStore())


def _run(middleware: list[AgentMiddleware[Any, Any]]) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = ScriptedChatModel(responder=_responder)
    agent = create_agent(
        model, [run_command, read_note], middleware=middleware, checkpointer=InMemorySaver()
    )
    state = agent.invoke({"messages": [HumanMessage("build it step by step")]}, CONFIG)
    return state, model


def _shape(messages: Sequence[BaseMessage]) -> list[tuple[Any, ...]]:
    """What the agent returned, without LangChain's random message ids."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        calls = [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])]
        out.append((type(m).__name__, m.content, getattr(m, "tool_call_id", None), calls))
    return out


def _tool_contents(model: ScriptedChatModel) -> list[dict[str, str]]:
    """Per request: call id -> what the model read for that tool result."""
    return [
        {m["tool_call_id"]: m["content"] for m in r["messages"] if m["role"] == "tool"}
        for r in model.requests
    ]


def _cleared_and_stubbed(model: ScriptedChatModel) -> tuple[set[str], set[str]]:
    cleared: set[str] = set()
    stubbed: set[str] = set()
    for shown in _tool_contents(model):
        for call_id, content in shown.items():
            if content == PLACEHOLDER:
                cleared.add(call_id)
            elif is_stub(content):
                stubbed.add(call_id)
    return cleared, stubbed


def _originals(state: dict[str, Any]) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)}


def _assert_reduced_results_recallable(pilot: CachePilot, model: ScriptedChatModel) -> int:
    """Every ref the model was shown recalls an original tool output, never a placeholder."""
    expected = {f"call_{i}": command_log(f"make step{i}") for i in range(CALLS) if i % 3 != 2}
    checked = 0
    for shown in _tool_contents(model):
        for call_id, content in shown.items():
            found = REF.search(content)
            if found is None:
                continue
            artifact = pilot.store.get(THREAD, found.group(1))
            assert artifact is not None, f"ref of {call_id} not archived"
            if artifact.meta.get("kind") == "view":  # a view names the original it reduces
                artifact = pilot.store.get(THREAD, str(artifact.meta["of"]))
                assert artifact is not None
            assert artifact.text == expected[call_id]
            checked += 1
    for info in pilot.store.list(THREAD):
        found_artifact = pilot.store.get(THREAD, info.ref)
        assert found_artifact is not None and found_artifact.text != PLACEHOLDER
    return checked


# --------------------------------------------------------------------- ContextEditingMiddleware


def _clear_tool_uses() -> ContextEditingMiddleware[Any, Any]:
    return ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=2_000, keep=4)])


@pytest.mark.parametrize("native_first", [True, False], ids=["native-first", "cachepilot-first"])
def test_clear_tool_uses_next_to_cachepilot(native_first: bool) -> None:
    plain, plain_model = _run([_clear_tool_uses()])
    pilot = _pilot()
    ours_mw: list[AgentMiddleware[Any, Any]] = [_clear_tool_uses(), CachePilotMiddleware(pilot)]
    if not native_first:
        ours_mw.reverse()
    ours, model = _run(ours_mw)

    assert ours["messages"][-1].content == "done"
    assert _shape(ours["messages"]) == _shape(plain["messages"])
    assert set(ours) == set(plain)  # the pilot state is private

    cleared, stubbed = _cleared_and_stubbed(model)
    assert cleared, "LangChain cleared results in this run"
    assert stubbed, "cachepilot stubbed results in this run"
    assert not cleared & stubbed, f"both cleared and stubbed: {sorted(cleared & stubbed)}"
    assert pilot.state(THREAD).plan.epochs
    assert _assert_reduced_results_recallable(pilot, model) > 0
    # The plain run cleared too: the native middleware still works.
    assert _cleared_and_stubbed(plain_model)[0]


def test_cleared_placeholders_are_never_ingested() -> None:
    pilot = _pilot()
    _, model = _run([_clear_tool_uses(), CachePilotMiddleware(pilot)])
    # One view per tool result the model read in full first; none for the placeholders.
    assert any(PLACEHOLDER in shown.values() for shown in _tool_contents(model))
    assert len(pilot.state(THREAD).views) == CALLS


def test_cachepilot_stubs_are_left_to_cachepilot_by_an_inner_clear() -> None:
    pilot = _pilot()
    _, model = _run([CachePilotMiddleware(pilot), _clear_tool_uses()])
    contents = _tool_contents(model)
    last = contents[-1]
    stubs = [call_id for call_id, content in last.items() if is_stub(content)]
    assert stubs
    # Once a stub was shown, every later request shows the same stub (the ref stays).
    for call_id in stubs:
        seen = [shown[call_id] for shown in contents if call_id in shown]
        first = next(i for i, content in enumerate(seen) if is_stub(content))
        assert set(seen[first:]) == {last[call_id]}


# --------------------------------------------------------------------- SummarizationMiddleware


def _summarization() -> SummarizationMiddleware:
    return SummarizationMiddleware(
        model=ScriptedChatModel(responder=_summarizer),
        trigger=("messages", 12),
        keep=("messages", 4),
    )


@pytest.mark.parametrize("native_first", [True, False], ids=["native-first", "cachepilot-first"])
def test_summarization_next_to_cachepilot(native_first: bool) -> None:
    plain, _ = _run([_summarization()])
    # A small window makes cachepilot fold too: its fold must start after the summary.
    pilot = _pilot(context_window=6_000, fold_trigger=0.5, fold_min_tokens=0, fold_protect_tokens=0)
    ours_mw: list[AgentMiddleware[Any, Any]] = [_summarization(), CachePilotMiddleware(pilot)]
    if not native_first:
        ours_mw.reverse()
    ours, model = _run(ours_mw)

    assert ours["messages"][-1].content == "done"
    assert _shape(ours["messages"]) == _shape(plain["messages"])
    summaries = [
        str(m.content)
        for m in ours["messages"]
        if isinstance(m, HumanMessage) and str(m.content).startswith(SUMMARY_HEAD)
    ]
    assert summaries, "LangChain summarized in this run"

    # The summary LangChain wrote is read verbatim by every later call: never folded again.
    read_summary = 0
    for request in model.requests:
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        heads = [u for u in users if isinstance(u, str) and u.startswith(SUMMARY_HEAD)]
        if heads:
            read_summary += 1
            assert heads[0] in summaries
    assert read_summary > 0
    folds = [
        edit
        for epoch in pilot.state(THREAD).plan.epochs
        for edit in epoch.edits
        if edit.kind == "fold"
    ]
    assert folds, "cachepilot folded in this run"
    for edit in folds:
        archived = pilot.store.get(THREAD, edit.ref or "")
        assert archived is not None
        assert SUMMARY_HEAD not in archived.text, "a summarized range was folded again"
    assert _assert_reduced_results_recallable(pilot, model) > 0

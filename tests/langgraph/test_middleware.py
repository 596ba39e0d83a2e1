"""`CachePilotMiddleware` in a real `create_agent` agent with a real checkpointer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import (
    REF,
    ScriptedChatModel,
    coding_responder,
    command_log,
    flaky,
    last_tool,
    read_note,
    run_command,
    tool_call,
    wire_prefix_extends,
)

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import pairing_issues
from cachepilot_langgraph import CachePilotMiddleware, MessageConverter


def _agent(model: ScriptedChatModel, pilot: CachePilot, checkpointer: Any = None, **kw: Any):
    return create_agent(
        model,
        [run_command, read_note, flaky],
        system_prompt="You are a careful coding agent. Today is 2026-11-21.",
        middleware=[CachePilotMiddleware(pilot)],
        checkpointer=checkpointer or InMemorySaver(),
        **kw,
    )


def _pilot(**maintenance: Any) -> CachePilot:
    # Tests that set maintenance watch its edits: pruning (off by default) is on for them.
    config = Config(maintenance={"prune": True, **maintenance}) if maintenance else Config()
    return CachePilot(config, store=InMemoryArtifactStore())


def test_long_session_reduces_recalls_and_stays_prefix_stable(scripted) -> None:
    pilot = _pilot()
    epochs: list[int] = []
    inner = coding_responder(34, recall_at=7)

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        epochs.append(len(pilot.state("t1").plan.epochs))
        return inner(messages, i)

    model = scripted(respond)
    agent = _agent(model, pilot)
    config = {"configurable": {"thread_id": "t1"}}
    out = agent.invoke({"messages": [HumanMessage("fix the build")]}, config)
    assert out["messages"][-1].content == "done"
    assert len(model.requests) == 35

    # State and the checkpoint keep the tools' own output; the model read it reduced.
    saved = agent.get_state(config).values
    tools_in_state = [m for m in saved["messages"] if isinstance(m, ToolMessage)]
    commands = [m for m in tools_in_state if m.name == "run_command"]
    assert commands and all(
        len(str(m.content)) >= len(command_log("make step0")) // 2 for m in commands
    )
    assert not any(REF.search(str(m.content)) for m in commands)
    sent_tools = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    sent_commands = [
        m for m in sent_tools if m["tool_call_id"] in {c.tool_call_id for c in commands}
    ]
    assert sent_commands and all(REF.search(str(m["content"])) for m in sent_commands)
    assert all(len(str(m["content"])) < len(command_log("make step0")) for m in sent_commands)

    # recall returned the original (the first lines of the untouched log) to the model.
    recalled = model.requests[8]["messages"][-1]
    assert recalled["role"] == "tool" and recalled["tool_call_id"] == "call_7"
    original = command_log("make step6").splitlines()
    assert original[0] in recalled["content"] and original[2] in recalled["content"]

    # The recall tool is bound from the first call and the tool list never changes.
    names = [[t["function"]["name"] for t in r["tools"]] for r in model.requests]
    assert names[0] == sorted(names[0]) and "recall" in names[0]
    assert all(n == names[0] for n in names)

    # Requests extend each other except where a maintenance epoch was appended.
    for i in range(1, len(model.requests)):
        if not wire_prefix_extends(model.requests[i - 1], model.requests[i]):
            assert epochs[i] > epochs[i - 1], f"call {i} broke the prefix without an epoch"

    # Pilot state lives in graph state (not in the agent's output); pairing holds.
    assert "cachepilot" not in out
    assert saved["cachepilot"]["calls"] == 35
    assert saved["cachepilot"]["usage"]["cached_tokens"] > 0
    core = MessageConverter().to_core(saved["messages"])
    assert pairing_issues(core) == []


def test_maintenance_epochs_live_in_the_pilot_state_not_in_messages(scripted) -> None:
    # Aggressive settings so maintenance happens within a short session.
    pilot = _pilot(
        protect_tool_tokens=500, protect_results=1, min_prune_tokens=100, schedule="fixed"
    )
    epochs: list[int] = []
    inner = coding_responder(40)

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        epochs.append(len(pilot.state("m").plan.epochs))
        return inner(messages, i)

    model = scripted(respond)
    agent = _agent(model, pilot)
    config = {"configurable": {"thread_id": "m"}}
    agent.invoke({"messages": [HumanMessage("go")]}, config)
    plan = pilot.state("m").plan
    assert plan.epochs, "aggressive settings must produce a maintenance epoch"
    breaks = sum(
        not wire_prefix_extends(model.requests[i - 1], model.requests[i])
        for i in range(1, len(model.requests))
    )
    assert breaks <= len(plan.epochs)
    for i in range(1, len(model.requests)):
        if not wire_prefix_extends(model.requests[i - 1], model.requests[i]):
            assert epochs[i] > epochs[i - 1]
    # State keeps the plain messages; the edits reach the model only.
    saved = agent.get_state(config).values
    state_msgs = saved["messages"]
    assert saved["cachepilot"]["plan"]["epochs"], "the plan is persisted with the pilot state"
    stubbed = {e.key for ep in plan.epochs for e in ep.edits if e.kind == "stub"}
    by_id = {f"id:{m.id}": m for m in state_msgs}
    assert stubbed & by_id.keys()
    for key in stubbed & by_id.keys():
        assert "recall(ref=" not in str(by_id[key].content)
    last_wire = model.requests[-1]["messages"]
    sent = {m["tool_call_id"]: m["content"] for m in last_wire if m["role"] == "tool"}
    for key in stubbed & by_id.keys():
        message = by_id[key]
        assert isinstance(message, ToolMessage)
        assert "recall(ref=" in str(sent[message.tool_call_id])
    assert pairing_issues(MessageConverter().to_core(state_msgs)) == []


def test_resume_from_checkpoint_in_a_new_process_keeps_the_view(scripted) -> None:
    store = InMemoryArtifactStore()
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "r"}}
    settings = {
        "prune": True,
        "protect_tool_tokens": 500,
        "protect_results": 1,
        "min_prune_tokens": 100,
        "schedule": "fixed",
    }

    # Reference: one uninterrupted run.
    ref_model = ScriptedChatModel(responder=coding_responder(20))
    ref_pilot = CachePilot(Config(maintenance=settings), store=InMemoryArtifactStore())
    _agent(ref_model, ref_pilot).invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "r"}}
    )

    # Interrupted before the tools at call 10, resumed by a fresh pilot + middleware.
    model_a = ScriptedChatModel(responder=coding_responder(20))
    pilot_a = CachePilot(Config(maintenance=settings), store=store)
    agent_a = _agent(model_a, pilot_a, saver, interrupt_before=["tools"])
    agent_a.invoke({"messages": [HumanMessage("go")]}, config)
    for _ in range(9):
        agent_a.invoke(None, config)
    assert len(model_a.requests) == 10

    def later(messages: list[BaseMessage], i: int) -> AIMessage:
        return coding_responder(20)(messages, i + 10)

    model_b = ScriptedChatModel(responder=later)
    pilot_b = CachePilot(Config(maintenance=settings), store=store)
    agent_b = _agent(model_b, pilot_b, saver)
    agent_b.invoke(None, config)
    assert model_a.requests + model_b.requests == ref_model.requests


def test_threads_never_see_each_others_artifacts(scripted) -> None:
    pilot = _pilot()
    refs: dict[str, str] = {}

    def first(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("run_command", {"command": "make all"}, i)
        found = REF.search(str(last_tool(messages).content))
        refs["t1"] = found.group(1)
        return AIMessage(content="ok")

    agent1 = _agent(scripted(first), pilot)
    agent1.invoke({"messages": [HumanMessage("a")]}, {"configurable": {"thread_id": "one"}})

    def second(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("recall", {"ref": refs["t1"]}, i)
        return AIMessage(content="ok")

    model2 = scripted(second)
    agent2 = _agent(model2, pilot)
    out = agent2.invoke({"messages": [HumanMessage("b")]}, {"configurable": {"thread_id": "two"}})
    recall_msg = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert "not found" in str(recall_msg.content)
    assert "step 00001" not in str(recall_msg.content)
    # The owner thread still gets it.
    assert "step 00001" in pilot.recall(refs["t1"], thread="one")


def test_junk_and_raising_tools_do_not_break_the_run(scripted) -> None:
    pilot = _pilot()
    model = scripted(coding_responder(6, junk=["bytes", "none", "huge", "raise"]))
    agent = create_agent(
        model,
        [run_command, read_note, flaky],
        middleware=[CachePilotMiddleware(pilot)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "j"}}
    try:
        out = agent.invoke({"messages": [HumanMessage("go")]}, config)
    except RuntimeError as exc:  # the framework's own policy for raising tools
        assert "tool exploded" in str(exc)
        out = agent.get_state(config).values
    tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    huge = [m for m in tools if "x" * 100 in str(m.content)]
    assert huge and str(huge[0].content) == "x" * 300_000  # the run keeps the tool's output
    sent = [
        m["content"]
        for r in model.requests
        for m in r["messages"]
        if m["role"] == "tool" and m["tool_call_id"] == huge[0].tool_call_id
    ]
    assert sent and all(len(str(c)) < 100_000 for c in sent)  # the model read it reduced
    ref = REF.search(str(sent[0]))
    archived = pilot.store.get("j", ref.group(1)) if ref else None
    assert archived is not None and archived.text == "x" * 300_000


def test_async_agent_matches_sync(scripted) -> None:
    sync_model = scripted(coding_responder(12, recall_at=4))
    _agent(sync_model, _pilot()).invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "s"}}
    )
    async_model = scripted(coding_responder(12, recall_at=4))
    agent = _agent(async_model, _pilot())
    asyncio.run(
        agent.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "s"}})
    )
    assert json.dumps(async_model.requests) == json.dumps(sync_model.requests)


def test_default_pilot_uses_the_graph_store(scripted, tmp_path, monkeypatch) -> None:
    from langgraph.store.memory import InMemoryStore

    monkeypatch.setenv("CACHEPILOT_HOME", str(tmp_path))
    graph_store = InMemoryStore()
    middleware = CachePilotMiddleware()
    model = scripted(coding_responder(2))
    agent = create_agent(
        model,
        [run_command],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
        store=graph_store,
    )
    agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "g"}})
    found = graph_store.search(("cachepilot", "artifacts", "g"))
    assert found, "artifacts went to the graph's BaseStore"
    assert not list(tmp_path.glob("*.sqlite*")), "the default SQLite store was not opened"


def test_parallel_tool_calls_merge_pilot_state(scripted) -> None:
    pilot = _pilot()

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return AIMessage(
                content="",
                tool_calls=[
                    {"name": "run_command", "args": {"command": f"job {k}"}, "id": f"p{k}"}
                    for k in range(3)
                ],
            )
        return AIMessage(content="done")

    model = scripted(respond)
    agent = _agent(model, pilot)
    config = {"configurable": {"thread_id": "par"}}
    agent.invoke({"messages": [HumanMessage("go")]}, config)
    saved = agent.get_state(config).values
    results = [m for m in saved["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 3 and not any(REF.search(str(m.content)) for m in results)
    sent = [m for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert len(sent) == 3 and all(REF.search(str(m["content"])) for m in sent)
    assert saved["cachepilot"]["revision"] == pilot.state("par").revision
    originals = [i for i in pilot.store.list("par") if i.meta.get("kind") != "view"]
    assert len(originals) == 3


def test_metrics_reach_the_sinks(scripted) -> None:
    from cachepilot.diagnose.metrics import InMemorySink, Metrics

    sink = InMemorySink()
    pilot = _pilot()
    agent = create_agent(
        scripted(coding_responder(4)),
        [run_command, read_note],
        middleware=[CachePilotMiddleware(pilot, metrics=Metrics([sink]))],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "mx"}})
    assert len(sink.calls) == 5
    assert [c.call for c in sink.calls] == [1, 2, 3, 4, 5]
    assert sink.calls[-1].cached_tokens > 0 and sink.calls[-1].thread == "mx"

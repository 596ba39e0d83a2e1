"""Runs of a hand-built `StateGraph` without a `thread_id`: each run gets a scope of its own
(archive, frozen values, plan), shared by the run's cachepilot components and by no other run."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from lg_scripted import REF, TOOLS, ScriptedChatModel, command_log, last_tool, tool_call

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_langgraph import (
    CachePilotChatModel,
    CachePilotNode,
    PilotStateMixin,
    cachepilot_tool_node,
    thread_of,
)
from cachepilot_langgraph._shared import link_of

SYSTEM = "You are a careful coding agent. Today is 2026-11-21."


class State(MessagesState, PilotStateMixin):
    """The docs' state plus the pilot state."""


class SpyPilot(CachePilot):
    """Records every thread the components address."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threads: set[str] = set()
        self._spy_lock = threading.Lock()

    def state(self, thread: str = "default") -> Any:
        with self._spy_lock:
            self.threads.add(thread)
        return super().state(thread)


def _graph(model: ScriptedChatModel, pilot: CachePilot, *, node: bool = True) -> Any:
    llm = CachePilotChatModel(model, pilot).bind_tools(TOOLS)

    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [llm.invoke([SystemMessage(SYSTEM), *state["messages"]])]}

    async def acall_model(state: State) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke([SystemMessage(SYSTEM), *state["messages"]])]}

    builder = StateGraph(State)
    builder.add_node("agent", RunnableLambda(call_model, afunc=acall_model))
    builder.add_node("tools", cachepilot_tool_node(pilot, TOOLS))
    if node:
        builder.add_node("cachepilot", CachePilotNode(pilot, system=SYSTEM, tools=TOOLS))
        builder.add_edge(START, "cachepilot")
        builder.add_edge("cachepilot", "agent")
        builder.add_edge("tools", "cachepilot")
    else:
        builder.add_edge(START, "agent")
        builder.add_edge("tools", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    return builder.compile()  # no checkpointer: a stateless server's graph


def _who(messages: list[BaseMessage]) -> str:
    """The run's user message (after the block of the prompt's volatile values)."""
    return str([m for m in messages if isinstance(m, HumanMessage)][-1].content).split()[-1]


def _crossing_responder(refs: dict[str, str], barrier: threading.Barrier) -> Any:
    """Each run archives its own command output, then (once both runs have) recalls the other
    run's ref, then its own."""

    def respond(messages: list[BaseMessage], _: int) -> AIMessage:
        who = _who(messages)
        other = "B" if who == "A" else "A"
        step = sum(isinstance(m, AIMessage) for m in messages)
        if step == 0:
            return tool_call("run_command", {"command": f"make {who}"}, 0)
        if step == 1:
            found = REF.search(str(last_tool(messages).content))  # type: ignore[union-attr]
            assert found, "the output was reduced and names its ref"
            refs[who] = found.group(1)
            barrier.wait(timeout=60)
            return tool_call("recall", {"ref": refs[other]}, 1)
        if step == 2:
            return tool_call("recall", {"ref": refs[who], "lines": "1-2"}, 2)
        return AIMessage(content="done")

    return respond


def _recalls(out: dict[str, Any]) -> list[str]:
    return [
        str(m.content) for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "recall"
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("node", [True, False], ids=["with-node", "model-only"])
def test_concurrent_runs_without_thread_never_see_each_others_refs(node: bool) -> None:
    pilot = SpyPilot(store=InMemoryArtifactStore())
    refs: dict[str, str] = {}
    barrier = threading.Barrier(2)
    graph = _graph(
        ScriptedChatModel(responder=_crossing_responder(refs, barrier)), pilot, node=node
    )

    def run(who: str) -> dict[str, Any]:
        return graph.invoke({"messages": [HumanMessage(who)]}, {"recursion_limit": 50})

    with ThreadPoolExecutor(2) as pool:
        out_a, out_b = pool.map(run, ["A", "B"])

    for who, out in (("A", out_a), ("B", out_b)):
        other = "B" if who == "A" else "A"
        foreign, own = _recalls(out)
        assert "not found" in foreign
        assert f"make {other}: step" not in foreign and f"make {who}: step" not in foreign
        assert command_log(f"make {who}").splitlines()[0] in own
        assert f"make {other}" not in own
        assert out["messages"][-1].content == "done"

    # Two scopes of their own; the shared "default" thread is never used.
    assert "default" not in pilot.threads
    scopes = {t for t in pilot.threads if t.startswith("run-")}
    assert len(scopes) == 2 and scopes == pilot.threads
    assert pilot.store.list("default") == []
    assert all(len(pilot.store.list(scope)) == 1 for scope in scopes)
    if node:  # each run's pilot state is its own (one call for each of its four answers)
        assert sorted(pilot.state(scope).calls for scope in scopes) == [4, 4]


@pytest.mark.timeout(120)
def test_concurrent_async_runs_without_thread_are_isolated() -> None:
    pilot = SpyPilot(store=InMemoryArtifactStore())
    refs: dict[str, str] = {}
    barrier = threading.Barrier(2)
    graph = _graph(ScriptedChatModel(responder=_crossing_responder(refs, barrier)), pilot)

    async def both() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(
                graph.ainvoke({"messages": [HumanMessage("A")]}),
                graph.ainvoke({"messages": [HumanMessage("B")]}),
            )
        )

    out_a, out_b = asyncio.run(both())
    for who, out in (("A", out_a), ("B", out_b)):
        foreign, own = _recalls(out)
        assert "not found" in foreign
        assert command_log(f"make {who}").splitlines()[0] in own
    assert "default" not in pilot.threads and len(pilot.threads) == 2


def test_run_scopes_are_bounded_and_dropped_with_their_archive() -> None:
    pilot = SpyPilot(store=InMemoryArtifactStore())
    link_of(pilot).scopes.limit = 2

    def respond(messages: list[BaseMessage], _: int) -> AIMessage:
        who = _who(messages)
        if not any(isinstance(m, ToolMessage) for m in messages):
            return tool_call("run_command", {"command": f"make {who}"}, 0)
        return AIMessage(content="done")

    graph = _graph(ScriptedChatModel(responder=respond), pilot)
    order: list[str] = []
    for who in ("one", "two", "three"):
        before = set(pilot.threads)
        graph.invoke({"messages": [HumanMessage(who)]})
        (scope,) = pilot.threads - before
        order.append(scope)
    live = link_of(pilot).scopes.live()
    assert live == order[1:]
    # The oldest run's scope went with its archive and its call bookkeeping.
    assert pilot.store.list(order[0]) == []
    assert all(len(pilot.store.list(scope)) == 1 for scope in order[1:])
    assert order[0] not in link_of(pilot).call_threads.values()


def test_a_call_id_seen_in_two_threads_names_no_thread() -> None:
    link = link_of(CachePilot(store=InMemoryArtifactStore()))
    link.note_call_ids("run-a", ["call_0", "call_1"])
    link.note_call_ids("run-a", ["call_0"])
    assert link.thread_of_call("call_0") == "run-a"
    link.note_call_ids("run-b", ["call_0"])
    assert link.thread_of_call("call_0") is None
    assert link.thread_of_call("call_1") == "run-a"


def test_thread_of_has_no_default() -> None:
    assert thread_of(None) is None
    assert thread_of({"configurable": {}}) is None
    assert thread_of({"configurable": {"thread_id": "t"}}, "ns") == "ns:t"


def test_outside_a_graph_every_call_is_a_run_of_its_own() -> None:
    pilot = CachePilot(store=InMemoryArtifactStore())
    scopes = link_of(pilot).scopes
    first = scopes.resolve(None, None)
    second = scopes.resolve({"configurable": {}}, "ns")
    assert first and second and first != second
    assert first.startswith("run-") and second.startswith("ns:run-")
    assert scopes.resolve(None, None, create=False) is None
    pilot.ingest("bash", {"command": "x"}, "y\n" * 50_000, "c1", first)
    assert pilot.store.list(first)
    scopes.release(first)
    assert pilot.store.list(first) == [] and not scopes.is_live(first)
    assert scopes.is_live(second)

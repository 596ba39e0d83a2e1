"""cachepilot in a hand-built LangGraph `StateGraph` (node, model wrapper, `ToolNode`, reducer)
with a real checkpointer."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from lg_scripted import (
    REF,
    TOOLS,
    ScriptedChatModel,
    coding_responder,
    command_log,
    last_tool,
    tool_call,
    wire_prefix_extends,
)

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import pairing_issues
from cachepilot_langgraph import (
    CachePilotChatModel,
    CachePilotNode,
    MessageConverter,
    PilotStateMixin,
    cachepilot_messages,
    cachepilot_tool_node,
)

SYSTEM = "You are a careful coding agent. Today is 2026-11-21."
AGGRESSIVE = {
    "protect_tool_tokens": 500,
    "protect_results": 1,
    "min_prune_tokens": 100,
    "schedule": "fixed",
}


class State(MessagesState, PilotStateMixin):
    """The docs' state plus the pilot state."""


def _pilot(store: InMemoryArtifactStore | None = None, **maintenance: Any) -> CachePilot:
    # Tests that set maintenance watch its edits: pruning (off by default) is on for them.
    config = Config(maintenance={"prune": True, **maintenance}) if maintenance else Config()
    return CachePilot(config, store=store or InMemoryArtifactStore())


def build_graph(
    model: ScriptedChatModel,
    pilot: CachePilot,
    *,
    checkpointer: Any = None,
    asynchronous: bool = False,
    tool_node_kw: dict[str, Any] | None = None,
    **compile_kw: Any,
) -> Any:
    """The LangGraph docs' tool-calling agent, with the cachepilot lines added."""
    llm = CachePilotChatModel(model, pilot).bind_tools(TOOLS)

    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [llm.invoke([SystemMessage(SYSTEM), *state["messages"]])]}

    async def acall_model(state: State) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke([SystemMessage(SYSTEM), *state["messages"]])]}

    builder = StateGraph(State)
    builder.add_node("cachepilot", CachePilotNode(pilot, system=SYSTEM, tools=TOOLS))
    builder.add_node("agent", acall_model if asynchronous else call_model)
    builder.add_node("tools", cachepilot_tool_node(pilot, TOOLS, **(tool_node_kw or {})))
    builder.add_edge(START, "cachepilot")
    builder.add_edge("cachepilot", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "cachepilot")
    return builder.compile(checkpointer=checkpointer or InMemorySaver(), **compile_kw)


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 1_000}


def _breaks_only_at_epochs(model: ScriptedChatModel, epochs: list[int]) -> int:
    breaks = 0
    for i in range(1, len(model.requests)):
        if not wire_prefix_extends(model.requests[i - 1], model.requests[i]):
            breaks += 1
            assert epochs[i] > epochs[i - 1], f"call {i} broke the prefix without an epoch"
    return breaks


# --------------------------------------------------------------------------- the whole loop


def test_long_session_reduces_recalls_and_stays_prefix_stable(scripted) -> None:
    pilot = _pilot()
    epochs: list[int] = []
    inner = coding_responder(34, recall_at=7)

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        epochs.append(len(pilot.state("t1").plan.epochs))
        return inner(messages, i)

    model = scripted(respond)
    graph = build_graph(model, pilot)
    config = _config("t1")
    out = graph.invoke({"messages": [HumanMessage("fix the build")]}, config)
    assert out["messages"][-1].content == "done"
    assert len(model.requests) == 35

    # Tool output over the limit is reduced in state and in the checkpoint.
    saved = graph.get_state(config).values
    commands = [
        m for m in saved["messages"] if isinstance(m, ToolMessage) and m.name == "run_command"
    ]
    assert len(commands) >= 6  # (some may have been folded away by a maintenance epoch)
    assert all(len(str(m.content)) < len(command_log("make step0")) // 10 for m in commands)
    assert all(REF.search(str(m.content)) for m in commands)
    assert all(m.response_metadata.get("cachepilot") == "ingested" for m in commands)

    # recall returned the original (the first lines of the untouched log) to the model.
    recalled = model.requests[8]["messages"][-1]
    assert recalled["role"] == "tool" and recalled["tool_call_id"] == "call_7"
    original = command_log("make step6").splitlines()
    assert original[0] in recalled["content"] and original[2] in recalled["content"]

    # The date never changes: the system prompt goes as written on every call; recall is bound
    # from the first call, tools never change.
    systems = {r["messages"][0]["content"] for r in model.requests}
    assert len(systems) == 1 and "Today is 2026-11-21." in systems.pop()
    names = [[t["function"]["name"] for t in r["tools"]] for r in model.requests]
    assert names[0] == sorted(names[0]) and "recall" in names[0]
    assert all(n == names[0] for n in names)

    # Requests extend each other except where a maintenance epoch was appended.
    _breaks_only_at_epochs(model, epochs)
    cached = sum(u.cached_tokens for u in model.usages)
    assert cached > 0.6 * sum(u.input_tokens for u in model.usages)

    # Pilot state lives in graph state: every call is counted there.
    assert saved["cachepilot"]["calls"] == 35
    assert saved["cachepilot"]["usage"]["cached_tokens"] > 0
    assert pairing_issues(MessageConverter().to_core(saved["messages"])) == []


def test_same_requests_as_create_agent_with_the_middleware(scripted) -> None:
    agents = pytest.importorskip("langchain.agents")
    from cachepilot_langgraph import CachePilotMiddleware

    graph_model = scripted(coding_responder(24, recall_at=6))
    build_graph(graph_model, _pilot(**AGGRESSIVE)).invoke(
        {"messages": [HumanMessage("go")]}, _config("s")
    )
    agent_model = scripted(coding_responder(24, recall_at=6))
    agents.create_agent(
        agent_model,
        TOOLS,
        system_prompt=SYSTEM,
        middleware=[CachePilotMiddleware(_pilot(**AGGRESSIVE))],
        checkpointer=InMemorySaver(),
    ).invoke({"messages": [HumanMessage("go")]}, _config("s"))
    assert len(graph_model.requests) == 25
    assert json.dumps(graph_model.requests) == json.dumps(agent_model.requests)


def test_maintenance_epochs_persist_and_pairing_holds_after_each(scripted) -> None:
    pilot = _pilot(**AGGRESSIVE)
    epochs: list[int] = []
    inner = coding_responder(40)
    converter = MessageConverter()

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        epochs.append(len(pilot.state("m").plan.epochs))
        # What the model is sent never breaks pairing.
        assert pairing_issues(converter.to_core(messages[1:])) == []
        return inner(messages, i)

    model = scripted(respond)
    graph = build_graph(model, pilot)
    config = _config("m")
    graph.invoke({"messages": [HumanMessage("go")]}, config)
    plan = pilot.state("m").plan
    assert len(plan.epochs) >= 3, "aggressive settings must produce maintenance epochs"
    assert 1 <= _breaks_only_at_epochs(model, epochs) <= len(plan.epochs)

    # Every checkpoint (after every epoch and every other step) is pairing-safe.
    history = list(graph.get_state_history(config))
    assert len(history) > 100
    for snapshot in history:
        core = MessageConverter().to_core(snapshot.values.get("messages", []))
        assert pairing_issues(core, allow_pending_tail=True) == []

    # State is the view: the tool results in state are what the model was last sent.
    state_msgs = graph.get_state(config).values["messages"]
    last_wire = model.requests[-1]["messages"]
    assert [m["content"] for m in last_wire if m["role"] == "tool"] == [
        str(m.content) for m in state_msgs if isinstance(m, ToolMessage)
    ]
    stubbed = [m for m in state_msgs if isinstance(m, ToolMessage) and "pruned" in str(m.content)]
    assert stubbed, "pruning stubs were persisted into state by same-id replacement"
    assert len({m.id for m in state_msgs}) == len(state_msgs)


def test_interrupt_and_resume_in_a_fresh_pilot_keeps_the_requests() -> None:
    store = InMemoryArtifactStore()
    saver = InMemorySaver()
    config = _config("r")

    reference = ScriptedChatModel(responder=coding_responder(20))
    build_graph(reference, _pilot(**AGGRESSIVE)).invoke(
        {"messages": [HumanMessage("go")]}, _config("r")
    )

    # Interrupted before the tools at every step, then resumed by a new pilot and graph.
    model_a = ScriptedChatModel(responder=coding_responder(20))
    graph_a = build_graph(
        model_a, _pilot(store, **AGGRESSIVE), checkpointer=saver, interrupt_before=["tools"]
    )
    graph_a.invoke({"messages": [HumanMessage("go")]}, config)
    for _ in range(9):
        graph_a.invoke(None, config)
    assert len(model_a.requests) == 10

    def later(messages: list[BaseMessage], i: int) -> AIMessage:
        return coding_responder(20)(messages, i + 10)

    model_b = ScriptedChatModel(responder=later)
    graph_b = build_graph(model_b, _pilot(store, **AGGRESSIVE), checkpointer=saver)
    graph_b.invoke(None, config)
    assert len(model_a.requests) + len(model_b.requests) == len(reference.requests) == 21
    assert model_a.requests + model_b.requests == reference.requests
    assert graph_b.get_state(config).values["cachepilot"]["calls"] == 21


def test_threads_never_see_each_others_artifacts(scripted) -> None:
    pilot = _pilot()
    refs: dict[str, str] = {}

    def first(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("run_command", {"command": "make all"}, i)
        found = REF.search(str(last_tool(messages).content))  # type: ignore[union-attr]
        assert found
        refs["one"] = found.group(1)
        return AIMessage(content="ok")

    build_graph(scripted(first), pilot).invoke({"messages": [HumanMessage("a")]}, _config("one"))

    def second(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("recall", {"ref": refs["one"]}, i)
        return AIMessage(content="ok")

    out = build_graph(scripted(second), pilot).invoke(
        {"messages": [HumanMessage("b")]}, _config("two")
    )
    recall_msg = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert "not found" in str(recall_msg.content)
    assert "step 00001" not in str(recall_msg.content)
    assert "step 00001" in pilot.recall(refs["one"], thread="one")
    assert pilot.store.list("two") == []


def test_junk_and_raising_tools_do_not_break_the_run(scripted) -> None:
    pilot = _pilot()
    model = scripted(coding_responder(6, junk=["bytes", "none", "huge", "raise"]))
    # The ToolNode's own error policy applies (here: errors go back to the model).
    graph = build_graph(model, pilot, tool_node_kw={"handle_tool_errors": True})
    out = graph.invoke({"messages": [HumanMessage("go")]}, _config("j"))
    assert out["messages"][-1].content == "done"
    tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(tools) == 6
    errors = [m for m in tools if m.status == "error"]
    assert errors and "tool exploded" in str(errors[0].content)
    huge = [m for m in tools if "x" * 100 in str(m.content)]
    assert huge and all(len(str(m.content)) < 100_000 for m in huge)
    ref = REF.search(str(huge[0].content))
    archived = pilot.store.get("j", ref.group(1)) if ref else None
    assert archived is not None and archived.text == "x" * 300_000
    assert pairing_issues(MessageConverter().to_core(out["messages"])) == []


def test_async_and_message_streaming_match_sync(scripted) -> None:
    sync_model = scripted(coding_responder(12, recall_at=4))
    build_graph(sync_model, _pilot(**AGGRESSIVE)).invoke(
        {"messages": [HumanMessage("go")]}, _config("s")
    )
    async_model = scripted(coding_responder(12, recall_at=4))
    graph = build_graph(async_model, _pilot(**AGGRESSIVE), asynchronous=True)

    async def run() -> list[tuple[BaseMessage, dict[str, Any]]]:
        return [
            event
            async for event in graph.astream(
                {"messages": [HumanMessage("go")]}, _config("s"), stream_mode="messages"
            )
        ]

    events = asyncio.run(run())
    assert json.dumps(async_model.requests) == json.dumps(sync_model.requests)
    # Each answer is streamed once (the wrapped model's own run does not stream it again).
    text = "".join(str(m.content) for m, meta in events if meta["langgraph_node"] == "agent")
    assert text == "done"


# --------------------------------------------------------------------------- the reducer


class CountingPilot(CachePilot):
    """Counts ingestions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ingested: list[str] = []

    def ingest(
        self, tool_name: str, args: Any, output: object, call_id: str, thread: str = "default"
    ) -> str:
        self.ingested.append(call_id)
        return super().ingest(tool_name, args, output, call_id, thread)


# A reducer is part of the state schema, which LangGraph reads at module level.
REDUCER_PILOT = CountingPilot(store=InMemoryArtifactStore())


class ReducerState(PilotStateMixin):
    """The docs' state, with the cachepilot reducer in place of `add_messages`."""

    messages: Annotated[list[AnyMessage], cachepilot_messages(REDUCER_PILOT)]


def _reducer_graph(pilot: CachePilot, model: ScriptedChatModel) -> Any:
    llm = CachePilotChatModel(model, pilot).bind_tools(TOOLS)

    def call_model(state: ReducerState) -> dict[str, Any]:
        return {"messages": [llm.invoke([SystemMessage(SYSTEM), *state["messages"]])]}

    def plain_tools(state: ReducerState) -> dict[str, Any]:
        # A node that runs tools itself, bypassing the tool node's wrapper.
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        by_name = {t.name: t for t in TOOLS}
        return {
            "messages": [
                ToolMessage(
                    content=by_name[c["name"]].invoke(c["args"]),
                    tool_call_id=c["id"],
                    name=c["name"],
                )
                for c in last.tool_calls
            ]
        }

    builder = StateGraph(ReducerState)
    builder.add_node("cachepilot", CachePilotNode(pilot, system=SYSTEM, tools=TOOLS))
    builder.add_node("agent", call_model)
    builder.add_node("tools", plain_tools)
    builder.add_edge(START, "cachepilot")
    builder.add_edge("cachepilot", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "cachepilot")
    return builder.compile(checkpointer=InMemorySaver())


def test_reducer_reduces_a_tool_message_from_a_plain_node_once(scripted) -> None:
    pilot = REDUCER_PILOT
    model = scripted(coding_responder(3))
    graph = _reducer_graph(pilot, model)
    config = _config("plain")
    out = graph.invoke({"messages": [HumanMessage("go")]}, config)
    assert out["messages"][-1].content == "done"
    tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(tools) == 3 and sorted(pilot.ingested) == ["call_0", "call_1", "call_2"]
    assert all(REF.search(str(m.content)) for m in tools)
    assert all(m.response_metadata.get("cachepilot") == "ingested" for m in tools)
    # Archived under the graph's thread (found through the tool call), and recallable there.
    ref = REF.search(str(tools[0].content))
    assert ref and "step 00001" in pilot.recall(ref.group(1), thread="plain")
    # The model saw the reduced text, and the pilot state reached graph state.
    assert REF.search(model.requests[1]["messages"][-1]["content"])
    assert out["cachepilot"]["revision"] > 0

    # Adding the same result again (same id, or a copy with a new id) ingests nothing.
    graph.update_state(config, {"messages": [tools[0]]})
    copy = tools[0].model_copy(update={"id": None, "response_metadata": {}})
    graph.update_state(config, {"messages": [copy]})
    assert len(pilot.ingested) == 3

    # A result added by hand (no cachepilot component saw its call, and a reducer gets no
    # config): kept as it came, never archived in a thread another run could read.
    fresh = {"configurable": {"thread_id": "hand"}}
    graph.update_state(
        fresh,
        {
            "messages": [
                HumanMessage("go"),
                tool_call("run_command", {"command": "make hand"}, 99),
                ToolMessage(content=command_log("make hand"), tool_call_id="call_99"),
            ]
        },
    )
    stored = graph.get_state(fresh).values["messages"][-1]
    assert stored.content == command_log("make hand") and "call_99" not in pilot.ingested
    assert pilot.store.list("default") == [] and pilot.store.list("hand") == []


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=st.lists(st.integers(min_value=0, max_value=60_000), min_size=1, max_size=5))
def test_reducer_is_idempotent(sizes: list[int]) -> None:
    pilot = CountingPilot(store=InMemoryArtifactStore())
    reduce = cachepilot_messages(pilot, thread="p")
    calls = AIMessage(
        content="",
        tool_calls=[
            {
                "name": "run_command",
                "args": {"command": f"c{i}"},
                "id": f"c{i}",
                "type": "tool_call",
            }
            for i in range(len(sizes))
        ],
        id="ai",
    )
    results = [
        ToolMessage(content=("y\n" * (n // 2)) + str(i), tool_call_id=f"c{i}", id=f"t{i}")
        for i, n in enumerate(sizes)
    ]
    originals = [m.model_copy(deep=True) for m in results]
    once = reduce([HumanMessage("go", id="h"), calls], results)
    assert isinstance(once, list)
    assert [m.model_dump() for m in results] == [m.model_dump() for m in originals]  # not mutated
    assert len(pilot.ingested) == len(sizes)
    twice = reduce(once, once[2:])
    again = reduce(once, [m.model_copy(update={"id": None}) for m in originals])
    assert isinstance(twice, list) and isinstance(again, list)
    assert [m.content for m in twice] == [m.content for m in once]
    assert len(again) == len(once) + len(sizes)  # new ids: appended, but not ingested again
    assert len(pilot.ingested) == len(sizes)
    for message, original in zip(once[2:], originals, strict=True):
        assert isinstance(message, ToolMessage)
        assert len(str(message.content)) <= max(len(str(original.content)), 2_000)


# --------------------------------------------------------------------------- the example


def test_example_runs_against_the_replay_provider() -> None:
    pytest.importorskip("langchain_openai")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "langgraph_stategraph.py"
    spec = importlib.util.spec_from_file_location("langgraph_stategraph_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.main()
    vanilla, ours = results["vanilla"], results["cachepilot"]
    assert vanilla["calls"] == ours["calls"] == 58  # every recorded turn was served
    assert ours["input_cost_usd"] < vanilla["input_cost_usd"] / 5
    assert ours["prefix_breaks"] <= 5 < vanilla["prefix_breaks"]
    assert ours["state_chars"] < vanilla["state_chars"]

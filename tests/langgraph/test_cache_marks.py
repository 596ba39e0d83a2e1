"""Anthropic `cache_control` marks: a real `ChatAnthropic` against the Anthropic-serving replay
provider; the marks are in the request bytes (never in graph state), the caller's own are
kept, never more than four, and the provider reports cached tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn
from cachepilot_langgraph import (
    CachePilotChatModel,
    CachePilotNode,
    PilotStateMixin,
    cachepilot_tool_node,
)
from cachepilot_langgraph.cache_marks import is_anthropic_model, mark_request

langchain_anthropic = pytest.importorskip("langchain_anthropic")
agents = pytest.importorskip("langchain.agents")

SYSTEM = "You are a careful build assistant. " + "Follow the house rules exactly. " * 250
MARK = {"type": "ephemeral"}


@tool
def bash(command: str) -> str:
    """Run a shell command."""
    return "\n".join(f"{command}: {i:05d} compiling module_{i % 97} ... ok" for i in range(60))


def _script(commands: int) -> ReplayScript:
    turns = [
        ReplayTurn(
            Message(
                "assistant",
                f"Running step {i}.",
                tool_calls=(ToolCall(f"call_{i}", "bash", json.dumps({"command": f"make s{i}"})),),
            )
        )
        for i in range(commands)
    ]
    return ReplayScript([*turns, ReplayTurn(Message("assistant", "All steps passed."))])


def _model(provider: ReplayProvider) -> Any:
    root = provider.base_url.removesuffix("/v1")
    return langchain_anthropic.ChatAnthropic(
        model="claude-test", base_url=root, api_key="sk-ant-test", max_retries=0, timeout=30
    )


def _marks(body: dict[str, Any]) -> list[tuple[str, int, Any]]:
    """Every `cache_control` in a Messages API body: (where, message index, mark)."""
    found: list[tuple[str, int, Any]] = []
    system = body.get("system")
    if isinstance(system, list):
        found += [("system", -1, b["cache_control"]) for b in system if "cache_control" in b]
    found += [
        ("tools", -1, t["cache_control"]) for t in body.get("tools", []) if "cache_control" in t
    ]
    for index, message in enumerate(body["messages"]):
        content = message["content"]
        if isinstance(content, list):
            found += [
                (message["role"], index, b["cache_control"])
                for b in content
                if "cache_control" in b
            ]
    return found


def _no_marks_in(messages: list[BaseMessage]) -> bool:
    return "cache_control" not in json.dumps([m.model_dump() for m in messages], default=str)


def test_create_agent_sends_marks_and_reads_the_cache() -> None:
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    from cachepilot_langgraph import CachePilotMiddleware

    with ReplayProvider(_script(4), profile="anthropic") as provider:
        model = _model(provider)
        assert is_anthropic_model(model) and not is_anthropic_model(object())
        agent = agents.create_agent(
            model,
            [bash],
            system_prompt=SYSTEM,
            middleware=[CachePilotMiddleware(pilot)],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "m"}}
        out = agent.invoke({"messages": [HumanMessage("Build every step.")]}, config)
        records = provider.records

    assert out["messages"][-1].content == "All steps passed."
    assert len(records) == 5
    for record in records:
        marks = _marks(record.body)
        assert 1 <= len(marks) <= 4
        assert all(m == MARK for _, _, m in marks)
        # The last message is marked, and so is the end of tools + system.
        last = len(record.body["messages"]) - 1
        assert any(index == last for _, index, _ in marks)
        assert any(where == "system" for where, _, _ in marks)
    # The provider read the cache from the second request on, and the agent saw it reported.
    assert all(r.usage.cached_tokens > 0 for r in records[1:])
    answers = [m for m in out["messages"] if isinstance(m, AIMessage)]
    assert all(m.usage_metadata["input_token_details"]["cache_read"] > 0 for m in answers[1:])
    assert pilot.export_state("m")["usage"]["cached_tokens"] > 0
    # Graph state and the checkpoint never carry a mark.
    assert _no_marks_in(out["messages"])
    assert _no_marks_in(agent.get_state(config).values["messages"])


def test_the_callers_own_marks_are_kept_and_four_is_the_limit() -> None:
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    user_marked = SystemMessage(content=[{"type": "text", "text": SYSTEM, "cache_control": MARK}])
    from cachepilot_langgraph import CachePilotMiddleware

    with ReplayProvider(_script(2), profile="anthropic") as provider:
        agent = agents.create_agent(
            _model(provider),
            [bash],
            system_prompt=user_marked,
            middleware=[CachePilotMiddleware(pilot)],
        )
        history: list[BaseMessage] = [
            HumanMessage(content=[{"type": "text", "text": f"note {i}", "cache_control": MARK}])
            for i in range(2)
        ]
        agent.invoke({"messages": [*history, HumanMessage("Build.")]})
        records = provider.records
    for record in records:
        marks = _marks(record.body)
        assert len(marks) <= 4
        # The caller's three marks (system, two notes) are all there.
        assert sum(1 for where, _, _ in marks if where == "system") == 1
        user_blocks = [b for b in record.body["messages"][0]["content"] if isinstance(b, dict)]
        assert sum("cache_control" in b for b in user_blocks) >= 2
    assert any(len(_marks(r.body)) == 4 for r in records)


def test_mark_request_adds_nothing_when_the_caller_used_all_four() -> None:
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    messages: list[BaseMessage] = [
        HumanMessage(content=[{"type": "text", "text": f"part {i} " * 400, "cache_control": MARK}])
        for i in range(4)
    ]
    view = [Message("user", f"part {i} " * 400) for i in range(4)]
    pilot.prepare(SYSTEM, view, (), "t")
    marked = mark_request(
        pilot,
        "t",
        system_text=SYSTEM,
        view=view,
        schemas=(),
        system=SystemMessage(SYSTEM),
        messages=messages,
    )
    assert marked.marks == [] and marked.messages == messages
    assert marked.system is not None and marked.system.content == SYSTEM


def test_two_marked_system_blocks_take_two_slots() -> None:
    """Both system blocks and one message marked: three marks on two planner positions; the
    planner gets the one slot left and spends it on the best place it has (the last message)."""
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    parts = [{"type": "text", "text": SYSTEM, "cache_control": MARK},
             {"type": "text", "text": "Be brief.", "cache_control": MARK}]  # fmt: skip
    texts = [f"part {i} " * 400 for i in range(4)]
    messages: list[BaseMessage] = [
        HumanMessage(content=[{"type": "text", "text": texts[0], "cache_control": MARK}]),
        *(HumanMessage(content=t) for t in texts[1:]),
    ]
    view = [Message("user", t) for t in texts]
    system_text = SYSTEM + "\n\nBe brief."
    pilot.prepare(system_text, view, (), "t")
    marked = mark_request(
        pilot,
        "t",
        system_text=system_text,
        view=view,
        schemas=(),
        system=SystemMessage(content=parts),  # type: ignore[arg-type]
        messages=messages,
    )
    assert marked.marks == [3]
    wire = [*parts, *(b for m in marked.messages for b in m.content if isinstance(b, dict))]
    assert sum(1 for b in wire if "cache_control" in b) == 4


@pytest.mark.parametrize("ours_first", [True, False])
def test_next_to_langchains_prompt_caching_middleware_four_is_the_limit(
    ours_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware

    from cachepilot.wire.anthropic import MAX_CACHE_MARKS, cache_mark_count
    from cachepilot_langgraph import CachePilotMiddleware

    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    ours, theirs = CachePilotMiddleware(pilot), AnthropicPromptCachingMiddleware()
    with ReplayProvider(_script(6), profile="anthropic") as provider:
        agent = agents.create_agent(
            _model(provider),
            [bash],
            system_prompt=SYSTEM,
            middleware=[ours, theirs] if ours_first else [theirs, ours],
        )
        out = agent.invoke({"messages": [HumanMessage("Build every step.")]})
        records = provider.records
    # The replay provider refuses a fifth mark as Anthropic does; the run completed.
    assert out["messages"][-1].content == "All steps passed."
    served = records  # the provider records only the requests it served
    for record in served:
        assert cache_mark_count(record.body) <= MAX_CACHE_MARKS
        # LangChain's marks (request level, system prompt, a tool) are all kept.
        assert record.body.get("cache_control")
        assert any("cache_control" in t for t in record.body["tools"])
    assert all(r.usage.cached_tokens > 0 for r in served[1:])
    if ours_first:
        # Listed first, cachepilot cannot see the marks added after it: the one refused
        # request is sent again without its marks, and it places none from then on.
        assert all(cache_mark_count(r.body) == 3 for r in served[2:])
        assert sum("refused the request's cache marks" in r.message for r in caplog.records) == 1
    else:
        assert not any("refused" in r.message for r in caplog.records)
        assert any(cache_mark_count(r.body) == MAX_CACHE_MARKS for r in served)


class State(MessagesState, PilotStateMixin):
    """The docs' state plus the pilot state."""


def test_hand_built_graph_with_chat_anthropic_sends_marks() -> None:
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    with ReplayProvider(_script(3), profile="anthropic") as provider:
        llm = CachePilotChatModel(_model(provider), pilot).bind_tools([bash])

        def call_model(state: State) -> dict[str, Any]:
            return {"messages": [llm.invoke([SystemMessage(SYSTEM), *state["messages"]])]}

        builder = StateGraph(State)
        builder.add_node("cachepilot", CachePilotNode(pilot, system=SYSTEM, tools=[bash]))
        builder.add_node("agent", call_model)
        builder.add_node("tools", cachepilot_tool_node(pilot, [bash]))
        builder.add_edge(START, "cachepilot")
        builder.add_edge("cachepilot", "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "cachepilot")
        graph = builder.compile(checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "h"}}
        out = graph.invoke({"messages": [HumanMessage("Build.")]}, config)
        records = provider.records
    assert out["messages"][-1].content == "All steps passed."
    assert all(1 <= len(_marks(r.body)) <= 4 for r in records)
    assert all(r.usage.cached_tokens > 0 for r in records[1:])
    assert _no_marks_in(graph.get_state(config).values["messages"])
    assert any(isinstance(m, ToolMessage) for m in out["messages"])

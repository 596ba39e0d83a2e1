"""A real `create_agent` agent whose system prompt carries values that change on every model
call (a budget counting down, a session id, a build number): with `CachePilotMiddleware` the
model reads each call's current values, the prefix only grows between maintenance points,
and a second thread reads nothing of the first."""

from __future__ import annotations

import itertools
import json
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, dynamic_prompt
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import run_command, wire_prefix_extends

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical import CanonicalConfig
from cachepilot.canonical.notes import read_placeholders, resolve_placeholders
from cachepilot_langgraph import CachePilotMiddleware

CANONICAL = CanonicalConfig(clock_resolution_seconds=0)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def model_reads(request: dict[str, Any]) -> str:
    """The system prompt of one wire request as the model reads it."""
    messages = request["messages"]
    texts = [text_of(m.get("content") or "") for m in messages]
    values = read_placeholders(texts, CANONICAL)
    return resolve_placeholders(texts[0], values, CANONICAL)


def prompt_for(user: str, call: int) -> str:
    return (
        "You are the build agent of the platform team.\n"
        f"User: {user}\n"
        f"Remaining budget: {5000 - 150 * call} tokens\n"
        f"Session {call:02d}f0c2e41-77aa\n"
        f"Build #{4711 + call}\n"
        "Run the commands you need, then answer briefly.\n"
    )


def test_create_agent_reads_the_current_values_on_every_call(scripted: Any) -> None:
    pilot = CachePilot(
        Config(canonical=CANONICAL, maintenance={"enabled": False}),
        store=InMemoryArtifactStore(),
    )
    prompts: dict[str, list[str]] = {}

    @dynamic_prompt
    def volatile_prompt(request: ModelRequest) -> str:
        user = request.runtime.context["user"] if request.runtime.context else "anon"  # type: ignore[index]
        mine = prompts.setdefault(user, [])
        mine.append(prompt_for(user, len(mine)))
        return mine[-1]

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        steps = sum(1 for m in messages if m.type == "tool")
        if steps < 6:
            call = {"name": "run_command", "args": {"command": f"make step{steps}"}}
            return AIMessage("", tool_calls=[{**call, "id": f"call_{i}"}])
        return AIMessage("done")

    model = scripted(respond)
    agent = create_agent(
        model,
        [run_command],
        middleware=[volatile_prompt, CachePilotMiddleware(pilot)],
        checkpointer=InMemorySaver(),
        context_schema=dict,
    )
    out = agent.invoke(
        {"messages": [HumanMessage("Build the project.")]},
        {"configurable": {"thread_id": "alice-thread"}},
        context={"user": "alice-7731"},
    )
    assert out["messages"][-1].content == "done"
    alice = list(model.requests)
    assert len(alice) == 7 == len(prompts["alice-7731"])
    for request, prompt in zip(alice, prompts["alice-7731"], strict=True):
        assert model_reads(request) == prompt  # nothing stale shown as current
    for before, after in itertools.pairwise(alice[1:]):
        assert wire_prefix_extends(before, after)
    # The agent's own messages are untouched by the notes (a guest changes what the model
    # reads, not what the run returns).
    assert all("<context-update>" not in str(m.content) for m in out["messages"])

    # Another thread (another user) reads its own values, nothing of alice's.
    agent.invoke(
        {"messages": [HumanMessage("Build the project.")]},
        {"configurable": {"thread_id": "bob-thread"}},
        context={"user": "bob-2209"},
    )
    bob = model.requests[len(alice) :]
    assert bob
    for request, prompt in zip(bob, prompts["bob-2209"], strict=True):
        text = json.dumps(request)
        assert "alice-7731" not in text
        assert model_reads(request) == prompt

"""Large tool-call arguments stubbed at maintenance points reach the model reduced (every copy
a provider serializes), keep ids and pairing, and `recall` returns them byte-identical."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import ScriptedChatModel

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import message_keys, pairing_issues
from cachepilot.plan.epochs import Edit, Epoch, Plan, render_plan
from cachepilot_langgraph import MessageConverter, to_langchain

agents = pytest.importorskip("langchain.agents")

CONTENT = "\n".join(
    f"def f{i}(): return '{hashlib.sha256(str(i).encode()).hexdigest()}'" for i in range(1_700)
)
ARG_REF = re.compile(r'recall\(ref=\\?"([0-9a-f]{12})')


@tool
def write(file_path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {len(content)} chars to {file_path}"


@tool
def bash(command: str) -> str:
    """Run a command."""
    return f"{command}: ok"


def _call(name: str, args: dict[str, Any], i: int) -> AIMessage:
    return AIMessage(
        content=f"step {i}",
        tool_calls=[{"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}],
    )


def test_a_large_write_argument_is_stubbed_after_a_maintenance_point_and_recalled() -> None:
    assert len(CONTENT) > 100_000
    seen: dict[str, str] = {}

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return _call("write", {"file_path": "big.py", "content": CONTENT}, 0)
        write_call = next(
            c
            for m in messages
            if isinstance(m, AIMessage)
            for c in m.tool_calls
            if c["id"] == "call_0"
        )
        if "ref" not in seen and write_call["args"]["content"] != CONTENT:
            found = ARG_REF.search(write_call["args"]["content"])
            assert found, "the stubbed value names the recall that returns it"
            seen["ref"] = found.group(1)
            seen["at"] = str(i)
            return _call("recall", {"ref": found.group(1), "max_chars": 200_000}, i)
        if i < 8:
            return _call("bash", {"command": f"pytest -k t{i}"}, i)
        return AIMessage(content="done")

    model = ScriptedChatModel(responder=respond)
    config = Config(maintenance={"schedule": "fixed", "every": 1, "protect_results": 2})
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    from cachepilot_langgraph import CachePilotMiddleware

    agent = agents.create_agent(
        model,
        [write, bash],
        system_prompt="You write code.",
        middleware=[CachePilotMiddleware(pilot)],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke(
        {"messages": [HumanMessage("write big.py, then test")]},
        {"configurable": {"thread_id": "w"}, "recursion_limit": 100},
    )
    assert out["messages"][-1].content == "done"
    assert "ref" in seen, "a maintenance point must have stubbed the write's arguments"

    # What the provider is sent: the first requests carry the whole value; every request
    # after the maintenance point carries the stub under the same call id, still paired.
    sizes = []
    for request in model.requests[1:]:
        wire = request["messages"]
        (assistant,) = [
            m for m in wire if any(c["id"] == "call_0" for c in m.get("tool_calls") or ())
        ]
        (call,) = assistant["tool_calls"]
        args = json.loads(call["function"]["arguments"])
        assert call["function"]["name"] == "write" and args["file_path"] == "big.py"
        sizes.append(len(args["content"]))
        answer = wire[wire.index(assistant) + 1]
        assert answer["role"] == "tool" and answer["tool_call_id"] == "call_0"
    first_stub = int(seen["at"]) - 1  # (request 0 has no assistant message yet)
    assert first_stub >= 1 and sizes[:first_stub] == [len(CONTENT)] * first_stub
    assert all(s < 2_000 for s in sizes[first_stub:])

    # recall returned the original value byte-identical.
    recalled = next(
        str(m.content) for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "recall"
    )
    header, body = recalled.split("\n", 1)
    assert header.startswith(f"[recall {seen['ref']}")
    assert body[: len(CONTENT)] == CONTENT and body[len(CONTENT) :].strip() == ""

    # Graph state keeps the plain message: only what the model reads changed.
    state_call = next(c for m in out["messages"] if isinstance(m, AIMessage) for c in m.tool_calls)
    assert state_call["args"]["content"] == CONTENT


def test_to_langchain_updates_every_copy_of_the_arguments() -> None:
    raw_args = json.dumps({"file_path": "a.py", "content": CONTENT})
    ai = AIMessage(
        content=[
            {"type": "text", "text": "writing"},
            {"type": "tool_use", "id": "t1", "name": "write", "input": json.loads(raw_args)},
        ],
        tool_calls=[
            {"name": "write", "args": json.loads(raw_args), "id": "t1", "type": "tool_call"}
        ],
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "write", "arguments": raw_args},
                }
            ]
        },
        id="ai-1",
    )
    history: list[BaseMessage] = [
        HumanMessage("go", id="h"),
        ai,
        ToolMessage("ok", tool_call_id="t1", id="t"),
    ]
    converter = MessageConverter()
    core = converter.to_core(history)
    keys = message_keys(core)
    stub = json.dumps({"file_path": "a.py", "content": 'def f0()… recall(ref="0123456789ab")'})
    plan = Plan(
        epochs=[
            Epoch(
                index=0, reason="t", edits=[Edit(kind="args", key=keys[1], text=stub, call_id="t1")]
            )
        ]
    )
    view = render_plan(core, plan, keys).messages
    by_id = {m.id: m for m in history if m.id}
    sent = [to_langchain(m, converter, by_id) for m in view]
    edited = sent[1]
    assert isinstance(edited, AIMessage) and edited.id == "ai-1"
    assert edited.tool_calls[0]["args"] == json.loads(stub) and edited.tool_calls[0]["id"] == "t1"
    assert edited.additional_kwargs["tool_calls"][0]["function"]["arguments"] == stub
    assert edited.content[1] == {  # type: ignore[index]
        "type": "tool_use",
        "id": "t1",
        "name": "write",
        "input": json.loads(stub),
    }
    assert edited.content[0] == {"type": "text", "text": "writing"}  # type: ignore[index]
    assert sent[0] is history[0] and sent[2] is history[2]
    assert ai.tool_calls[0]["args"]["content"] == CONTENT  # the original is untouched
    assert pairing_issues(MessageConverter().to_core(sent)) == []

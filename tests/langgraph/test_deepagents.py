"""cachepilot in a real `deepagents.create_deep_agent` harness (scripted model, real graph).

The recipe (`create_cachepilot_deep_agent`) leaves the run as deepagents alone makes it
(messages, `state["files"]`, todos) while the model reads less, finds the error line of a
300 KB output that deepagents evicted, and the subagents work with the same pilot.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("deepagents")

from deepagents import CompiledSubAgent, create_deep_agent
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, TodoListMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from lg_scripted import REF, ScriptedChatModel, command_log, tool_call

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig, is_stub
from cachepilot.messages import Message, ToolCall
from cachepilot_langgraph import CachePilotMiddleware
from cachepilot_langgraph.deepagents import (
    SLOT,
    DeepAgentCachePilotMiddleware,
    create_cachepilot_deep_agent,
    nested_scope,
)
from cachepilot_langgraph.evicted import EvictedViews, evicted_file_name

ERROR_LINE = "ERROR: undefined reference to `frobnicate' in unit 03217"
SECRET = "sk-live-0123456789abcdef"


def _build_log() -> str:
    lines = [f"compiling unit {i:05d} ok {'x' * 50}" for i in range(5_000)]
    lines[3217] = ERROR_LINE
    return "\n".join(lines)


BUILD_LOG = _build_log()  # ~300 KB: over deepagents' 80,000-character eviction limit


@tool
def build(target: str) -> str:
    """Run the build."""
    return BUILD_LOG


@tool
def run_command(command: str) -> str:
    """Run a shell command and return its output."""
    return command_log(command)


TOOLS = [build, run_command]
SUB_TASK = "look into the failing unit"


def _pilot() -> CachePilot:
    return CachePilot(Config(), store=InMemoryArtifactStore())


def _in_subagent(messages: Sequence[BaseMessage]) -> bool:
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    return bool(humans) and humans[0].content == SUB_TASK


def _script(messages: list[BaseMessage], i: int) -> AIMessage:
    """The same calls whatever the model reads (so runs can be compared message by message)."""
    if _in_subagent(messages):
        done = sum(isinstance(m, AIMessage) for m in messages)
        if done == 0:
            return tool_call("run_command", {"command": "make sub"}, 100 + i)
        return AIMessage(content="the sub task found nothing new")
    step = sum(isinstance(m, AIMessage) for m in messages)
    plan: list[tuple[str, dict[str, Any]]] = [
        ("write_todos", {"todos": [{"content": "fix the build", "status": "in_progress"}]}),
        ("run_command", {"command": "make a"}),
        ("build", {"target": "all"}),
        ("run_command", {"command": "make b"}),
        ("task", {"description": SUB_TASK, "subagent_type": "general-purpose"}),
        ("write_file", {"file_path": "/notes.md", "content": "unit 03217 fails"}),
        ("run_command", {"command": "make c"}),
    ]
    if step < len(plan):
        name, args = plan[step]
        return tool_call(name, args, i)
    return AIMessage(content="done")


def _run(
    kind: str, responder: Callable[[list[BaseMessage], int], AIMessage] = _script
) -> tuple[dict[str, Any], ScriptedChatModel, CachePilot]:
    model = ScriptedChatModel(responder=responder)
    pilot = _pilot()
    user: list[AgentMiddleware[Any, Any]] = [TodoListMiddleware()]
    if kind == "alone":
        agent = create_deep_agent(model, TOOLS, middleware=user, checkpointer=InMemorySaver())
    elif kind == "plain":
        agent = create_deep_agent(
            model,
            TOOLS,
            middleware=[*user, CachePilotMiddleware(pilot)],
            checkpointer=InMemorySaver(),
        )
    else:
        agent = create_cachepilot_deep_agent(
            model, TOOLS, pilot=pilot, middleware=user, checkpointer=InMemorySaver()
        )
    state = agent.invoke({"messages": [HumanMessage("fix the build")]}, _config())
    return state, model, pilot


def _config() -> Any:
    return {"configurable": {"thread_id": "t1"}}


def _shape(state: dict[str, Any]) -> list[tuple[str, str, list[Any]]]:
    return [
        (type(m).__name__, str(m.content), [c["name"] for c in getattr(m, "tool_calls", [])])
        for m in state["messages"]
    ]


def _files(state: dict[str, Any]) -> dict[str, str]:
    return {path: data["content"] for path, data in state["files"].items()}


def _tool_texts(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "tool")


def _chars(model: ScriptedChatModel) -> int:
    return sum(len(json.dumps(r["messages"])) for r in model.requests)


def test_the_recipe_leaves_messages_files_and_todos_as_deepagents_alone_makes_them() -> None:
    alone, _, _ = _run("alone")
    recipe, _, _ = _run("recipe")
    plain, _, _ = _run("plain")
    assert _shape(recipe) == _shape(alone) == _shape(plain)
    assert _files(recipe) == _files(alone) == _files(plain)
    assert (
        recipe["todos"] == alone["todos"] == [{"content": "fix the build", "status": "in_progress"}]
    )
    # deepagents evicted the build log in every run: the preview is in state, the log a file.
    evicted = [p for p in _files(alone) if p.startswith("/large_tool_results/")]
    assert len(evicted) == 1
    assert _files(recipe)[evicted[0]] == BUILD_LOG
    preview = next(m for m in recipe["messages"] if m.name == "build")
    assert ERROR_LINE not in str(preview.content)
    assert "cachepilot" not in recipe  # private state stays out of the output


def test_the_recipe_sends_fewer_characters_than_deepagents_alone_and_than_a_plain_user() -> None:
    _, alone, _ = _run("alone")
    _, plain, _ = _run("plain")
    _, recipe, _ = _run("recipe")
    assert len(recipe.requests) == len(alone.requests) == len(plain.requests)
    assert _chars(recipe) < 0.7 * _chars(alone)
    assert _chars(recipe) < _chars(plain)


def test_the_model_reads_the_error_line_of_an_evicted_output_and_recall_finds_it() -> None:
    seen: dict[str, Any] = {}

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("build", {"target": "all"}, i)
        if i == 1:
            shown = str(messages[-1].content)
            seen["view"] = shown
            found = REF.search(shown)
            assert found, "the view of the evicted output names its ref"
            return tool_call("recall", {"ref": found.group(1), "grep": "ERROR"}, i)
        seen["recall"] = str(messages[-1].content)
        return AIMessage(content="done")

    state, _, _ = _run("recipe", respond)
    assert ERROR_LINE in seen["view"]
    assert len(seen["view"]) < 20_000
    assert ERROR_LINE in seen["recall"]
    # State keeps deepagents' preview; only the model's view changed.
    kept = next(m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == "build")
    assert ERROR_LINE not in str(kept.content)
    assert "/large_tool_results/" in str(kept.content)


def test_a_plain_user_also_reads_the_view_of_the_evicted_output() -> None:
    seen: list[str] = []

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("build", {"target": "all"}, i)
        seen.append(str(messages[-1].content))
        return AIMessage(content="done")

    _run("plain", respond)
    # `CachePilotMiddleware` finds deepagents' file of the evicted output in graph state.
    assert ERROR_LINE in seen[0]
    assert REF.search(seen[0])


EVICTED_PATH = re.compile(r"/large_tool_results/[\w-]+")


@pytest.mark.parametrize("kind", ["plain", "recipe"])
def test_the_model_reads_the_evicted_file_deepagents_points_to(kind: str) -> None:
    # deepagents' prompt says: read the evicted output with `read_file` at the path its note
    # names. With cachepilot the note stays next to cachepilot's ref, and the read works.
    seen: dict[str, str] = {}

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("build", {"target": "all"}, i)
        if i == 1:
            seen["view"] = str(messages[-1].content)
            found = EVICTED_PATH.search(seen["view"])
            path = found.group(0) if found else "/large_tool_results/missing"
            return tool_call("read_file", {"file_path": path, "offset": 3210, "limit": 20}, i)
        seen["read"] = str(messages[-1].content)
        return AIMessage(content="done")

    _run(kind, respond)
    assert REF.search(seen["view"]) and ERROR_LINE in seen["view"]  # cachepilot's view...
    assert EVICTED_PATH.search(seen["view"])  # ...keeps deepagents' handle
    assert "not found" not in seen["read"]
    assert ERROR_LINE in seen["read"]  # the host's own tool reads its file


def test_a_pruned_evicted_output_still_points_to_deepagents_file() -> None:
    # Pruning (an opt-in) later replaces the view of the evicted build log by a stub: the stub
    # keeps deepagents' pointer line next to its ref, and reading that path still works.
    maintenance = MaintenanceConfig(
        prune=True,
        schedule="fixed",
        every=1,
        protect_tool_tokens=0,
        protect_results=1,
        min_prune_tokens=1,
        min_result_tokens=10,  # deepagents' own preview in the transcript is short
        fold=False,
    )
    pilot = CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())
    seen: dict[str, str] = {}

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("build", {"target": "all"}, i)
        if i < 5:
            return tool_call("run_command", {"command": f"make {i}"}, i)
        if i == 5:
            built = next(
                m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == "call_0"
            )
            seen["view"] = str(built.content)
            found = EVICTED_PATH.search(seen["view"])
            path = found.group(0) if found else "/large_tool_results/missing"
            return tool_call("read_file", {"file_path": path, "offset": 3210, "limit": 20}, i)
        seen["read"] = str(messages[-1].content)
        return AIMessage(content="done")

    model = ScriptedChatModel(responder=respond)
    agent = create_deep_agent(
        model, TOOLS, middleware=[CachePilotMiddleware(pilot)], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage("fix the build")]}, _config())
    assert is_stub(seen["view"]), "pruning replaced the evicted output's view"
    stub, *pointer = seen["view"].split("\n")
    assert REF.search(stub)
    # deepagents' own line, verbatim (not only a path among the values the stub keeps).
    assert len(pointer) == 1 and "was saved in the filesystem at this path" in pointer[0]
    assert ERROR_LINE in seen["read"] and "not found" not in seen["read"]


def test_the_general_purpose_subagent_gets_the_pilot_in_a_thread_of_its_own() -> None:
    _, model, pilot = _run("recipe")
    sub = [r for r in model.requests if any(m.get("content") == SUB_TASK for m in r["messages"])]
    assert len(sub) == 2
    names = [t["function"]["name"] for t in sub[0]["tools"]]
    assert "recall" in names
    assert "task" not in names
    # The subagent's command output was reduced (it names a ref), as in the main agent.
    assert REF.search(_tool_texts(sub[1]))
    # The main thread's pilot state counts the main agent's calls only: the subagent, which
    # inherits the thread id, ran in a thread of its own and never replaced it.
    assert pilot.state("t1").calls == len(model.requests) - len(sub)


def test_custom_and_compiled_subagents_get_the_pilot() -> None:
    pilot = _pilot()
    inner = ScriptedChatModel(responder=_script)
    compiled_graph = create_agent(
        inner,
        TOOLS,
        middleware=[DeepAgentCachePilotMiddleware(pilot)],
        name="compiled-helper",
    )
    model = ScriptedChatModel(responder=_compiled_and_custom)
    agent = create_cachepilot_deep_agent(
        model,
        TOOLS,
        pilot=pilot,
        checkpointer=InMemorySaver(),
        subagents=[
            {"name": "helper", "description": "helps", "system_prompt": "You help."},
            CompiledSubAgent(name="compiled", description="compiled", runnable=compiled_graph),
        ],
    )
    state = agent.invoke({"messages": [HumanMessage("go")]}, _config())
    assert state["messages"][-1].content == "done"
    custom = [r for r in model.requests if _mentions(r, SUB_TASK + " (custom)")]
    assert custom, "the custom subagent ran"
    assert "recall" in [t["function"]["name"] for t in custom[0]["tools"]]
    assert REF.search(_tool_texts(custom[-1]))
    assert inner.requests, "the compiled subagent ran"
    assert REF.search(_tool_texts(inner.requests[-1]))


def _mentions(request: dict[str, Any], text: str) -> bool:
    return any(m.get("content") == text for m in request["messages"])


def _compiled_and_custom(messages: list[BaseMessage], i: int) -> AIMessage:
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    if humans and humans[0].content == SUB_TASK + " (custom)":
        if not any(isinstance(m, ToolMessage) for m in messages):
            return tool_call("run_command", {"command": "make custom"}, 200 + i)
        return AIMessage(content="custom done")
    step = sum(isinstance(m, AIMessage) for m in messages)
    if step == 0:
        return tool_call(
            "task", {"description": SUB_TASK + " (custom)", "subagent_type": "helper"}, i
        )
    if step == 1:
        return tool_call("task", {"description": SUB_TASK, "subagent_type": "compiled"}, i)
    return AIMessage(content="done")


class _Redact(AgentMiddleware[Any, Any]):
    """Rewrites tool results before they reach state (listed before cachepilot)."""

    @property
    def name(self) -> str:
        return "Redact"

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]
    ) -> ToolMessage | Command[Any]:
        result = handler(request)
        if isinstance(result, ToolMessage):
            text = str(result.content).replace(SECRET, "[redacted]")
            return result.model_copy(update={"content": text})
        return result


ENV_LINES = {"lines": 600}


@tool
def env_dump() -> str:
    """Dump the environment."""
    return f"API_KEY={SECRET}\n" + command_log("env", ENV_LINES["lines"])


@pytest.mark.parametrize("lines", [600, 3_000])  # reduced by cachepilot; evicted by deepagents
def test_a_result_rewritten_after_the_tool_never_shows_or_recalls_what_was_removed(
    lines: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ENV_LINES, "lines", lines)
    seen: list[str] = []

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        seen.append(json.dumps([str(m.content) for m in messages]))
        if i == 0:
            return tool_call("env_dump", {}, i)
        found = REF.search(str(messages[-1].content))
        if i == 1 and found:
            return tool_call("recall", {"ref": found.group(1), "grep": "API_KEY"}, i)
        return AIMessage(content="done")

    pilot = _pilot()
    ours = DeepAgentCachePilotMiddleware(pilot)
    agent = create_cachepilot_deep_agent(
        ScriptedChatModel(responder=respond),
        [env_dump],
        pilot=ours,
        middleware=[_Redact(), ours],
        checkpointer=InMemorySaver(),
    )
    state = agent.invoke({"messages": [HumanMessage("go")]}, _config())
    assert all(SECRET not in s for s in seen)
    assert SECRET not in str(state["messages"][-2].content)


def test_the_async_path_matches_the_sync_one() -> None:
    sync_state, sync_model, _ = _run("recipe")
    model = ScriptedChatModel(responder=_script)
    agent = create_cachepilot_deep_agent(
        model,
        TOOLS,
        pilot=_pilot(),
        middleware=[TodoListMiddleware()],
        checkpointer=InMemorySaver(),
    )
    state = asyncio.run(agent.ainvoke({"messages": [HumanMessage("fix the build")]}, _config()))
    assert _shape(state) == _shape(sync_state)
    assert _chars(model) == _chars(sync_model)


def test_the_recipe_refuses_a_second_pilot_or_a_filled_slot() -> None:
    model = ScriptedChatModel(responder=_script)
    with pytest.raises(ValueError, match="CachePilotMiddleware"):
        create_cachepilot_deep_agent(model, TOOLS, middleware=[CachePilotMiddleware(_pilot())])
    with pytest.raises(ValueError, match=SLOT):
        create_cachepilot_deep_agent(
            model, TOOLS, middleware=[DeepAgentCachePilotMiddleware(_pilot(), slot=True)]
        )
    with pytest.raises(ValueError, match="acts_for"):
        DeepAgentCachePilotMiddleware(_pilot(), acts_for="general-purpose")


@pytest.mark.parametrize(
    ("namespace", "expected"),
    [
        ("", None),
        ("model:1", None),
        ("tools:a|model:2", "tools:a"),
        ("agent:x|tools:a|tools:b|model:3", "agent:x|tools:a|tools:b"),
        ("agent:x|model:3", None),
    ],
)
def test_nested_scope_is_the_tool_call_a_graph_runs_inside(
    namespace: str, expected: str | None
) -> None:
    assert nested_scope({"configurable": {"checkpoint_ns": namespace}}) == expected


def test_deepagents_alone_shows_a_preview_without_the_error_line() -> None:
    # The premise of the recipe, checked on the real package: the preview drops the line.
    _, model, _ = _run("alone")
    after = [r for r in model.requests if "/large_tool_results/" in _tool_texts(r)]
    assert after
    assert all(ERROR_LINE not in _tool_texts(r) for r in after)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_the_evicted_file_name_is_deepagents_own(call_id: str) -> None:
    # Fails loudly when deepagents names its evicted files another way.
    from deepagents.backends.utils import sanitize_tool_call_id

    assert evicted_file_name(call_id) == sanitize_tool_call_id(call_id)


def test_a_result_naming_another_calls_file_is_not_replaced() -> None:
    pilot = _pilot()
    views = EvictedViews()
    core = [
        Message("assistant", "", tool_calls=(ToolCall("c1", "build", "{}"),)),
        Message("tool", "see /large_tool_results/c2", tool_call_id="c1"),
    ]
    files = {"/large_tool_results/c2": {"content": BUILD_LOG, "encoding": "utf-8"}}
    shown, ids = views.apply(pilot, "t", core, {"files": files})
    assert shown == core and not ids
    own = [core[0], replace(core[1], content="saved to /large_tool_results/c1")]
    files["/large_tool_results/c1"] = {"content": BUILD_LOG, "encoding": "utf-8"}
    shown, ids = views.apply(pilot, "t", own, {"files": files})
    assert ids == {"c1"} and ERROR_LINE in str(shown[1].content)
    again, _ = views.apply(pilot, "t", own, {"files": files})
    assert again[1] is shown[1]  # the same object on every call: the prefix stays cached


def _long_script() -> Callable[[list[BaseMessage], int], AIMessage]:
    steps = iter(range(10_000))

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if len(messages) == 1 and messages[0].content != "long":
            return AIMessage(content="summary of the work so far")  # deepagents' summary call
        step = next(steps)
        if step < 16:
            return tool_call("run_command", {"command": f"make step{step}"}, i)
        return AIMessage(content="done")

    return respond


def _long(kind: str) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = ScriptedChatModel(responder=_long_script(), profile={"max_input_tokens": 40_000})
    if kind == "alone":
        agent = create_deep_agent(model, TOOLS, checkpointer=InMemorySaver())
    elif kind == "plain":
        agent = create_deep_agent(
            model, TOOLS, middleware=[CachePilotMiddleware(_pilot())], checkpointer=InMemorySaver()
        )
    else:
        agent = create_cachepilot_deep_agent(
            model, TOOLS, pilot=_pilot(), checkpointer=InMemorySaver()
        )
    return agent.invoke({"messages": [HumanMessage("long")]}, _config()), model


def _summary_calls(model: ScriptedChatModel) -> int:
    return sum(not r["tools"] for r in model.requests)


def test_cachepilot_folds_in_place_of_a_summary_that_counts_the_raw_history() -> None:
    alone_state, alone = _long("alone")
    plain_state, plain = _long("plain")
    recipe_state, recipe = _long("recipe")
    # deepagents counts the raw history: it summarizes with or without the plain middleware,
    # and its summarizing call reads the unreduced outputs.
    assert _summary_calls(alone) >= 1
    assert _summary_calls(plain) == _summary_calls(alone)
    # The recipe never summarizes; what the model reads stays far below the window.
    assert _summary_calls(recipe) == 0
    assert max(u.input_tokens for u in recipe.usages) < 0.85 * 40_000
    assert _shape(recipe_state) == _shape(alone_state) == _shape(plain_state)
    assert sum(u.input_tokens for u in recipe.usages) < sum(u.input_tokens for u in alone.usages)

"""The real-client suite's own logic: the scripted model's next step, and the checks that
judge a proxied run (`benchmarks/real_clients/`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from cachepilot.wire import parse_body

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "real_clients"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(SUITE))
    spec = importlib.util.spec_from_file_location(f"real_clients_{name}", SUITE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


run = _load("run")
scripted = _load("scripted")
task = _load("task")

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("list_files", "read_file", "grep", "edit_file", "run")
]
RECALL = {"type": "function", "function": {"name": "recall", "parameters": {"type": "object"}}}


def _chat(done: int, log_text: str, *, recall: bool, recalled: bool = False) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.PROMPT}]
    for step in range(done):
        call_id = f"call_cp_s{step}"
        call = {"id": call_id, "type": "function", "function": {"name": "run", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = log_text if step == 1 else "ok"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    if recalled:
        call = {"id": "call_cp_recall", "type": "function", "function": {"name": "recall"}}
        messages.append({"role": "assistant", "content": "x", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": "call_cp_recall", "content": "full"})
    return {"messages": messages, "tools": [*TOOLS, *([RECALL] if recall else [])]}


def _reply(plan: str, body: dict[str, Any]) -> Any:
    model = scripted.ScriptedModel(scripted.PLANS[plan], "/repo")
    return model("chat", body, parse_body(body, api="chat").request)


SHORT = 'log head\n[output shortened; full text: recall(ref="0123456789ab")]'


@pytest.mark.parametrize("plan", ["python", "python-parallel"])
def test_the_model_recalls_a_shortened_log_once_with_text_first(plan: str) -> None:
    reply = _reply(plan, _chat(2, SHORT, recall=True))
    assert reply.text == scripted.RECALL_PREAMBLE
    names = [c.name for c in reply.tool_calls]
    assert names == (["recall", "read_file"] if plan == "python-parallel" else ["recall"])
    assert json.loads(reply.tool_calls[0].arguments)["ref"] == "0123456789ab"
    # Recalled already, or no recall offered (straight run): the next step follows.
    for body in (_chat(2, SHORT, recall=True, recalled=True), _chat(2, SHORT, recall=False)):
        assert [c.name for c in _reply(plan, body).tool_calls] == ["read_file"]


def test_the_model_walks_the_steps_and_answers() -> None:
    assert [c.id for c in _reply("python", _chat(0, "", recall=False)).tool_calls] == ["call_cp_s0"]
    assert [c.name for c in _reply("python", _chat(4, "log", recall=True)).tool_calls] == [
        "edit_file"
    ]
    final = _reply("python", _chat(len(task.STEPS), "log", recall=True))
    assert final.tool_calls == () and final.text == task.FINAL_ANSWER
    side = {"messages": [{"role": "user", "content": "Warmup"}]}
    assert _reply("python", side).text == "OK."


def _records(*bodies: dict[str, Any]) -> list[Any]:
    return [SimpleNamespace(body=b) for b in bodies]


def test_prefix_breaks_ignore_moved_marks_and_catch_rewritten_history() -> None:
    mark = {"type": "ephemeral"}
    first = {
        "system": [{"type": "text", "text": "S", "cache_control": mark}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": mark}]}
        ],
    }
    second = {
        "system": [{"type": "text", "text": "S", "cache_control": mark}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "b", "cache_control": mark}],
            },
        ],
    }
    rewritten = {**second, "messages": [{"role": "user", "content": "a"}, *second["messages"][1:]]}
    assert run.prefix_breaks("anthropic", _records(first, second)) == []
    assert run.prefix_breaks("anthropic", _records(first, rewritten)) == [1]
    other_system = {**second, "system": "T"}
    assert run.prefix_breaks("anthropic", _records(first, other_system)) == [1]


def test_executed_tools_leave_recall_out_and_the_repository_path_neutral() -> None:
    body = {
        "input": [
            {
                "type": "function_call",
                "call_id": "call_cp_s0",
                "name": "sh",
                "arguments": '{"p": "/r/x"}',
            },
            {
                "type": "function_call",
                "call_id": "call_cp_recall",
                "name": "recall",
                "arguments": "{}",
            },
            {"type": "function_call", "call_id": "other", "name": "sh", "arguments": "{}"},
        ]
    }
    assert run.executed_tools("responses", body, "/r") == [("sh", '{"p": "<repo>/x"}')]

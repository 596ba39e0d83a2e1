"""Large tool-call arguments through a real `Runner`: the reduced arguments reach the model on
the `function_call` item itself (valid JSON, same call id), and `recall` gives them back."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents_helpers import pairing_problems
from transparency_helpers import REF

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot_agents import CachePilotAgents

CONTENT = "\n".join(
    f"def f_{i}(x):  # module line {i}\n    return x * {i} + 7" for i in range(2_000)
)
assert len(CONTENT) > 100_000 and not CONTENT.endswith("\n")

written: dict[str, str] = {}


@function_tool
def write(file_path: str, content: str) -> str:
    """Write a whole file."""
    written[file_path] = content
    return f"wrote {len(content)} chars to {file_path}"


@function_tool
def run_tests(target: str) -> str:
    """Run the tests of a target."""
    return f"{target}: 12 passed"


def _write_item(call: Any) -> dict[str, Any]:
    found = [
        i
        for i in call.input
        if isinstance(i, dict) and i.get("type") == "function_call" and i.get("call_id") == "w1"
    ]
    assert len(found) == 1
    return found[0]


def test_a_large_write_argument_is_reduced_on_its_item_and_recalled_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: dict[str, Any] = {}

    def ask_recall(call: Any) -> Any:
        item = _write_item(call)
        args = json.loads(item["arguments"])  # valid JSON: the provider's check
        assert args["file_path"] == "src/big.py"
        seen["reduced"] = args["content"]
        seen["pairing"] = pairing_problems(list(call.input))
        ref = REF.search(args["content"])
        assert ref is not None, args["content"][-200:]
        return [function_call("recall", {"ref": ref.group(1), "max_chars": 150_000}, call_id="r1")]

    def answer(call: Any) -> Any:
        outputs = [
            i
            for i in call.input
            if isinstance(i, dict)
            and i.get("type") == "function_call_output"
            and i.get("call_id") == "r1"
        ]
        seen["recalled"] = str(outputs[0]["output"]) if outputs else None
        return [assistant_message("done")]

    model = ScriptedModel(
        [
            [function_call("write", {"file_path": "src/big.py", "content": CONTENT}, call_id="w1")],
            [function_call("run_tests", {"target": "a"}, call_id="t1")],
            [function_call("run_tests", {"target": "b"}, call_id="t2")],
            [function_call("run_tests", {"target": "c"}, call_id="t3")],
            ModelStep.respond(ask_recall),
            ModelStep.respond(answer),
        ]
    )
    maintenance = MaintenanceConfig(
        schedule="fixed", every=1, protect_results=2, protect_tool_tokens=0, min_prune_tokens=0
    )
    pilot = CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())
    cp = CachePilotAgents(pilot)
    agent = cp.wrap(Agent(name="coder", model=model, tools=[write, run_tests]))
    with caplog.at_level(logging.WARNING, logger="cachepilot_agents"):
        result = asyncio.run(
            Runner.run(agent, "write the module", run_config=cp.run_config(thread="t"))
        )
    assert result.final_output == "done"
    assert written["src/big.py"] == CONTENT  # the tool got the whole argument
    assert not [r for r in caplog.records if "was not applied" in r.getMessage()]
    edits = [e for ep in pilot.state("t").plan.epochs for e in ep.edits if e.kind == "args"]
    assert [e.call_id for e in edits] == ["w1"]
    # The model read the reduced argument: a head preview and the ref of the whole value.
    assert seen["reduced"].startswith(CONTENT[:200])
    assert len(seen["reduced"]) < 1_000
    assert seen["pairing"] == []
    # `recall` returns the argument byte-identical (after its one header line).
    assert seen["recalled"] is not None
    header, body = seen["recalled"].split("\n", 1)
    assert header.startswith("[recall ") and body == CONTENT
    # What the run returns keeps the call as the model made it.
    calls = [i.to_input_item() for i in result.new_items]
    write_items = [c for c in calls if isinstance(c, dict) and c.get("call_id") == "w1"]
    assert json.loads(write_items[0]["arguments"])["content"] == CONTENT

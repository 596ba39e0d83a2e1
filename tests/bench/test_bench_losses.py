"""Per-fact accounting of visible-fidelity losses: each missing fact gets the step that
removed it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cachepilot.cli import main
from cachepilot.memory.facts import Fact
from cachepilot.messages import Message, ToolCall, message_keys
from cachepilot.plan.epochs import Edit, Epoch, Plan
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.harness import BenchConfig, run_session
from cachepilot_bench.losses import (
    CAUSES,
    Loss,
    classify,
    explain_session,
    format_losses,
    loss_counts,
    write_losses,
)
from cachepilot_bench.registry import make_strategy


def _transcript() -> list[Message]:
    def call(i: int, name: str) -> Message:
        return Message(role="assistant", tool_calls=(ToolCall(f"c{i}", name, "{}"),))

    return [
        Message(role="user", content="fix the parser"),
        call(1, "read"),
        Message(role="tool", content="def parse_header(raw): ...", tool_call_id="c1", name="read"),
        call(2, "grep"),
        Message(role="tool", content="src/parser_core.py:10", tool_call_id="c2", name="grep"),
        call(3, "bash"),
        Message(role="tool", content="[preview] 3 lines", tool_call_id="c3", name="bash"),
        call(4, "read"),
        Message(role="tool", content="class TokenStream: pass", tool_call_id="c4", name="read"),
    ]


def test_each_missing_fact_is_put_down_to_the_step_that_removed_it() -> None:
    messages = _transcript()
    keys = message_keys(messages)
    plan = Plan(
        epochs=[
            Epoch(
                index=0,
                reason="cost-model",
                edits=[
                    Edit(
                        kind="fold", key=keys[1], end_key=keys[2], text="summary: a read", ref="r1"
                    ),
                    Edit(kind="stub", key=keys[4], text="[grep output pruned]", ref="r2"),
                ],
            )
        ]
    )
    assert classify(messages, keys, plan, Fact("parse_header", 2))[0] == "fold"
    cause, detail = classify(messages, keys, plan, Fact("parser_core.py", 4))
    assert cause == "stub" and "grep" in detail
    # The ingested output never had it: the ingestion gate's preview dropped it.
    assert classify(messages, keys, plan, Fact("exit_code_7", 6))[0] == "ingest"
    # In the rendered plan untouched: a request-level step is left.
    assert classify(messages, keys, plan, Fact("TokenStream", 8))[0] == "view"
    evicted = Plan(
        epochs=[
            Epoch(
                index=0,
                reason="lifecycle",
                edits=[Edit(kind="evict", key=keys[8], text="[read output evicted]", ref="r3")],
            )
        ]
    )
    assert classify(messages, keys, evicted, Fact("TokenStream", 8))[0] == "evict"


def test_the_losses_are_exactly_the_facts_the_bench_counts_as_not_visible() -> None:
    session = build_demo_session()
    config = BenchConfig(workers=1)
    name = "cachepilot[fold_summary_share=0,stub_keeps_chars=0]"
    losses, needed = explain_session(session, name, config)
    result = run_session(session, make_strategy(name), config)
    calls = [c for c in result.calls if c.kind == "call"]
    assert needed == sum(c.facts_needed for c in calls)
    assert len(losses) == needed - sum(c.facts_visible for c in calls)
    assert losses, "a setting without summaries or stub values loses facts on the demo"
    for loss in losses:
        assert loss.age == loss.call_index - loss.output_index > 0
        assert loss.source == session.source
    with pytest.raises(ValueError, match="not a cachepilot setting"):
        explain_session(session, "vanilla", config)


def test_counts_table_and_json_lines() -> None:
    losses = [
        Loss("s1", "a", 5, "x_value", 2, 3, "fold", "fold of 2 messages"),
        Loss("s1", "a", 7, "y_value", 2, 5, "stub", "read: stub"),
        Loss("s2", "b", 9, "z_value", 4, 5, "fold", "fold of 3 messages"),
    ]
    assert loss_counts(losses) == {
        "all": {"fold": 2, "stub": 1},
        "a": {"fold": 1, "stub": 1},
        "b": {"fold": 1},
    }
    table = format_losses(losses, {"a": 100, "b": 50, "c": 10, "all": 160}, name="cachepilot")
    assert "of 100 needed (0.020)" in table
    assert any(line.startswith("c ") for line in table.splitlines())  # no loss, still listed
    buffer = io.StringIO()
    assert write_losses(losses, buffer) == 3
    first = json.loads(buffer.getvalue().splitlines()[0])
    assert first["cause"] == "fold" and first["fact"] == "x_value"


def test_the_cli_writes_every_loss_and_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "losses.jsonl"
    name = "cachepilot[fold_summary_share=0,stub_keeps_chars=0]"
    assert main(["bench", "--losses", str(out), "--strategy", name, "--workers", "1"]) == 0
    text = capsys.readouterr().out
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines and f"wrote {len(lines)} losses" in text
    assert "facts missing from the view of" in text
    assert {json.loads(line)["cause"] for line in lines} <= set(CAUSES)
    argv = ["bench", "--losses", str(out), "--strategy", "cachepilot", "--strategy", "vanilla"]
    assert main(argv) == 2
    assert "at most one --strategy" in capsys.readouterr().err

"""Recorded sessions end to end through a real deepagents `create_deep_agent` agent."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("deepagents")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.frameworks.deepagents_replay import (
    VARIANTS,
    outcome_digest,
    replay_deep_session,
)
from cachepilot_bench.traces import load_paths

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"


def test_the_demo_session_replays_three_ways_and_cachepilot_pays() -> None:
    session = build_demo_session()
    runs = {v: replay_deep_session(session, v) for v in VARIANTS}
    for run in runs.values():
        assert run.error is None and run.unserved_turns == 0
        assert run.calls == len(session.assistant_indices)
        assert run.final_messages == runs["alone"].final_messages
        assert run.files == runs["alone"].files
        assert run.outcome == runs["alone"].outcome  # the same conversation and files
    alone = runs["alone"]
    # The demo's agent dates its system prompt on every call: no prefix survives alone.
    assert alone.prefix_breaks == alone.calls - 1
    for variant in ("plain", "recipe"):
        assert runs[variant].input_cost_usd < 0.5 * alone.input_cost_usd
        assert runs[variant].request_chars < 0.5 * alone.request_chars
        # Breaks only at maintenance points, and once where the clock in the system prompt first
        # moves (the values move into the context block there).
        assert runs[variant].prefix_breaks <= runs[variant].epochs + 1
    # The recipe orders with the caller's middleware (a per-call system prompt here) as the
    # plain middleware does: the same bill.
    assert runs["recipe"].input_cost_usd == pytest.approx(runs["plain"].input_cost_usd, rel=0.02)


@pytest.mark.traces
def test_a_real_trace_replays_through_a_deep_agent() -> None:
    if not TRACES.exists():
        pytest.skip("../shared/data/traces is absent")
    sessions = [
        s for s in load_paths([TRACES / "openhands"]) if 10 <= len(s.assistant_indices) <= 40
    ][:1]
    if not sessions:
        pytest.skip("no small openhands session")
    runs = {v: replay_deep_session(sessions[0], v) for v in VARIANTS}
    for run in runs.values():
        assert run.error is None and run.unserved_turns == 0
    assert runs["recipe"].input_cost_usd < runs["alone"].input_cost_usd
    assert runs["plain"].input_cost_usd < runs["alone"].input_cost_usd


def test_the_outcome_digest_sees_content_tool_calls_and_files_not_random_ids() -> None:
    def state(
        answer: str = "done",
        file: str = "x",
        msg_id: str = "id1",
        args: dict[str, str] | None = None,
        call_id: str = "c1",
        status: str = "success",
        todos: list[dict[str, str]] | None = None,
        last: type[AIMessage] | type[HumanMessage] = AIMessage,
    ) -> dict[str, object]:
        call = {"name": "ls", "args": args or {"path": "/"}, "id": call_id}
        return {
            "messages": [
                HumanMessage("go", id=msg_id),
                AIMessage("", tool_calls=[call], id=msg_id + "a"),
                ToolMessage("a b", tool_call_id=call_id, status=status, id=msg_id + "t"),
                last(answer, id=msg_id + "b"),
            ],
            "files": {"/notes.md": {"content": file, "created_at": msg_id}},
            "todos": todos or [{"content": "fix", "status": "in_progress"}],
        }

    base = outcome_digest(state())
    assert outcome_digest(state(msg_id="id2")) == base  # ids and timestamps differ only
    changed = [
        state(answer="done!"),
        state(file="y"),
        state(args={"path": "/src"}),
        state(call_id="c2"),
        state(status="error"),
        state(todos=[{"content": "fix", "status": "completed"}]),
        state(last=HumanMessage),
    ]
    assert all(outcome_digest(s) != base for s in changed)

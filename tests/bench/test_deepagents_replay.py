"""Recorded sessions end to end through a real deepagents `create_deep_agent` agent."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("deepagents")

from langchain_core.messages import AIMessage, HumanMessage

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
        assert runs[variant].prefix_breaks <= runs[variant].epochs
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
    def state(answer: str, file: str, msg_id: str) -> dict[str, object]:
        call = {"name": "ls", "args": {"path": "/"}, "id": "c1"}
        return {
            "messages": [
                HumanMessage("go", id=msg_id),
                AIMessage("", tool_calls=[call], id=msg_id + "a"),
                AIMessage(answer, id=msg_id + "b"),
            ],
            "files": {"/notes.md": {"content": file, "created_at": msg_id}},
        }

    base = outcome_digest(state("done", "x", "id1"))
    assert outcome_digest(state("done", "x", "id2")) == base  # ids and timestamps differ
    assert outcome_digest(state("done!", "x", "id1")) != base
    assert outcome_digest(state("done", "y", "id1")) != base
    assert outcome_digest(state("done", "x", "id1")) == base

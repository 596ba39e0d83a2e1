"""Recorded sessions end to end through a real create_agent agent and the replay provider."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachepilot_bench import BenchConfig, run_bench
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.frameworks.langgraph_replay import replay_session
from cachepilot_bench.traces import load_paths

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"


def _bench(session, strategy: str) -> float:
    [result] = run_bench([session], [strategy], BenchConfig(workers=1))
    return sum(c.input_cost_usd for c in result.calls if c.kind == "call")


def test_demo_session_costs_what_the_bench_predicts() -> None:
    session = build_demo_session()
    vanilla = replay_session(session, with_cachepilot=False)
    assert vanilla.error is None and vanilla.unserved_turns == 0
    assert vanilla.calls == len(session.assistant_indices)
    assert vanilla.input_cost_usd == pytest.approx(_bench(session, "vanilla"), rel=0.01)


@pytest.mark.traces
def test_a_real_trace_replays_end_to_end() -> None:
    if not TRACES.exists():
        pytest.skip("../shared/data/traces is absent")
    sessions = [
        s for s in load_paths([TRACES / "openhands"]) if 10 <= len(s.assistant_indices) <= 40
    ][:1]
    if not sessions:
        pytest.skip("no small openhands session")
    session = sessions[0]
    vanilla = replay_session(session, with_cachepilot=False)
    ours = replay_session(session, with_cachepilot=True)
    for run in (vanilla, ours):
        assert run.error is None and run.unserved_turns == 0
        assert run.calls == len(session.assistant_indices)
    assert vanilla.prefix_breaks == 0
    assert ours.prefix_breaks <= ours.epochs
    assert vanilla.input_cost_usd == pytest.approx(_bench(session, "vanilla"), rel=0.05)
    assert ours.input_cost_usd == pytest.approx(_bench(session, "cachepilot"), rel=0.05)
    assert ours.input_cost_usd < vanilla.input_cost_usd

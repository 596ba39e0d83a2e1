"""Reasonix transcripts: loading, detection, and the simulator's calibration on their cache counts.

The vendored fixtures (tests/fixtures/reasonix) always run; the full set runs when
`$CACHEPILOT_REASONIX_TRANSCRIPTS` or `../shared/data/traces/reasonix` holds it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cachepilot.messages import pairing_issues
from cachepilot.tokens import get_counter
from cachepilot_bench.calibrate import calibrate
from cachepilot_bench.traces import detect_format, load_file, load_paths

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reasonix"
FULL = Path(
    os.environ.get("CACHEPILOT_REASONIX_TRANSCRIPTS")
    or Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces" / "reasonix"
)
EXACT = pytest.mark.skipif(
    get_counter("o200k_base").approximate,
    reason="o200k_base not loadable; calibration needs real token counts",
)


def test_files_are_detected_as_reasonix() -> None:
    for path in FIXTURES.glob("*.jsonl"):
        assert detect_format(path) == "reasonix", path.name


def test_a_run_becomes_calls_with_tool_exchanges_and_usage() -> None:
    sessions = load_file(FIXTURES / "mcp-filesystem.jsonl")
    assert [s.id for s in sessions] == ["mcp-filesystem.jsonl#run1", "mcp-filesystem.jsonl#run2"]
    session = sessions[0]
    assert session.source == "reasonix"
    assert session.model == "deepseek-chat"
    assert not pairing_issues(session.messages, allow_pending_tail=True)
    first = session.messages[1]
    assert first.role == "assistant"
    assert [c.name for c in first.tool_calls] == ["list_directory"]
    assert session.messages[2].role == "tool"
    assert session.messages[2].tool_call_id == first.tool_calls[0].id
    assert "Access denied" in str(session.messages[2].content)
    usage = session.calls[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.cached_tokens) == (2218, 256)
    assert len(session.calls) == len(session.assistant_indices)


def test_appended_runs_are_separate_sessions() -> None:
    sessions = load_file(FIXTURES / "t01_address_happy.reasonix.r1.jsonl")
    assert len(sessions) >= 2
    assert len({s.id for s in sessions}) == len(sessions)
    assert all(s.meta.get("mode") == "reasonix" for s in sessions)
    baseline = load_file(FIXTURES / "t01_address_happy.baseline.r1.jsonl")
    assert all(s.meta.get("hidden_prefix_changes") == "per-user-turn" for s in baseline)


@EXACT
def test_calibration_on_the_fixtures() -> None:
    sessions = load_paths([FIXTURES])
    baseline = calibrate([s for s in sessions if s.meta.get("mode") == "baseline"])
    summary = baseline.summaries["reasonix"]
    # The baseline rebuilds its unrecorded prefix on every user turn: hits stay low, and the
    # simulator follows them once told so.
    assert summary.recorded_hit_rate < 0.5
    assert summary.mean_abs_error <= 0.06
    stable = calibrate([s for s in sessions if s.meta.get("mode") != "baseline"])
    steady = stable.steady["reasonix"]
    assert steady.recorded_hit_rate > 0.8
    assert steady.mean_abs_error <= 0.08


@pytest.mark.traces
@EXACT
@pytest.mark.skipif(not FULL.is_dir(), reason=f"{FULL} (Reasonix transcripts) not present")
def test_calibration_on_the_full_set() -> None:
    sessions = load_paths([FULL])
    assert len(sessions) >= 100
    report = calibrate(sessions)
    steady = report.steady["reasonix"]
    assert abs(steady.hit_rate_rel_error) <= 0.05
    assert steady.mean_abs_error <= 0.05

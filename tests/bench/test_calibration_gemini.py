"""The Gemini profiles against recorded Gemini 3 Pro usage (mini-swe-agent SWE-bench runs):
the profile is chosen by model name, and its implicit-cache hits are an upper bound of what
the provider served (best-effort caching: some calls miss fully, hits stop short of the
previous prompt), as `cachepilot_bench.calibrate` documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachepilot.tokens import get_counter
from cachepilot_bench.calibrate import calibrate, profile_for
from cachepilot_bench.traces import load_paths

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
GEMINI = TRACES / "mini_swe_agent_gemini3"

pytestmark = [
    pytest.mark.traces,
    pytest.mark.skipif(not GEMINI.is_dir(), reason="../shared/data/traces (Gemini 3) not present"),
    pytest.mark.skipif(
        get_counter("o200k_base").approximate,
        reason="o200k_base not loadable (set TIKTOKEN_CACHE_DIR); calibration needs real counts",
    ),
]


def test_gemini_sessions_get_the_gemini_profile_and_an_upper_bound() -> None:
    sessions = load_paths([GEMINI])
    assert sessions and {profile_for(s).name for s in sessions} == {"gemini-3-pro"}
    report = calibrate(sessions)
    (steady,) = report.steady.values()
    assert steady.calls >= 600
    # Prefix matching predicts more than the provider served, never less...
    assert steady.predicted_hit_rate > steady.recorded_hit_rate
    # ...and by the margin the calibration notes record (85.1 % served, 95.5 % predicted).
    assert 0.80 < steady.recorded_hit_rate < 0.90
    assert 0.92 < steady.predicted_hit_rate < 0.99

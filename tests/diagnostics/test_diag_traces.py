"""`audit` on a real Claude Code session from ../shared/data/traces, converted to a request log.

The session has real provider usage: its auto-compaction must show as a history rewrite, its
4-hour pause as a TTL expiry and the misses the provider reported on unchanged prefixes as
provider-side misses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachepilot.audit import audit_file
from cachepilot_bench.request_logs import sessions_to_log, write_request_log
from cachepilot_bench.traces import load_paths

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
SESSION = "claude_code_spotter/test/fixtures/transcripts/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"


@pytest.mark.traces
def test_real_claude_code_session_breaks_explained(tmp_path: Path) -> None:
    path = TRACES / SESSION
    if not path.is_file():
        pytest.skip(f"shared traces not found at {TRACES}")
    sessions = load_paths([path])
    log = tmp_path / "session.jsonl"
    lines = write_request_log(sessions_to_log(sessions), log)
    assert lines == sum(len(s.assistant_indices) for s in sessions)
    first = json.loads(log.read_text().splitlines()[0])
    assert first["api"] == "anthropic" and "cache_read_input_tokens" in first["usage"]
    report = audit_file(log, provider="anthropic-1h")
    # Both parts of the session (before and after the compaction) are one thread.
    assert len(report.threads) == 1 and len(report.calls) == lines
    causes = [c.explanation.cause for c in report.breaks if c.explanation]
    assert causes.count("history_rewrite") == 1
    assert "ttl_expiry" in causes and "provider_miss" in causes
    fold = next(c for c in report.breaks if c.explanation and c.explanation.prefix_break)
    assert fold.explanation is not None and fold.explanation.detail == "folded"
    assert "continued from a previous conversation" in fold.explanation.divergence.current_snippet
    totals = report.totals
    # Simulated and recorded hit rates agree within a few points on this session.
    assert abs(totals["hit_rate"] - totals["recorded_hit_rate"]) < 0.03
    assert report.hidden_prefix_tokens > 20_000  # Claude Code's unrecorded system + tools

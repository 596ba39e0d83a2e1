"""`cachepilot audit` on the hand-made cassettes and logs of tests/diagnostics/cassettes/.

Each file holds one scenario (see `diag_cassettes.py`); together they cover every cause class.
The last test audits every cassette the plugins' tests recorded, so CI runs `audit` on them.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from cachepilot.audit import audit_file, format_report, load_calls
from cachepilot.audit.cli import parse_rate
from cachepilot.cli import main
from cachepilot.diagnose.breaks import CAUSES

HERE = Path(__file__).resolve().parent / "cassettes"
TESTS = Path(__file__).resolve().parents[1]


def causes(name: str, provider: str | None = None) -> list[tuple[str, int, str, str]]:
    report = audit_file(HERE / name, provider=provider)
    return [
        (c.thread, c.ordinal, c.explanation.cause, c.explanation.detail)
        for c in report.breaks
        if c.explanation is not None
    ]


def test_volatile_date_yaml_cassette() -> None:
    calls = load_calls(HERE / "volatile_date.yaml")
    assert len(calls) == 3
    # The gzip-compressed response of call 1 was read, and the Date header is the call time.
    assert calls[1].response_id == "chatcmpl-1"
    assert calls[1].timestamp is not None and calls[1].timestamp - calls[0].timestamp == 60
    found = causes("volatile_date.yaml")
    assert [(o, c, d) for _, o, c, d in found] == [
        (1, "volatile_value", "datetime"),
        (2, "volatile_value", "datetime"),
    ]
    report = audit_file(HERE / "volatile_date.yaml")
    last = report.calls[2].explanation
    assert last is not None and last.remissed_tokens > 0 and last.avoidable
    assert report.totals["avoidable_usd"] > 0


def test_tool_changes_json_cassette() -> None:
    assert [(o, c, d) for _, o, c, d in causes("tool_changes.json")] == [
        (1, "tool_change", "reordered"),
        (2, "tool_change", "added"),
    ]


def test_clean_streamed_cassette_has_no_break() -> None:
    report = audit_file(HERE / "clean_stream.yaml")
    assert report.breaks == [] and len(report.threads) == 1
    assert [c.call.usage.cached_tokens for c in report.calls if c.call.usage] == [0, 1408, 1408]
    assert report.calls[1].simulated.cached_tokens > 0
    assert report.totals["warm_hit_rate"] > 0.5


def test_anthropic_cassette_parameter_and_model_change() -> None:
    report = audit_file(HERE / "anthropic_changes.yaml")
    assert report.profile.name == "anthropic"  # picked by API
    found = [(o, c, d) for _, o, c, d in causes("anthropic_changes.yaml")]
    assert found == [
        (1, "parameter_change", "tool_choice"),
        (2, "model_change", "claude-opus-4-1"),
    ]
    calls = load_calls(HERE / "anthropic_changes.yaml")
    # tool_result blocks became tool messages; cache_control marks became breakpoints.
    assert [m.role for m in calls[1].request.messages] == ["user", "assistant", "tool"]
    assert calls[1].request.cache_breakpoints == (-1, 2)
    assert calls[1].usage is not None and calls[1].usage.cached_tokens == 1400


def test_responses_log_rewrite_provider_miss_and_chain() -> None:
    report = audit_file(HERE / "responses_log.jsonl")
    assert [(t.key, len(t.calls)) for t in report.threads] == [
        ("prompt_cache_key", 3),
        ("prefix", 2),
    ]
    found = [(o, c, d) for _, o, c, d in causes("responses_log.jsonl")]
    assert found == [(1, "provider_miss", "recorded"), (2, "history_rewrite", "stubbed")]
    chained = report.threads[1].calls[1].call
    # previous_response_id: the full context was rebuilt (first input + its output + new input).
    assert [m.text for m in chained.request.messages] == [
        "Hello, this is a new task about module 7.",
        "Hi.",
        "Go on.",
    ]


def test_chat_log_rewrites_ttl_minimum_and_system_edit() -> None:
    report = audit_file(HERE / "chat_log.jsonl")
    by_thread = {t.id: t.key for t in report.threads}
    assert by_thread == {
        "t-rewrite": "metadata.thread_id",
        "t-ttl": "metadata.thread_id",
        "t-short": "metadata.thread_id",
        "u-9#1": "user",
    }
    assert [(t, o, c, d) for t, o, c, d in causes("chat_log.jsonl")] == [
        ("t-rewrite", 1, "history_rewrite", "removed"),
        ("t-rewrite", 2, "history_rewrite", "folded"),
        ("t-ttl", 1, "ttl_expiry", "600s"),
        ("t-short", 1, "below_minimum", "request"),
        ("u-9#1", 1, "system_change", "edited"),
    ]


def test_every_cause_class_is_covered_by_a_hand_made_file() -> None:
    seen = {
        c.explanation.cause
        for path in HERE.iterdir()
        for c in audit_file(path).calls
        if c.explanation is not None
    }
    assert seen == set(CAUSES)


def test_report_text_and_json_shapes() -> None:
    report = audit_file(HERE / "chat_log.jsonl")
    text = format_report(report)
    assert "thread t-ttl" in text and "TTL expiry" in text and "avoidable cost" in text
    doc = report.to_dict()
    assert json.loads(json.dumps(doc)) == doc
    totals = doc["totals"]
    assert totals["calls"] == 9 and totals["breaks"] == 5 and totals["prefix_breaks"] == 3
    assert set(totals["by_cause"]) == {
        "history_rewrite",
        "system_change",
        "ttl_expiry",
        "below_minimum",
    }
    assert totals["hit_rate"] == pytest.approx(totals["cached_tokens"] / totals["input_tokens"])
    assert sum(t["totals"]["calls"] for t in doc["threads"]) == 9


def test_cli_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = str(HERE / "clean_stream.yaml")
    assert main(["audit", clean, "--max-breaks", "0"]) == 0
    assert main(["audit", clean, "--fail-under", "99%"]) == 1
    assert "below 99.0%" in capsys.readouterr().err
    assert main(["audit", str(HERE / "tool_changes.json"), "--max-breaks", "1"]) == 1
    assert "2 prefix break(s)" in capsys.readouterr().err
    out = tmp_path / "audit.json"
    assert main(["audit", clean, "--json", str(out), "--provider", "deepseek"]) == 0
    doc = json.loads(out.read_text())
    assert doc["provider"] == "deepseek" and doc["requests"] == 3
    capsys.readouterr()
    assert main(["audit", clean, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["breaks"] == 0
    assert main(["audit", clean, "--fail-under", "0.5", "--basis", "recorded"]) == 1
    assert main(["audit", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["audit", clean, "--fail-under", "1.5"]) == 2
    assert main(["audit", clean, "--hidden-prefix", "-3"]) == 2


def test_bad_input_is_a_clear_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text('not json\n{"hello": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="no model request"):
        load_calls(junk)
    mixed = tmp_path / "mixed.jsonl"
    good = (HERE / "chat_log.jsonl").read_text().splitlines()[0]
    mixed.write_text(f"{good}\nnot json\n[1, 2]\n{good}\n", encoding="utf-8")
    assert len(load_calls(mixed)) == 2
    assert "not JSON" in caplog.text
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("interactions: [\n", encoding="utf-8")
    with pytest.raises(ValueError, match="invalid YAML"):
        load_calls(bad_yaml)


def test_parse_rate() -> None:
    assert parse_rate("80%") == pytest.approx(0.8) and parse_rate("0.25") == 0.25
    for bad in ("x", "120%", "-0.1"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def recorded_cassettes() -> list[Path]:
    """Every vcrpy cassette the repository's tests recorded (the plugins' and ours)."""
    found = sorted(
        p
        for p in TESTS.rglob("*")
        if p.suffix in (".yaml", ".yml", ".json") and "cassettes" in p.parts
    )
    return [p for p in found if HERE not in p.parents]


@pytest.mark.parametrize("path", recorded_cassettes(), ids=lambda p: p.name)
def test_audit_runs_on_every_recorded_cassette(path: Path) -> None:
    try:
        report = audit_file(path)
    except ValueError as exc:
        if "no model request" in str(exc):
            pytest.skip(f"{path.name}: no model request in it")
        raise
    totals = report.totals
    assert totals["calls"] == len(report.calls) > 0
    assert 0.0 <= totals["hit_rate"] <= 1.0
    counts = Counter(c.explanation.cause for c in report.calls if c.explanation)
    assert set(counts) <= set(CAUSES)
    assert format_report(report)


def test_server_side_context_edits_are_the_providers_not_the_requests() -> None:
    # Anthropic `context_management` (clear_tool_uses, clear_thinking) on an append-only
    # thread; from call 3 the provider reports the cache read of a prompt it cleared.
    report = audit_file(HERE / "anthropic_context_edits.jsonl")
    causes = [c.explanation.cause for c in report.calls if c.explanation is not None]
    assert causes[-1] == "provider_edit"
    assert "provider_miss" not in causes
    assert report.totals["prefix_breaks"] == 0
    assert set(report.totals["by_cause"]) == {"provider_edit"}
    assert "provider context edit" in format_report(report)

"""`cachepilot demo`: the built-in session through a real create_agent agent (ChatOpenAI over
real HTTP to the replay provider), with and without the middleware."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cachepilot.cli import main
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.frameworks.langgraph_demo import run_demo
from cachepilot_bench.replay import ReplayProvider, ReplayScript


def test_demo_command_runs_a_real_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "demo.png"
    out_json = tmp_path / "demo.json"
    assert main(["demo", "--plot", str(chart), "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    assert "create_agent" in printed and "input cost ratio" in printed
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(out_json.read_text())
    vanilla, ours = doc["runs"]["vanilla"], doc["runs"]["cachepilot"]
    session = build_demo_session()
    calls = len(session.assistant_indices)
    assert vanilla["calls"] == ours["calls"] == calls
    # The system prompt changes every call: without cachepilot nothing is ever cached.
    assert vanilla["hit_rate"] == 0.0 and vanilla["prefix_breaks"] == calls - 1
    assert ours["hit_rate"] > 0.8
    assert ours["prefix_breaks"] <= ours["maintenance_epochs"] + 1  # + the idle-gap expiry
    assert doc["ratio_input_cost"] < 0.2
    # Same recorded turns, same tools: both agents end with the same two answers.
    assert vanilla["final_answers"] == ours["final_answers"]
    assert len(vanilla["final_answers"]) == 2
    # The framework run and the bench replay of the same session agree on vanilla exactly.
    # The framework run and the bench replay of the same session agree (the bench's recall
    # round trips are reported apart: a replayed model never recalls).
    predicted = doc["predicted_input_cost_usd"]
    assert predicted["vanilla"] == pytest.approx(vanilla["input_cost_usd"], rel=1e-3)
    assert predicted["cachepilot"] == pytest.approx(ours["input_cost_usd"], rel=0.02)


def test_live_path_uses_the_endpoint_and_its_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    session = build_demo_session()
    script = ReplayScript.from_session(session)
    doubled = dataclasses.replace(script, turns=tuple(script.turns) * 2, prompts=())
    with ReplayProvider(doubled) as provider:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
        monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
        report = run_demo(live=True, predict=False, session=session)
        served = provider.records
    n = len(session.assistant_indices)
    assert len(served) == 2 * n
    ours = report.runs["cachepilot"]
    assert [c.cached_tokens for c in ours.calls] == [r.usage.cached_tokens for r in served[n:]]
    assert report.mode == "live" and ours.calls[0].prefix_extends is None


def test_live_without_a_key_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["demo", "--live"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


@pytest.mark.parametrize("client_marks", ["none", "default"])
def test_anthropic_demo_speaks_messages_and_hits_come_from_the_marks(client_marks: str) -> None:
    pytest.importorskip("langchain_anthropic")
    from cachepilot.wire.anthropic import MAX_CACHE_MARKS, cache_mark_count

    report = run_demo(provider_profile="anthropic", predict=False, client_marks=client_marks)
    vanilla, ours = report.runs["vanilla"], report.runs["cachepilot"]
    assert {r["api"] for r in [*vanilla.request_log, *ours.request_log]} == {"anthropic"}
    vanilla_marks = [cache_mark_count(r["request"]) for r in vanilla.request_log]
    our_marks = [cache_mark_count(r["request"]) for r in ours.request_log]
    # Without the user's marks the plain agent sends none; cachepilot's own give the hits.
    assert all(n == (0 if client_marks == "none" else 3) for n in vanilla_marks)
    assert all(1 <= n <= MAX_CACHE_MARKS for n in our_marks)
    cached = sum(c.cached_tokens for c in ours.calls)
    assert cached / sum(c.input_tokens for c in ours.calls) > 0.8
    assert vanilla.final_answers == ours.final_answers


def test_demo_rejects_an_unknown_client_marks_value() -> None:
    with pytest.raises(ValueError, match="client_marks"):
        run_demo(provider_profile="anthropic", predict=False, client_marks="all")

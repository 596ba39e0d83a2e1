"""Guideline files, the fold's guideline, the stand-in compressor and the `cachepilot-llm`
bench strategy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from cachepilot.compress import (
    DEFAULT_OBSERVATION_GUIDELINE,
    Guideline,
    StandInCompressor,
    build_observation_prompt,
    load_guideline,
)
from cachepilot.compress.guideline import guideline_text
from cachepilot.fold import DEFAULT_GUIDELINE, ChatModelSummarizer, FoldRequest
from cachepilot.messages import Message
from cachepilot_bench import BenchConfig, make_strategy, run_bench
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.registry import ALL_STRATEGIES, OPTIONAL_STRATEGIES, available_strategies
from cachepilot_bench.report import summarize

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"


def test_default_history_guideline_is_structured() -> None:
    order = ["## Goal", "## Reasoning so far", "## Variables", "## Completed", "## To-do"]
    positions = [DEFAULT_GUIDELINE.index(h) for h in [*order, "## Guardrails"]]
    assert positions == sorted(positions)
    assert "verbatim" in DEFAULT_GUIDELINE


def test_guideline_file_round_trip(tmp_path: Path) -> None:
    made = Guideline(target="history", text="  Keep paths.  ", environment="swe", score=0.9)
    path = made.save(tmp_path / "g" / "swe.json")
    loaded = load_guideline(path)
    assert loaded == made and loaded.text == "Keep paths."
    assert json.loads(path.read_text())["format"] == "cachepilot-guideline"
    assert load_guideline(path, "history") == made
    with pytest.raises(ValueError, match="history guideline"):
        load_guideline(path, "observation")
    text = tmp_path / "plain.md"
    text.write_text("Keep every error.\n", encoding="utf-8")
    assert load_guideline(text, "observation").text == "Keep every error."
    with pytest.raises(ValueError, match="plain text"):
        load_guideline(text)
    for bad in ('{"format": "other"}', '{"format": "cachepilot-guideline", "text": ""}', "{"):
        text.write_text(bad, encoding="utf-8")
        with pytest.raises(ValueError):
            load_guideline(text, "history")
    with pytest.raises(ValueError):
        load_guideline(tmp_path / "missing.json")


def test_fold_summarizer_takes_a_guideline_per_environment() -> None:
    model = FakeListChatModel(responses=["## Goal\nx"])
    swe = Guideline(target="history", text="Keep failing test names.", environment="swe")
    summarizer = ChatModelSummarizer(model, guideline=swe)
    assert summarizer.guideline == "Keep failing test names."
    request = FoldRequest(
        folded_messages=(Message(role="user", content="hi"),), guideline=summarizer.guideline
    )
    assert summarizer.summarize(request) == "## Goal\nx"
    assert ChatModelSummarizer(model).guideline == DEFAULT_GUIDELINE  # default unchanged
    with pytest.raises(ValueError):
        ChatModelSummarizer(model, guideline="   ")
    with pytest.raises(ValueError):
        ChatModelSummarizer(model, guideline=Guideline.default("observation"))
    assert guideline_text(None, "observation") == DEFAULT_OBSERVATION_GUIDELINE


def test_stand_in_compressor_keeps_errors_and_is_deterministic() -> None:
    lines = [f"building module part_{i}" for i in range(300)]
    lines[150] = "ERROR src/app/db.py:42 connection refused"
    output = "\n".join(lines)
    system, prompt = build_observation_prompt(
        "bash", {"command": "make"}, output, guideline=DEFAULT_OBSERVATION_GUIDELINE
    )
    stand_in = StandInCompressor()
    answer = stand_in.complete(system, prompt)
    assert answer == stand_in.complete(system, prompt)
    assert "ERROR src/app/db.py:42 connection refused" in answer
    assert "lines omitted" in answer and len(answer) < len(output) // 2
    assert stand_in.complete(system, "no output here") == ""
    with pytest.raises(ValueError):
        StandInCompressor(ratio=0)


def test_llm_strategy_is_registered_but_opt_in() -> None:
    assert "cachepilot-llm" in available_strategies()
    assert "cachepilot-llm" in OPTIONAL_STRATEGIES and "cachepilot-llm" not in ALL_STRATEGIES
    assert make_strategy("cachepilot-llm").can_recall


def test_llm_strategy_bills_its_compressor_calls() -> None:
    session = build_demo_session()
    names = ["vanilla", "cachepilot", "cachepilot-llm"]
    results = run_bench([session], names, BenchConfig(workers=1))
    by_name = {r.strategy: r for r in results}
    llm = by_name["cachepilot-llm"]
    assert llm.error is None
    extra = [c for c in llm.calls if c.kind == "extra"]
    assert extra and len(extra) == llm.stats["compressor_calls"]
    assert all(c.cost_usd > 0 and c.usage.output_tokens > 0 for c in extra)
    assert llm.stats["tokens_removed.llm_compress"] > 0
    assert llm.stats["tool_tokens_out"] < by_name["cachepilot"].stats["tool_tokens_out"]
    assert not [c for c in by_name["cachepilot"].calls if c.kind == "extra"]
    doc = summarize(results, BenchConfig(workers=1), traces=1)
    assert doc["strategies"]["cachepilot-llm"]["extra_calls"] == len(extra)
    again = run_bench([session], ["cachepilot-llm"], BenchConfig(workers=1))[0]
    assert [c.usage for c in again.calls] == [c.usage for c in llm.calls]  # deterministic


@pytest.mark.traces
def test_llm_strategy_on_real_traces() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not found at {TRACES}")
    from cachepilot_bench import prepare_sessions
    from cachepilot_bench.traces import load_paths

    config = BenchConfig(workers=1)
    sessions = prepare_sessions(load_paths([TRACES / "swe_agent"]), config)[:3]
    results = run_bench(sessions, ["cachepilot-llm"], config)
    assert all(r.error is None for r in results)
    for result in results:
        assert all(c.facts_recoverable == c.facts_needed for c in result.calls)

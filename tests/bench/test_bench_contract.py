"""`cachepilot bench` keeps the CLI and JSON contract of DESIGN §8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachepilot.cli import main
from cachepilot_bench import ALL_STRATEGIES, BenchConfig, prepare_sessions, run_bench
from cachepilot_bench.report import summarize
from cachepilot_bench.traces import load_paths

CONTRACT_KEYS = {
    "cost_usd",
    "input_cost_usd",
    "input_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "uncached_tokens",
    "output_tokens",
    "hit_rate",
    "peak_context_tokens",
    "mean_context_tokens",
    "prefix_breaks",
    "fidelity_visible",
    "fidelity_recoverable",
    "recalls",
    "overhead_ms_per_call_p50",
}


def _tau_file(tmp_path: Path, runs: int = 2, turns: int = 12) -> Path:
    """A small tau-bench style file: a long policy prompt and many short tool turns."""
    policy = "You are an airline agent. " + " ".join(f"Rule {i}: be precise." for i in range(300))
    data = []
    for run in range(runs):
        traj: list[dict[str, object]] = [
            {"role": "system", "content": policy},
            {"role": "user", "content": f"I want to change reservation ABC{run}12."},
        ]
        for t in range(turns):
            cid = f"call_{run}_{t}"
            traj.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {
                                "name": "get_reservation_details",
                                "arguments": json.dumps({"reservation_id": f"ABC{run}{t}"}),
                            },
                        }
                    ],
                }
            )
            payload = {
                "reservation_id": f"ABC{run}{t}",
                "flights": [
                    {"flight_number": f"HAT{100 + t}", "date": "2024-05-16", "price": 1000 + t}
                ]
                * 8,
            }
            traj.append(
                {
                    "role": "tool",
                    "tool_call_id": cid,
                    "name": "get_reservation_details",
                    "content": json.dumps(payload),
                }
            )
            traj.append({"role": "assistant", "content": f"Flight HAT{100 + t} costs {1000 + t}."})
            traj.append({"role": "user", "content": "ok, next one"})
        data.append({"task_id": run, "trial": 0, "reward": 1.0, "info": {}, "traj": traj})
    path = tmp_path / "gpt-4o-airline.json"
    path.write_text(json.dumps(data))
    return path


def test_bench_json_has_every_contract_key(tmp_path: Path) -> None:
    trace = _tau_file(tmp_path)
    out = tmp_path / "out.json"
    code = main(
        ["bench", str(trace), "--strategy", "vanilla", "--json", str(out), "--workers", "1"]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert {"provider", "mode", "traces", "calls", "strategies"} <= doc.keys()
    assert doc["provider"] == "openai-gpt-5.4-mini"
    assert doc["mode"] == "isolated"
    assert doc["traces"] == 1
    assert doc["calls"] == 2 * 12 * 2
    vanilla = doc["strategies"]["vanilla"]
    assert vanilla.keys() >= CONTRACT_KEYS
    assert vanilla["hit_rate"] == pytest.approx(
        vanilla["cached_tokens"] / vanilla["input_tokens"], abs=1e-4
    )
    assert vanilla["uncached_tokens"] == (
        vanilla["input_tokens"] - vanilla["cached_tokens"] - vanilla["cache_write_tokens"]
    )
    assert vanilla["prefix_breaks"] == 0  # full history is append-only
    assert vanilla["fidelity_visible"] == 1.0
    assert 0 < vanilla["input_cost_usd"] < vanilla["cost_usd"]


def test_every_strategy_runs_and_reports_ratios(tmp_path: Path) -> None:
    sessions = prepare_sessions(load_paths([_tau_file(tmp_path, runs=1, turns=30)]), BenchConfig())
    results = run_bench(sessions, list(ALL_STRATEGIES), BenchConfig(workers=1))
    doc = summarize(results, BenchConfig(), traces=1)
    assert list(doc["strategies"]) == list(ALL_STRATEGIES)
    for name, totals in doc["strategies"].items():
        assert totals.keys() >= CONTRACT_KEYS, name
        assert totals["errors"] == [], name
        assert totals["calls"] == 60, name
    assert doc["strategies"]["vanilla"]["input_cost_ratio_to_vanilla"] == 1.0


def test_continuous_mode_chains_sessions(tmp_path: Path) -> None:
    trace = _tau_file(tmp_path, runs=3, turns=4)
    config = BenchConfig(mode="continuous", chain=4, workers=1)
    sessions = prepare_sessions(load_paths([trace]), config)
    assert len(sessions) == 1
    results = run_bench(sessions, ["vanilla"], config)
    doc = summarize(results, config, traces=1)
    assert doc["calls"] == 3 * 4 * 2
    assert doc["strategies"]["vanilla"]["prefix_breaks"] == 0


def test_bad_arguments_fail_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["bench", str(_tau_file(tmp_path)), "--strategy", "nope"]) == 2
    assert "unknown strategy" in capsys.readouterr().err
    with pytest.raises(ValueError, match="mode"):
        BenchConfig(mode="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown|known"):
        BenchConfig(provider="no-such-provider")


def test_continuous_mode_keeps_pairing_at_the_seams(tmp_path: Path) -> None:
    from cachepilot.messages import pairing_issues

    data = json.loads(_tau_file(tmp_path, runs=3, turns=2).read_text())
    for n, run in enumerate(data):  # every run ends on a call that never got its result
        run["traj"][0]["content"] += f" Run {n}."  # and the system prompts differ
        run["traj"].append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"final_{run['task_id']}",
                        "type": "function",
                        "function": {"name": "transfer_to_human_agents", "arguments": "{}"},
                    }
                ],
            }
        )
    path = tmp_path / "gpt-4o-airline.json"
    path.write_text(json.dumps(data))
    config = BenchConfig(mode="continuous", chain=4, workers=1)
    sessions = prepare_sessions(load_paths([path]), config)
    assert len(sessions) == 1
    assert pairing_issues(sessions[0].messages) == []
    seams = [m for m in sessions[0].messages if m.role == "tool" and "ended before" in m.text]
    assert len(seams) == 2  # the last run's pending call stays pending (allowed at the tail)


def test_demo_command_prints_tables_and_writes_a_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "demo.png"
    out_json = tmp_path / "demo.json"
    assert main(["demo", "--engine", "bench", "--plot", str(chart), "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    assert "input cost per call" in printed and " sum " in printed
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(out_json.read_text())
    ours, vanilla = doc["strategies"]["cachepilot"], doc["strategies"]["vanilla"]
    # The demo's system prompt changes every call: vanilla never hits, cachepilot keeps the
    # prefix stable and recalls nothing it cannot give back.
    assert vanilla["hit_rate"] == 0.0 and vanilla["prefix_breaks"] == doc["calls"] - 1
    assert ours["hit_rate"] > 0.8
    assert ours["input_cost_usd"] < 0.2 * vanilla["input_cost_usd"]
    assert ours["fidelity_recoverable"] == 1.0

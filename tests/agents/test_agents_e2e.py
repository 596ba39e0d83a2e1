"""Recorded sessions from ../shared/data/traces through a real `Runner`, compared with the bench."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import pytest

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "agents_e2e.py"


def load_benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("agents_e2e_benchmark", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.traces
def test_end_to_end_replay_matches_the_bench_prediction() -> None:
    if not TRACES.exists():
        pytest.skip(f"shared traces not found at {TRACES}")
    from agents import set_tracing_disabled

    from cachepilot_bench.traces import load_paths

    set_tracing_disabled(True)
    bench = load_benchmark()
    sessions = bench.pick(load_paths([TRACES / "openhands"]), per_source=1, max_calls=40)
    if not sessions:
        pytest.skip("no small openhands session in the traces")
    session = sessions[0]
    measured = asyncio.run(bench.e2e(session, "responses"))
    predicted = bench.bench(session)
    assert measured["plain_requests"] == measured["cachepilot_requests"] == measured["calls"]
    e2e_ratio = measured["cachepilot_input_usd"] / measured["plain_input_usd"]
    bench_ratio = predicted["cachepilot"] / predicted["vanilla"]
    assert abs(e2e_ratio - bench_ratio) < 0.1
    assert abs(measured["plain_input_usd"] / predicted["vanilla"] - 1) < 0.15

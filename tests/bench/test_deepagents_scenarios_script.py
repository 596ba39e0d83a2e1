"""`benchmarks/deepagents_scenarios.py` prints the tables of docs/deepagents.md."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepagents")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "deepagents_scenarios.py"


def test_the_script_prints_both_scenarios_three_ways(capsys: pytest.CaptureFixture[str]) -> None:
    saved = list(sys.path)
    try:
        main = runpy.run_path(str(SCRIPT))["main"]
        assert main() == 0
    finally:
        sys.path[:] = saved
    out = capsys.readouterr().out
    rows: dict[str, dict[str, float]] = {}
    scenario = ""
    for line in out.splitlines():
        if line.endswith(":"):
            scenario = line[:-1]
        elif line.split()[:1] and line.split()[0] in ("alone", "plain", "recipe"):
            rows.setdefault(scenario, {})[line.split()[0]] = float(line.split()[-1])
    assert set(rows) == {"evicted build log", "summarization"}
    for ratios in rows.values():
        assert ratios["alone"] == 1.0
        assert ratios["recipe"] < ratios["plain"] < 1.0

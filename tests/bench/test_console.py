"""The bench's terminal output (`cachepilot_bench.console`) and its chart's styles
(`cachepilot_bench.plot`)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachepilot.cli import main
from cachepilot_bench.console import ProgressReporter, write_bench_table
from cachepilot_bench.plot import series_styles

DOC = {
    "provider": "p",
    "mode": "isolated",
    "traces": 1,
    "sessions": 1,
    "calls": 3,
    "wall_seconds": 1.5,
    "strategies": {
        name: {
            "input_cost_usd": cost,
            "input_cost_ratio_to_vanilla": cost / 2.0,
            "cost_usd": cost + 0.1,
            "hit_rate": 0.5,
            "peak_context_tokens": 1200,
            "mean_context_tokens": 900,
            "prefix_breaks": 1,
            "fidelity_visible": 1.0,
            "fidelity_recoverable": 1.0,
            "extra_calls": 0,
            "recalls": 0,
            "refetches": 0,
            "overhead_ms_per_call_p50": 0.5,
            "errors": ["boom [x]"] if name == "cachepilot" else [],
        }
        for name, cost in (("vanilla", 2.0), ("cachepilot", 0.25))
    },
}


def test_progress_prints_a_line_per_item_when_piped() -> None:
    stream = io.StringIO()
    with ProgressReporter(stream, what="sessions") as progress:
        for done in range(1, 4):
            progress(done, 3, f"session-{done}")
    lines = stream.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["[1/3]", "[2/3]", "[3/3]"]
    assert lines[-1].endswith("session-3")


def test_progress_draws_a_bar_on_a_terminal() -> None:
    stream = io.StringIO()
    with ProgressReporter(stream, what="sessions", terminal=True) as progress:
        progress(1, 2, "a")
        progress(2, 2, "b")
    text = stream.getvalue()
    assert "2/2" in text and "\n[1/2]" not in text  # rich's bar, not the plain lines


def test_bench_table_plain_when_piped_rich_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # a terminal wide enough for every column
    plain = io.StringIO()
    write_bench_table(DOC, plain)
    assert plain.getvalue().splitlines()[1].startswith("strategy")  # format_table's header
    assert "0.2500" in plain.getvalue()
    rich = io.StringIO()
    write_bench_table(DOC, rich, terminal=True)
    text = rich.getvalue()
    assert "\x1b[" in text and "│" in text  # styled, box-drawn
    assert "0.2500" in text and "wall time 1.5 s" in text
    assert "boom [x]" in text  # an error is printed as text, not read as markup


def test_bench_command_reports_progress_when_piped(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cachepilot.cli",
            "bench",
            "--strategy",
            "vanilla",
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "[1/1]" in out.stderr  # the one session of the built-in demo workload
    assert "vanilla" in out.stdout and "\x1b[" not in out.stdout


def test_sixteen_series_are_told_apart_and_cachepilot_is_on_top() -> None:
    names = [
        "vanilla",
        *(f"peer-{i}" for i in range(10)),
        "cachepilot",
        *(f"cachepilot-no-{i}" for i in range(4)),
    ]
    styles = series_styles(names)
    looks = {(s.color, s.linestyle, s.marker) for s in styles.values()}
    assert len(looks) == len(names) == 16
    assert len({s.color for s in styles.values()}) == 16
    top = max(styles.values(), key=lambda s: s.zorder)
    assert top is styles["cachepilot"] and styles["cachepilot"].linewidth > 2
    assert styles["vanilla"].linestyle == "--"
    assert all(styles[f"cachepilot-no-{i}"].linestyle == ":" for i in range(4))


def test_bench_chart_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert main(["bench", "--workers", "1", "--plot", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(tmp_path / "c.png") > 10_000

"""`cachepilot[key=value,...]` variants, the sweep grid, the frontier and the dominance lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cachepilot.cli import main
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot_bench import make_strategy
from cachepilot_bench.frontier import (
    ALL_SOURCES,
    dominance,
    format_frontier,
    frontier,
    points,
    write_frontier_plot,
)
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.registry import validate_names
from cachepilot_bench.variants import SWEEP_GRID, parse_variant, sweep_names, variant_name


def test_a_variant_name_sets_those_maintenance_settings_and_keeps_its_name() -> None:
    name = "cachepilot[fold_protect_tokens=4000,horizon=1.5,fold=false]"
    config = parse_variant(name)
    assert config.fold_protect_tokens == 4000
    assert config.horizon == 1.5
    assert config.fold is False
    assert config.fold_summary_tokens == MaintenanceConfig().fold_summary_tokens
    strategy = make_strategy(name)
    assert isinstance(strategy, CachePilotStrategy)
    assert strategy.name == name
    assert strategy.config.maintenance == config
    assert parse_variant("cachepilot[]") == MaintenanceConfig()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("cachepilot[fold_protect=4000]", "fold_protect"),  # unknown key
        ("cachepilot[horizon=-1]", "horizon"),  # out of range
        ("cachepilot[horizon=soon]", "horizon"),  # not a number
        ("cachepilot[horizon]", "key=value"),
        ("cachepilot[horizon=1,horizon=2]", "twice"),
        ("cachepilot[horizon=1", "cachepilot[key=value"),
    ],
)
def test_a_bad_variant_is_refused_before_anything_runs(name: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[")):
        validate_names(["vanilla", name])


def test_the_sweep_names_every_combination_once_with_the_defaults_as_cachepilot() -> None:
    names = sweep_names()
    combos = 1
    for values in SWEEP_GRID.values():
        combos *= len(values)
    assert len(names) == len(set(names)) == combos
    assert "cachepilot" in names
    for name in names:
        if name != "cachepilot":
            parse_variant(name)
    assert variant_name({"horizon": 1.0, "fold_min_tokens": 6000}) == (
        "cachepilot[fold_min_tokens=6000,horizon=1]"
    )


def _row(cost: float, visible: float) -> dict[str, Any]:
    return {"input_cost_usd": cost, "fidelity_visible": visible, "fidelity_recoverable": 1.0}


def _doc() -> dict[str, Any]:
    src = {
        "vanilla": _row(10.0, 1.0),
        "cachepilot": _row(8.0, 0.98),
        "cachepilot[horizon=1]": _row(7.0, 0.96),
        "cachepilot[horizon=2]": _row(7.5, 0.95),  # beaten by horizon=1 on both
        "peer-a": _row(9.0, 0.97),  # answered by the default
        "peer-b": _row(6.0, 0.94),  # cheaper than anything of ours: not dominated
        "peer-c": _row(10.0, 1.0),  # more faithful than every setting: out of reach
    }
    return {"strategies": src, "per_source": {"x": src}}


def test_frontier_and_dominance_on_a_hand_made_run() -> None:
    found = points(_doc(), ALL_SOURCES)
    assert [p.name for p in frontier(found)] == ["cachepilot[horizon=1]", "cachepilot"]
    verdicts = {d.peer.name: d for d in dominance(found)}
    assert verdicts["peer-a"].dominated and verdicts["peer-a"].best is not None
    assert verdicts["peer-a"].best.name == "cachepilot"
    assert not verdicts["peer-b"].dominated
    assert verdicts["peer-b"].best is not None and verdicts["peer-b"].best.cost_ratio == 0.7
    assert verdicts["peer-c"].best is None and verdicts["peer-c"].closest is not None
    assert "out of reach" in verdicts["peer-c"].verdict()
    text = format_frontier(_doc())
    assert text.count("frontier") == 2  # all, then source x
    assert "1/3" in text  # peers answered per source
    with pytest.raises(ValueError):
        points({"strategies": {"cachepilot": _row(1.0, 1.0)}})
    with pytest.raises(ValueError):
        points(_doc(), "no-such-source")


def test_the_frontier_chart_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = write_frontier_plot(_doc(), tmp_path / "f.png", title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cli_sweeps_the_demo_and_prints_the_frontier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--frontier", str(tmp_path / "f.png")]) == 2
    assert "add --sweep" in capsys.readouterr().err
    argv = ["bench", "--sweep", "--strategy", "vanilla", "--strategy", "keep-last-n"]
    assert main([*argv, "--workers", "1", "--json", str(tmp_path / "s.json")]) == 0
    text = capsys.readouterr().out
    assert "frontier (input × vanilla, visible fidelity):" in text
    assert "keep-last-n" in text
    assert text.count("cachepilot[") >= len(sweep_names()) - 1

"""Leave-one-source-out choice of settings, on synthetic sweep results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cachepilot.cli import main
from cachepilot_bench.holdout import choose, format_holdout, holdout, holdout_json

CHEAP = "cachepilot[fold_protect_tokens=1000]"
MID = "cachepilot"
SAFE = "cachepilot[fold_protect_tokens=8000]"


def _row(cost: float, visible: float) -> dict[str, Any]:
    return {"input_cost_usd": cost, "fidelity_visible": visible, "fidelity_recoverable": 1.0}


def _doc(mode: str, table: dict[str, dict[str, tuple[float, float]]]) -> dict[str, Any]:
    """A sweep document: source → strategy → (input cost, visible fidelity)."""
    per_source = {
        source: {name: _row(*cell) for name, cell in rows.items()} for source, rows in table.items()
    }
    names = list(next(iter(table.values())))
    strategies = {name: _row(1.0, 1.0) for name in names}
    return {"mode": mode, "strategies": strategies, "per_source": per_source}


def _docs() -> dict[str, dict[str, Any]]:
    # "hard" loses facts under the cheap setting; the other sources do not tell.
    easy = {"vanilla": (10.0, 1.0), CHEAP: (3.0, 0.99), MID: (4.0, 0.99), SAFE: (6.0, 1.0)}
    other = {"vanilla": (20.0, 1.0), CHEAP: (8.0, 0.98), MID: (9.0, 0.99), SAFE: (12.0, 1.0)}
    hard_iso = {"vanilla": (10.0, 1.0), CHEAP: (5.0, 0.95), MID: (6.0, 0.975), SAFE: (7.0, 0.99)}
    hard_cont = {"vanilla": (10.0, 1.0), CHEAP: (3.0, 0.96), MID: (4.0, 0.965), SAFE: (5.0, 0.98)}
    return {
        "isolated": _doc("isolated", {"easy": easy, "hard": hard_iso, "other": other}),
        "continuous": _doc("continuous", {"easy": easy, "hard": hard_cont, "other": other}),
    }


def test_the_rule_picks_the_cheapest_setting_at_the_target_on_every_source_and_mode() -> None:
    docs = _docs()
    pick = choose(docs, ["easy", "other"])
    # Pooled over easy and other: CHEAP 11/30, MID 13/30, SAFE 18/30; all reach 0.97.
    assert pick.name == CHEAP
    assert pick.cost_ratio == pytest.approx(11 / 30, abs=1e-4)
    assert pick.meets_target
    assert pick.min_fidelity == 0.98
    # With "hard" among the training sources only SAFE reaches 0.97 in both modes.
    assert choose(docs, ["easy", "hard"]).name == SAFE
    # A target nothing reaches: the setting of the highest lowest fidelity, flagged.
    out_of_reach = choose(docs, ["hard"], target=0.995)
    assert out_of_reach.name == SAFE
    assert not out_of_reach.meets_target


def test_ties_in_cost_go_to_the_more_faithful_setting() -> None:
    rows = {"vanilla": (10.0, 1.0), CHEAP: (5.0, 0.97), MID: (5.0, 0.99)}
    docs = {"isolated": _doc("isolated", {"a": rows, "b": rows})}
    assert choose(docs, ["a", "b"]).name == MID


def test_each_source_is_judged_on_a_setting_picked_without_it() -> None:
    docs = _docs()
    results = {r.source: r for r in holdout(docs)}
    assert set(results) == {"easy", "hard", "other"}
    # Picked on easy and other, the cheap setting fails the source it never saw.
    hard = results["hard"]
    assert hard.pick.name == CHEAP
    assert hard.held_out["isolated"].fidelity_visible == 0.95
    assert hard.held_out["continuous"].cost_ratio == 0.3
    assert not hard.passes
    # What could have held there: the cheapest setting at 0.97 on it alone, per mode.
    assert hard.best["isolated"] is not None and hard.best["isolated"].name == MID
    assert hard.best["continuous"] is not None and hard.best["continuous"].name == SAFE
    # Held out, easy and other are judged on the setting picked with hard: SAFE, which holds.
    assert results["easy"].pick.name == SAFE and results["easy"].passes
    assert results["other"].pick.name == SAFE and results["other"].passes


def test_the_report_and_json_say_which_sources_hold_and_what_ships() -> None:
    docs = _docs()
    text = format_holdout(docs)
    assert "held-out sources at >= 0.97 in every mode: 2/3" in text
    assert f"picked on every source: {SAFE}" in text
    assert "hard" in text and "NO" in text
    doc = holdout_json(docs)
    assert doc["passed"] == 2
    assert doc["default"]["name"] == SAFE
    hard = next(r for r in doc["held_out"] if r["source"] == "hard")
    assert hard["passes"] is False
    assert hard["modes"]["isolated"]["held_out"] == {
        "name": CHEAP,
        "cost_ratio": 0.5,
        "fidelity_visible": 0.95,
    }
    json.dumps(doc)  # JSON-ready


def test_bad_inputs_are_refused_with_a_clear_message() -> None:
    docs = _docs()
    with pytest.raises(ValueError, match="at least two sources"):
        holdout({"isolated": _doc("isolated", {"a": {"vanilla": (1.0, 1.0), MID: (1.0, 1.0)}})})
    with pytest.raises(ValueError, match="no source 'nowhere'"):
        choose(docs, ["nowhere"])
    with pytest.raises(ValueError, match="target"):
        holdout(docs, target=1.5)
    no_ours = {"isolated": _doc("isolated", {"a": {"vanilla": (1.0, 1.0)}})}
    with pytest.raises(ValueError, match="no cachepilot setting"):
        choose(no_ours, ["a"])


def test_the_cli_reads_sweeps_already_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _docs()
    paths = []
    for mode, doc in docs.items():
        path = tmp_path / f"{mode}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        paths.append(str(path))
    out = tmp_path / "holdout.json"
    code = main(["bench", "--holdout-from", *paths, "--target", "0.95", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "held-out sources at >= 0.95 in every mode: 3/3" in printed
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["holdout"]["target"] == 0.95
    # At 0.95 the cheap setting holds on hard in both modes.
    hard = next(r for r in written["holdout"]["held_out"] if r["source"] == "hard")
    assert hard["pick"]["name"] == CHEAP and hard["passes"]
    # The same mode twice is refused, and so is a file that is not a bench document.
    assert main(["bench", "--holdout-from", paths[0], paths[0]]) == 2
    assert "second isolated run" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]", encoding="utf-8")
    assert main(["bench", "--holdout-from", str(junk)]) == 2
    assert "not a bench --json document" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--holdout"], "add --sweep"),
        (["--sweep", "--holdout", "--mode", "isolated"], "leave out --mode"),
        (["--target", "0.9"], "add --holdout"),
        (["--holdout-from", "x.json", "--target", "2"], "within (0, 1]"),
    ],
)
def test_holdout_options_are_checked_before_anything_runs(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *argv]) == 2
    assert says in capsys.readouterr().err


TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
SMALL = (
    "claude_code_spotter/test/fixtures/transcripts/short.jsonl",
    "swe_agent/trajectories/demonstrations/ctf/misc/networking_1.traj",
)


def test_the_sweep_runs_both_modes_and_judges_each_source_held_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [TRACES / p for p in SMALL]
    if not all(p.exists() for p in paths):
        pytest.skip("the shared traces are not here")
    from cachepilot_bench import variants

    monkeypatch.setattr(variants, "SWEEP_GRID", {"fold_protect_tokens": (2_000, 4_000)})
    out = tmp_path / "h.json"
    argv = ["bench", *map(str, paths), "--sweep", "--holdout", "--strategy", "vanilla"]
    assert main([*argv, "--workers", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mode isolated" in text and "mode continuous" in text
    assert "held-out sources at >= 0.97 in every mode" in text
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert set(doc["modes"]) == {"isolated", "continuous"}
    assert set(doc["modes"]["isolated"]["strategies"]) == {
        "vanilla",
        "cachepilot",
        "cachepilot[fold_protect_tokens=4000]",
    }
    held = {r["source"] for r in doc["holdout"]["held_out"]}
    assert held == set(doc["modes"]["continuous"]["per_source"]) and len(held) == 2
    # The file reads back into the same table.
    assert main(["bench", "--holdout-from", str(out)]) == 0
    assert "picked on every source" in capsys.readouterr().out

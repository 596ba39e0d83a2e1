"""Settings chosen on some trace sources, judged on the one left out.

A default tuned on the traces it is then measured on says little about the next agent. Given
sweep runs (`cachepilot bench --sweep --json`) of both modes, this module applies one rule for
picking a setting — the cheapest cachepilot setting whose visible fidelity reaches `target` on
every training source in every mode, ties broken by fidelity — leaving each trace source out
in turn: the setting is picked on the other sources and measured on the held-out one. The same
rule applied to every source gives the setting to ship as the default.

Cost on a set of sources is the input cost of the setting over vanilla's on those sources
(pooled: what a user of all of them pays), averaged over the modes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachepilot_bench.frontier import Point, frontier, points
from cachepilot_bench.variants import VARIANT_BASE, is_variant

__all__ = [
    "DEFAULT_TARGET",
    "HeldOut",
    "Pick",
    "choose",
    "format_holdout",
    "holdout",
    "holdout_json",
    "population_docs",
]

DEFAULT_TARGET = 0.97
"""Visible fidelity every source must keep, in every mode."""
_BASELINE = "vanilla"


@dataclass(frozen=True, slots=True)
class Pick:
    """The setting the rule picks on a set of training sources."""

    name: str
    cost_ratio: float
    """Input cost × vanilla on the training sources (pooled), averaged over the modes."""
    min_fidelity: float
    """The lowest visible fidelity of the setting on any training source, in any mode."""
    meets_target: bool
    """Every training source reaches the target in every mode (else: the most faithful
    setting was picked, the target being out of reach on the training sources)."""


@dataclass(frozen=True, slots=True)
class HeldOut:
    """One source left out: what was picked without it, and how it fares on it."""

    source: str
    pick: Pick
    held_out: Mapping[str, Point]
    """Mode → the picked setting on the held-out source."""
    best: Mapping[str, Point | None]
    """Mode → the cheapest setting reaching the target on the held-out source alone (what a
    rule that could see it would have paid), or None when none does."""
    target: float

    @property
    def passes(self) -> bool:
        """The picked setting keeps the target on the held-out source in every mode."""
        return all(p.fidelity_visible >= self.target for p in self.held_out.values())


def _ours(name: str) -> bool:
    return name == VARIANT_BASE or is_variant(name)


def _settings(docs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """cachepilot settings present in every run, in the first run's order."""
    runs = list(docs.values())
    names = [n for n in runs[0]["strategies"] if _ours(n)]
    return [n for n in names if all(n in d["strategies"] for d in runs[1:])]


def _sources(docs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    found: set[str] | None = None
    for doc in docs.values():
        mine = set(doc.get("per_source", {}))
        found = mine if found is None else found & mine
    return sorted(found or ())


def _pooled_ratio(doc: Mapping[str, Any], name: str, sources: Sequence[str]) -> float:
    rows = doc["per_source"]
    ours = sum(rows[s][name]["input_cost_usd"] for s in sources)
    base = sum(rows[s][_BASELINE]["input_cost_usd"] for s in sources)
    return ours / base if base else 0.0


def choose(
    docs: Mapping[str, Mapping[str, Any]],
    sources: Sequence[str],
    target: float = DEFAULT_TARGET,
) -> Pick:
    """The rule: on `sources`, the cheapest setting whose visible fidelity is at least
    `target` on each of them in each mode (`docs`: mode → sweep document), ties broken by
    the lowest fidelity, then the name; when no setting reaches it, the setting of the
    highest lowest fidelity (then the cheapest).

    Raises:
        ValueError: with no run, no training source, no cachepilot setting, or a source or
            vanilla missing from a run.
    """
    if not docs:
        raise ValueError("no sweep run to choose from")
    if not sources:
        raise ValueError("no training source to choose on")
    names = _settings(docs)
    if not names:
        raise ValueError("the runs have no cachepilot setting in common")
    for mode, doc in docs.items():
        for source in sources:
            rows = doc.get("per_source", {}).get(source)
            if rows is None:
                raise ValueError(f"the {mode} run has no source {source!r}")
            if not rows.get(_BASELINE, {}).get("input_cost_usd"):
                raise ValueError(f"the {mode} run has no vanilla cost on {source!r}")
    picks: list[Pick] = []
    for name in names:
        cost = sum(_pooled_ratio(d, name, sources) for d in docs.values()) / len(docs)
        lowest = min(
            float(d["per_source"][s][name]["fidelity_visible"])
            for d in docs.values()
            for s in sources
        )
        picks.append(Pick(name, round(cost, 4), lowest, lowest >= target))
    able = [p for p in picks if p.meets_target]
    if able:
        return min(able, key=lambda p: (p.cost_ratio, -p.min_fidelity, p.name))
    return max(picks, key=lambda p: (p.min_fidelity, -p.cost_ratio, p.name))


def holdout(docs: Mapping[str, Mapping[str, Any]], target: float = DEFAULT_TARGET) -> list[HeldOut]:
    """Leave each source out in turn: pick on the others (`choose`), measure on it.

    Args:
        docs: mode → `bench --json` document of a sweep in that mode (the same settings and
            sources in each; settings missing from a run are ignored).
        target: the visible fidelity every source must keep.

    Raises:
        ValueError: as `choose`, or with fewer than two sources.
    """
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target must be within (0, 1], got {target}")
    sources = _sources(docs)
    if len(sources) < 2:
        raise ValueError("leaving a source out needs at least two sources in every run")
    out: list[HeldOut] = []
    for left in sources:
        pick = choose(docs, [s for s in sources if s != left], target)
        held: dict[str, Point] = {}
        best: dict[str, Point | None] = {}
        for mode, doc in docs.items():
            found = points(doc, left)
            held[mode] = next(p for p in found if p.name == pick.name)
            able = [p for p in found if p.ours and p.fidelity_visible >= target]
            best[mode] = min(able, key=lambda p: (p.cost_ratio, -p.fidelity_visible), default=None)
        out.append(HeldOut(left, pick, held, best, target))
    return out


def format_holdout(
    docs: Mapping[str, Mapping[str, Any]], target: float = DEFAULT_TARGET, *, unit: str = "source"
) -> str:
    """The held-out table (one row per source and mode), the frontier of each held-out
    source, and the setting the rule picks on every source; when every run has populations
    (`per_group`), the same leaving one population out (`population_docs`).

    `unit` names what is left out in the text (`source`, `population`)."""
    results = holdout(docs, target)
    modes = list(docs)
    width = 20 if unit == "source" else 40
    lines = [
        f"leave one {unit} out: the cheapest setting with visible fidelity >= {target:.2f} on "
        f"every other {unit} in every mode, measured on the {unit} left out",
        f"{'held out':<{width}} {'mode':<11} {'× van':>6} {'fid.vis':>7}  {'ok':<3} "
        f"{'best on it alone':>16}  setting (train cost, train min fid.)",
    ]
    for result in results:
        for mode in modes:
            point = result.held_out[mode]
            best = result.best[mode]
            ok = "yes" if point.fidelity_visible >= target else "NO"
            alone = f"{best.cost_ratio:.3f}" if best is not None else "none"
            pick = result.pick
            note = "" if pick.meets_target else ", target out of reach"
            lines.append(
                f"{result.source[:width]:<{width}} {mode:<11} {point.cost_ratio:>6.3f} "
                f"{point.fidelity_visible:>7.3f}  {ok:<3} {alone:>16}  "
                f"{pick.name} ({pick.cost_ratio:.3f}×, {pick.min_fidelity:.3f}{note})"
            )
    passed = sum(1 for r in results if r.passes)
    lines.append(f"held-out {unit}s at >= {target:.2f} in every mode: {passed}/{len(results)}")
    lines.append(f"held-out frontier (input × vanilla, visible fidelity), per {unit} and mode:")
    for result in results:
        for mode in modes:
            line = frontier(points(docs[mode], result.source))
            cells = "  ".join(f"{p.cost_ratio:.3f}@{p.fidelity_visible:.3f}" for p in line)
            lines.append(f"  {result.source[:width]:<{width}} {mode:<11} {cells}")
    chosen = choose(docs, _sources(docs), target)
    lines.append(
        f"picked on every {unit}: {chosen.name} ({chosen.cost_ratio:.3f}× vanilla, lowest "
        f"visible fidelity {chosen.min_fidelity:.3f})"
    )
    text = "\n".join(lines) + "\n"
    groups = population_docs(docs) if unit == "source" else None
    if groups is not None and len(_sources(groups)) >= 2:
        text += "\n" + format_holdout(groups, target, unit="population")
    return text


def population_docs(
    docs: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]] | None:
    """The runs with their populations (`per_group`, "source/group" rows) as the units the
    rule leaves out, so picking on populations is the same rule as on sources and the
    setting it picks on all of them maximizes the worst population when none reaches the
    target; None when a run has no `per_group`."""
    if not docs or not all(isinstance(d.get("per_group"), Mapping) for d in docs.values()):
        return None
    return {mode: {**doc, "per_source": doc["per_group"]} for mode, doc in docs.items()}


def holdout_json(
    docs: Mapping[str, Mapping[str, Any]], target: float = DEFAULT_TARGET
) -> dict[str, Any]:
    """The held-out results as a JSON-ready dict (with `populations`: the same leaving one
    population out, when every run has them)."""
    out = _holdout_json(docs, target)
    groups = population_docs(docs)
    if groups is not None and len(_sources(groups)) >= 2:
        out["populations"] = _holdout_json(groups, target)
    return out


def _holdout_json(docs: Mapping[str, Mapping[str, Any]], target: float) -> dict[str, Any]:
    results = holdout(docs, target)
    chosen = choose(docs, _sources(docs), target)

    def point(p: Point | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {"name": p.name, "cost_ratio": p.cost_ratio, "fidelity_visible": p.fidelity_visible}

    return {
        "target": target,
        "rule": "cheapest setting with visible fidelity >= target on every training source "
        "in every mode (pooled input cost × vanilla, mean over modes), ties by fidelity",
        "held_out": [
            {
                "source": r.source,
                "pick": {
                    "name": r.pick.name,
                    "train_cost_ratio": r.pick.cost_ratio,
                    "train_min_fidelity": r.pick.min_fidelity,
                    "meets_target": r.pick.meets_target,
                },
                "modes": {
                    mode: {"held_out": point(r.held_out[mode]), "best_alone": point(r.best[mode])}
                    for mode in r.held_out
                },
                "passes": r.passes,
            }
            for r in results
        ],
        "passed": sum(1 for r in results if r.passes),
        "default": {
            "name": chosen.name,
            "cost_ratio": chosen.cost_ratio,
            "min_fidelity": chosen.min_fidelity,
            "meets_target": chosen.meets_target,
        },
    }

"""Cost against visible fidelity: cachepilot's settings as a frontier, the peers as points.

`cachepilot bench --sweep` replays the traces through every setting of `variants.SWEEP_GRID`
and every peer; this module reads the `--json` document of such a run and answers, overall
and per trace source:

* the frontier: the cachepilot settings no other setting beats on both input cost and
  visible fidelity;
* dominance: for each peer, the cheapest cachepilot setting whose visible fidelity is at
  least the peer's, and whether it is cheaper (or, when no setting reaches the peer's
  fidelity, how far the best one falls short).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachepilot_bench.variants import VARIANT_BASE, is_variant

__all__ = [
    "ALL_SOURCES",
    "Dominance",
    "Point",
    "dominance",
    "format_frontier",
    "frontier",
    "points",
    "sources",
    "write_frontier_plot",
]

ALL_SOURCES = "all"
"""The pseudo-source of the whole run."""
_BASELINE = "vanilla"


@dataclass(frozen=True, slots=True)
class Point:
    """One strategy on one source."""

    name: str
    cost_ratio: float
    """Input cost as a ratio to vanilla's on the same sessions."""
    fidelity_visible: float
    fidelity_recoverable: float
    ours: bool
    """A cachepilot setting (the default or a `cachepilot[...]` variant)."""


@dataclass(frozen=True, slots=True)
class Dominance:
    """How cachepilot's settings compare with one peer on one source."""

    peer: Point
    best: Point | None
    """The cheapest cachepilot setting with visible fidelity ≥ the peer's, or None."""
    closest: Point | None
    """When `best` is None: the cachepilot setting of the highest visible fidelity."""

    @property
    def dominated(self) -> bool:
        """A cachepilot setting is at least as faithful and strictly cheaper."""
        return self.best is not None and self.best.cost_ratio < self.peer.cost_ratio

    def verdict(self) -> str:
        """One line a person reads."""
        peer = self.peer
        head = f"{peer.name} {peer.cost_ratio:.3f}× at {peer.fidelity_visible:.3f}: "
        if self.best is not None and self.dominated:
            return (
                f"{head}beaten by {self.best.name}, {self.best.cost_ratio:.3f}× at "
                f"{self.best.fidelity_visible:.3f}"
            )
        if self.best is not None:
            return (
                f"{head}not beaten: the cheapest setting as faithful, {self.best.name}, "
                f"costs {self.best.cost_ratio:.3f}×"
            )
        if self.closest is None:
            return f"{peer.name}: no cachepilot setting in this run"
        return (
            f"{head}out of reach: the most faithful setting, {self.closest.name}, reaches "
            f"{self.closest.fidelity_visible:.3f} at {self.closest.cost_ratio:.3f}×"
        )


def _is_ours(name: str) -> bool:
    return name == VARIANT_BASE or is_variant(name)


def points(doc: Mapping[str, Any], source: str = ALL_SOURCES) -> list[Point]:
    """Every strategy of a `bench --json` document on `source` (vanilla left out).

    Raises:
        ValueError: when the run has no vanilla (ratios need it) or the source is unknown.
    """
    rows: Mapping[str, Any]
    if source == ALL_SOURCES:
        rows = doc["strategies"]
    else:
        if source not in doc.get("per_source", {}):
            raise ValueError(f"no source {source!r} in this run")
        rows = doc["per_source"][source]
    base = rows.get(_BASELINE)
    if not base or not base.get("input_cost_usd"):
        raise ValueError("the run has no vanilla input cost to take ratios against")
    out: list[Point] = []
    for name, row in rows.items():
        if name == _BASELINE:
            continue
        out.append(
            Point(
                name,
                round(row["input_cost_usd"] / base["input_cost_usd"], 4),
                float(row["fidelity_visible"]),
                float(row["fidelity_recoverable"]),
                _is_ours(name),
            )
        )
    return out


def frontier(found: Sequence[Point]) -> list[Point]:
    """cachepilot's settings that no other setting beats on cost and visible fidelity, the
    cheapest first."""
    ours = sorted((p for p in found if p.ours), key=lambda p: (p.cost_ratio, -p.fidelity_visible))
    out: list[Point] = []
    for point in ours:
        if not out or point.fidelity_visible > out[-1].fidelity_visible:
            out.append(point)
    return out


def dominance(found: Sequence[Point]) -> list[Dominance]:
    """For each peer (not a cachepilot setting), the cachepilot setting that answers it."""
    ours = [p for p in found if p.ours]
    out: list[Dominance] = []
    for peer in (p for p in found if not p.ours):
        able = [p for p in ours if p.fidelity_visible >= peer.fidelity_visible]
        best = min(able, key=lambda p: (p.cost_ratio, -p.fidelity_visible), default=None)
        closest = (
            None
            if best is not None
            else max(ours, key=lambda p: (p.fidelity_visible, -p.cost_ratio), default=None)
        )
        out.append(Dominance(peer, best, closest))
    return out


def sources(doc: Mapping[str, Any]) -> list[str]:
    """`all`, then the run's trace sources."""
    return [ALL_SOURCES, *sorted(doc.get("per_source", {}))]


def format_frontier(doc: Mapping[str, Any]) -> str:
    """The frontier and the dominance lines of every source, as plain text."""
    lines: list[str] = []
    for source in sources(doc):
        found = points(doc, source)
        lines.append(f"{source}:")
        default = next((p for p in found if p.name == VARIANT_BASE), None)
        if default is not None:
            lines.append(
                f"  default {default.cost_ratio:.3f}× at visible {default.fidelity_visible:.3f}"
            )
        lines.append("  frontier (input × vanilla, visible fidelity):")
        for point in frontier(found):
            lines.append(f"    {point.cost_ratio:.3f}  {point.fidelity_visible:.3f}  {point.name}")
        checks = dominance(found)
        if checks:
            won = sum(1 for d in checks if d.dominated)
            lines.append(
                f"  peers answered by a cheaper setting at ≥ their fidelity: {won}/{len(checks)}"
            )
            lines.extend(f"    {d.verdict()}" for d in checks)
    return "\n".join(lines) + "\n"


def write_frontier_plot(doc: Mapping[str, Any], path: str | Path, *, title: str = "") -> Path:
    """One panel per source (and `all`): cachepilot's settings as dots, their frontier as a
    line, the default as a star, each peer as a labelled point. x: visible fidelity, y:
    input cost × vanilla.

    Raises:
        ValueError: when matplotlib is not installed (names the extra to install).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValueError("--frontier needs matplotlib: pip install 'cachepilot[plot]'") from exc
    from cachepilot_bench.plot import series_styles

    panels = sources(doc)
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.4 * rows), squeeze=False)
    peers = sorted({p.name for s in panels for p in points(doc, s) if not p.ours})
    styles = series_styles(peers)
    for index, source in enumerate(panels):
        axis = axes[index // columns][index % columns]
        found = points(doc, source)
        ours = [p for p in found if p.ours]
        axis.scatter(
            [p.fidelity_visible for p in ours],
            [p.cost_ratio for p in ours],
            s=14,
            color="#C00000",
            alpha=0.35,
            label="cachepilot settings",
            zorder=3,
        )
        line = frontier(found)
        axis.plot(
            [p.fidelity_visible for p in line],
            [p.cost_ratio for p in line],
            color="#C00000",
            linewidth=1.8,
            marker="o",
            markersize=4,
            label="cachepilot frontier",
            zorder=4,
        )
        default = next((p for p in ours if p.name == VARIANT_BASE), None)
        if default is not None:
            axis.scatter(
                [default.fidelity_visible],
                [default.cost_ratio],
                marker="*",
                s=160,
                color="#C00000",
                edgecolor="black",
                label="cachepilot (default)",
                zorder=6,
            )
        for peer in (p for p in found if not p.ours):
            style = styles[peer.name]
            axis.scatter(
                [peer.fidelity_visible],
                [peer.cost_ratio],
                marker=style.marker or "o",
                s=55,
                color=style.color,
                edgecolor="black",
                linewidth=0.5,
                label=peer.name,
                zorder=5,
            )
        axis.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        axis.set_title(source, fontsize=10)
        axis.set_xlabel("visible fidelity")
        axis.set_ylabel("input cost × vanilla")
        axis.grid(alpha=0.3)
    for extra in range(len(panels), rows * columns):
        axes[extra // columns][extra % columns].axis("off")
    seen: dict[str, Any] = {}
    for axis_row in axes:
        for axis in axis_row:
            for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=4, fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0.0, 0.06, 1.0, 0.97))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out

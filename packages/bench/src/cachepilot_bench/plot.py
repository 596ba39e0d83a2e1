"""PNG chart of a benchmark run (matplotlib, an optional extra: `cachepilot[plot]`).

Every series gets its own colour, line style and marker (`series_styles`), so strategies
whose lines coincide stay apart: markers are staggered along each line and `cachepilot` is
drawn last, thick and slightly transparent, so a line under it still shows its markers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from cachepilot_bench.harness import SessionResult

__all__ = ["SeriesStyle", "series_styles", "write_plot"]

OURS = "cachepilot"
BASELINE = "vanilla"
# Colour-blind-safe first (Okabe-Ito), then Tableau's darker tones: 16 colours that stay
# apart; `cachepilot` and `vanilla` have their own and never appear in this list.
_COLOURS = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#8C564B",
    "#9467BD",
    "#17BECF",
    "#BCBD22",
    "#7F7F7F",
    "#1F77B4",
    "#2CA02C",
    "#FF7F0E",
    "#E377C2",
    "#F0E442",
)
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">", "h", "p", "d", "*", "8", "H", "1")
_OURS_COLOUR = "#C00000"
_BASELINE_COLOUR = "#000000"


@dataclass(frozen=True, slots=True)
class SeriesStyle:
    """How one strategy is drawn."""

    color: str
    linestyle: str
    marker: str
    linewidth: float
    zorder: float
    alpha: float = 1.0


def series_styles(names: Sequence[str]) -> dict[str, SeriesStyle]:
    """A distinct style per strategy: no two share colour and marker (up to 16 others).

    `vanilla` is a black dashed line, `cachepilot` a thick dark red line on top of all,
    its ablations (`cachepilot-…`) dotted and the peers solid, each with its own colour and
    marker.
    """
    styles: dict[str, SeriesStyle] = {}
    others = [n for n in dict.fromkeys(names) if n not in (OURS, BASELINE)]
    for index, name in enumerate(others):
        ablation = name.startswith(OURS + "-")
        styles[name] = SeriesStyle(
            color=_COLOURS[index % len(_COLOURS)],
            linestyle=":" if ablation else "-",
            marker=_MARKERS[index % len(_MARKERS)],
            linewidth=1.6 if ablation else 1.3,
            zorder=2.0,
        )
    if BASELINE in names:
        styles[BASELINE] = SeriesStyle(_BASELINE_COLOUR, "--", "", 1.6, 2.5)
    if OURS in names:
        styles[OURS] = SeriesStyle(_OURS_COLOUR, "-", "", 3.0, 10.0, alpha=0.8)
    return styles


def write_plot(results: Sequence[SessionResult], path: str | Path, *, title: str = "") -> Path:
    """Cumulative cost and per-call context tokens per strategy, sessions laid end to end.

    Raises:
        ValueError: when matplotlib is not installed (names the extra to install).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValueError("--plot needs matplotlib: pip install 'cachepilot[plot]'") from exc
    names: list[str] = []
    for r in results:
        if r.strategy not in names:
            names.append(r.strategy)
    styles = series_styles(names)
    fig, (ax_cost, ax_ctx) = plt.subplots(2, 1, figsize=(13, 8.5), sharex=True)
    marked = [n for n in names if styles[n].marker]
    # `cachepilot` last, so it is drawn over everything whatever the legend order.
    for name in sorted(names, key=lambda n: styles[n].zorder):
        calls = [c for r in results if r.strategy == name for c in r.calls]
        per_call: list[float] = []
        context: list[int] = []
        for c in calls:
            if c.kind == "call":
                per_call.append(c.cost_usd)
                context.append(c.usage.input_tokens)
            elif per_call:
                per_call[-1] += c.cost_usd  # extra calls and fetches billed to their call
            else:
                per_call.append(c.cost_usd)
                context.append(0)
        style = styles[name]
        # About 12 markers a line, staggered between series so coinciding lines show all.
        step = max(1, len(per_call) // 12)
        offset = (marked.index(name) * step // max(1, len(marked))) if style.marker else 0
        for axis, values in ((ax_cost, list(accumulate(per_call))), (ax_ctx, context)):
            axis.plot(
                values,
                label=name,
                color=style.color,
                linestyle=style.linestyle,
                linewidth=style.linewidth,
                marker=style.marker or None,
                markersize=5,
                markevery=(offset, step),
                zorder=style.zorder,
                alpha=style.alpha,
            )
    ax_cost.set_ylabel("cumulative cost (USD)")
    ax_ctx.set_ylabel("prompt tokens per call")
    ax_ctx.set_xlabel("model call (sessions laid end to end)")
    handles, labels = ax_cost.get_legend_handles_labels()
    by_label = dict(zip(labels, handles, strict=True))
    ax_cost.legend(
        [by_label[n] for n in names],  # legend in the run's order
        names,
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
    )
    ax_cost.grid(alpha=0.3)
    ax_ctx.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

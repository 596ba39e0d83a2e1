"""PNG chart of a benchmark run (matplotlib, an optional extra: `cachepilot[plot]`)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path

from cachepilot_bench.harness import SessionResult

__all__ = ["write_plot"]


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
    fig, (ax_cost, ax_ctx) = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    for name in names:
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
        style = "-" if name != "vanilla" else "--"
        ax_cost.plot(list(accumulate(per_call)), style, label=name, linewidth=1.4)
        ax_ctx.plot(context, style, label=name, linewidth=1.0)
    ax_cost.set_ylabel("cumulative cost (USD)")
    ax_ctx.set_ylabel("prompt tokens per call")
    ax_ctx.set_xlabel("model call (sessions laid end to end)")
    ax_cost.legend(fontsize=8, ncol=2)
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

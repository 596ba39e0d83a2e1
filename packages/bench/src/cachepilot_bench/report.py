"""Benchmark results: the JSON contract of DESIGN §8 and a readable table."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from cachepilot_bench.harness import BenchConfig, SessionResult

__all__ = ["format_table", "strategy_totals", "summarize"]


def strategy_totals(results: Iterable[SessionResult]) -> dict[str, Any]:
    """Totals of one strategy over its session results (keys of DESIGN §8 plus extras)."""
    results = list(results)
    calls = [c for r in results for c in r.calls]
    main = [c for c in calls if c.kind == "call"]
    input_tokens = sum(c.usage.input_tokens for c in calls)
    cached = sum(c.usage.cached_tokens for c in calls)
    written = sum(c.usage.cache_write_tokens for c in calls)
    needed = sum(c.facts_needed for c in main)
    visible = sum(c.facts_visible for c in main)
    recoverable = sum(c.facts_recoverable for c in main)
    can_recall = any(r.can_recall for r in results)
    round_trips = sum(1 for c in calls if c.kind == "round_trip")
    contexts = [c.usage.input_tokens for c in main]
    breaks = sum(1 for r in results for c in r.calls if c.kind == "call" and not c.prefix_extends)
    return {
        "cost_usd": round(sum(c.cost_usd for c in calls), 6),
        "input_cost_usd": round(sum(c.input_cost_usd for c in calls), 6),
        "input_tokens": input_tokens,
        "cached_tokens": cached,
        "cache_write_tokens": written,
        "uncached_tokens": input_tokens - cached - written,
        "output_tokens": sum(c.usage.output_tokens for c in calls),
        "hit_rate": round(cached / input_tokens, 4) if input_tokens else 0.0,
        "peak_context_tokens": max(contexts, default=0),
        "mean_context_tokens": round(statistics.fmean(contexts)) if contexts else 0,
        "prefix_breaks": breaks,
        "fidelity_visible": round(visible / needed, 4) if needed else 1.0,
        "fidelity_recoverable": round(recoverable / needed, 4) if needed else 1.0,
        "recalls": round_trips if can_recall else 0,
        "overhead_ms_per_call_p50": round(
            statistics.median([c.overhead_ms for c in main]) if main else 0.0, 4
        ),
        # extras
        "calls": len(main),
        "extra_calls": sum(1 for c in calls if c.kind == "extra"),
        "refetches": 0 if can_recall else round_trips,
        "maintenance_calls": sum(1 for c in main if c.maintenance),
        "facts_needed": needed,
        "errors": [f"{r.session_id}: {r.error}" for r in results if r.error],
        "stats": _sum_stats(results),
    }


def _sum_stats(results: Sequence[SessionResult]) -> dict[str, float]:
    total: dict[str, float] = {}
    for r in results:
        for key, value in r.stats.items():
            total[key] = total.get(key, 0) + value
    return {k: round(v, 3) for k, v in sorted(total.items())}


def summarize(
    results: Sequence[SessionResult],
    config: BenchConfig,
    *,
    traces: int,
    wall_seconds: float | None = None,
) -> dict[str, Any]:
    """The `bench --json` document."""
    names: list[str] = []
    for r in results:
        if r.strategy not in names:
            names.append(r.strategy)
    strategies = {n: strategy_totals(r for r in results if r.strategy == n) for n in names}
    base = strategies.get("vanilla")
    if base:
        for totals in strategies.values():
            totals["cost_ratio_to_vanilla"] = _ratio(totals["cost_usd"], base["cost_usd"])
            totals["input_cost_ratio_to_vanilla"] = _ratio(
                totals["input_cost_usd"], base["input_cost_usd"]
            )
    sources: dict[str, dict[str, Any]] = {}
    for source in sorted({r.source for r in results}):
        sources[source] = {
            n: _source_row(r for r in results if r.source == source and r.strategy == n)
            for n in names
        }
    first = names[0] if names else None
    calls = sum(
        len([c for c in r.calls if c.kind == "call"]) for r in results if r.strategy == first
    )
    doc: dict[str, Any] = {
        "provider": config.provider,
        "mode": config.mode,
        "traces": traces,
        "sessions": len({r.session_id for r in results}),
        "calls": calls,
        "encoding": config.encoding,
        "client_marks": config.client_marks,
        "strategies": strategies,
        "per_source": sources,
    }
    if wall_seconds is not None:
        doc["wall_seconds"] = round(wall_seconds, 2)
    return doc


def _source_row(results: Iterable[SessionResult]) -> dict[str, Any]:
    totals = strategy_totals(results)
    keys = (
        "input_cost_usd",
        "cost_usd",
        "hit_rate",
        "fidelity_visible",
        "fidelity_recoverable",
        "prefix_breaks",
        "calls",
        "stats",
    )
    return {k: totals[k] for k in keys}


def _ratio(value: float, base: float) -> float:
    return round(value / base, 4) if base else 0.0


def format_table(doc: dict[str, Any]) -> str:
    """A fixed-width table of the strategies, ratios to vanilla beside the dollar figures."""
    header = (
        f"{'strategy':<26} {'input $':>10} {'×van':>6} {'total $':>10} {'hit%':>6} "
        f"{'peak ctx':>9} {'mean ctx':>9} {'breaks':>6} {'fid.vis':>7} {'fid.rec':>7} "
        f"{'extra':>5} {'fetch':>5} {'ms/call':>8}"
    )
    lines = [
        f"provider {doc['provider']} · mode {doc['mode']} · {doc['traces']} traces · "
        f"{doc['sessions']} sessions · {doc['calls']} calls"
        + (" · agent's own cache marks: none" if doc.get("client_marks") == "none" else ""),
        header,
        "-" * len(header),
    ]
    for name, t in doc["strategies"].items():
        ratio = t.get("input_cost_ratio_to_vanilla")
        lines.append(
            f"{name:<26} {t['input_cost_usd']:>10.4f} "
            f"{(f'{ratio:.3f}' if ratio is not None else '-'):>6} {t['cost_usd']:>10.4f} "
            f"{t['hit_rate'] * 100:>5.1f}% {t['peak_context_tokens']:>9,} "
            f"{t['mean_context_tokens']:>9,} {t['prefix_breaks']:>6} "
            f"{t['fidelity_visible']:>7.3f} {t['fidelity_recoverable']:>7.3f} "
            f"{t['extra_calls']:>5} {t['recalls'] + t['refetches']:>5} "
            f"{t['overhead_ms_per_call_p50']:>8.3f}"
        )
        if t["errors"]:
            lines.append(f"  ! {len(t['errors'])} session(s) failed, first: {t['errors'][0]}")
    if "wall_seconds" in doc:
        lines.append(f"wall time {doc['wall_seconds']:.1f} s")
    return "\n".join(lines)

"""The `cachepilot audit` text report."""

from __future__ import annotations

from typing import Any

from cachepilot.audit.run import AuditReport, CallAudit
from cachepilot.diagnose.breaks import Explanation

__all__ = ["format_report"]

_CAUSE_LABELS = {
    "volatile_value": "volatile value",
    "tool_change": "tool set/order change",
    "system_change": "system prompt change",
    "history_rewrite": "history rewrite",
    "model_change": "model change",
    "parameter_change": "parameter change",
    "ttl_expiry": "TTL expiry",
    "below_minimum": "below minimum length",
    "provider_miss": "provider-side miss",
    "provider_edit": "provider context edit",
}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:5.1f}%"


def _row(c: CallAudit) -> str:
    u = c.simulated
    rec = c.call.usage
    recorded = "" if rec is None else f"  {rec.input_tokens:>9,} {rec.cached_tokens:>9,}"
    mark = "✗" if c.is_break else " "
    model = (c.call.request.model or "-")[:18]
    return (
        f"{mark}{c.ordinal:>4} {c.call.api:<9} {model:<18} {u.input_tokens:>9,} "
        f"{u.cached_tokens:>9,} {u.cache_write_tokens:>8,} {u.output_tokens:>7,} "
        f"{_pct(u.hit_rate):>6} {c.cost.total_usd:>9.5f}{recorded}"
    )


def _explain_lines(exp: Explanation) -> list[str]:
    label = _CAUSE_LABELS.get(exp.cause, exp.cause)
    detail = (
        f" ({exp.detail})"
        if exp.detail and exp.cause not in ("provider_miss", "provider_edit")
        else ""
    )
    out = [f"      break: {label}{detail}: {exp.summary}"]
    out.extend("      " + line for line in exp.describe().splitlines()[1:])
    return out


def _totals_lines(t: dict[str, Any], rate: float) -> list[str]:
    lines = [
        f"calls {t['calls']:,} | prompt {t['input_tokens']:,} | cached {t['cached_tokens']:,} "
        f"| written {t['cache_write_tokens']:,} | output {t['output_tokens']:,}",
        f"hit rate {_pct(t['hit_rate']).strip()} (after each thread's first call "
        f"{_pct(t['warm_hit_rate']).strip()}) | cost ${t['cost_usd']:.5f} "
        f"(input ${t['input_cost_usd']:.5f})",
    ]
    if t["recorded"] is not None:
        rec = t["recorded"]
        lines.append(
            f"recorded by the provider ({t['recorded_calls']} calls): prompt "
            f"{rec['input_tokens']:,} | cached {rec['cached_tokens']:,} | hit rate "
            f"{_pct(t['recorded_hit_rate']).strip()}"
        )
    lines.append(
        f"breaks {t['breaks']} (prefix breaks {t['prefix_breaks']}), "
        f"{t['remissed_tokens']:,} tokens re-missed; avoidable cost ${t['avoidable_usd']:.5f} "
        f"(re-missed tokens at ${rate:.3f}/M over a hit)"
    )
    if t.get("uncached_calls"):
        lines.append(
            f"{t['uncached_calls']} Anthropic call(s) carry no cache_control (nor a top-level "
            "one for automatic caching): nothing of them is cached"
        )
    for cause, slot in t["by_cause"].items():
        lines.append(
            f"  {_CAUSE_LABELS.get(cause, cause):<24} {slot['breaks']:>4} break(s) "
            f"{slot['remissed_tokens']:>10,} tokens  avoidable ${slot['avoidable_usd']:.5f}"
        )
    return lines


def format_report(report: AuditReport, *, calls: bool = True) -> str:
    """The human-readable audit: per-thread call tables with every break explained, totals."""
    totals = report.totals
    rate = report.avoidable_rate_per_m
    out = [
        f"cachepilot audit: {report.path or '(calls)'}: {len(report.calls)} request(s), "
        f"{len(report.threads)} thread(s), provider {report.profile.name}"
        + (
            f", hidden prefix {report.hidden_prefix_tokens:,} tokens"
            if report.hidden_prefix_tokens
            else ""
        ),
    ]
    head = (
        f" {'call':>4} {'api':<9} {'model':<18} {'prompt':>9} {'cached':>9} {'written':>8} "
        f"{'output':>7} {'hit':>6} {'cost $':>9}"
    )
    for thread in report.threads:
        out.append("")
        out.append(f"thread {thread.id} ({thread.key}, {len(thread.calls)} call(s))")
        if calls:
            recorded = any(c.call.usage is not None for c in thread.calls)
            out.append(head + (f"  {'rec prompt':>9} {'rec cached':>9}" if recorded else ""))
            for c in thread.calls:
                out.append(_row(c))
                if c.is_break and c.explanation is not None:
                    out.extend(_explain_lines(c.explanation))
        else:
            for c in thread.calls:
                if c.is_break and c.explanation is not None:
                    out.append(f"  call {c.ordinal} ({c.call.source}):")
                    out.extend(_explain_lines(c.explanation))
    out.append("")
    out.append("totals")
    out.extend("  " + line for line in _totals_lines(totals, rate))
    if report.notes:
        out.append("")
        out.append(f"not read ({len(report.notes)})")
        out.extend(f"  {note}" for note in report.notes)
    return "\n".join(out)

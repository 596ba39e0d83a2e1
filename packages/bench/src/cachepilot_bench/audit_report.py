"""The audit's totals (per action kind, per source, per population) as JSON and a table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cachepilot_bench.audit import AuditedAction, SessionAudit
from cachepilot_bench.audit_pilot import ACTION_KINDS
from cachepilot_bench.harness import BenchConfig
from cachepilot_bench.populations import group_rows

__all__ = ["audit_doc", "format_audit"]


def _totals(actions: Iterable[AuditedAction]) -> dict[str, Any]:
    items = list(actions)
    judged = [a for a in items if a.action.predicted_usd is not None]
    shapes: dict[str, int] = {}
    for a in items:
        for shape, n in a.lost_shapes.items():
            shapes[shape] = shapes.get(shape, 0) + n
    return {
        "actions": len(items),
        "forced": sum(1 for a in items if a.action.forced),
        "predicted_usd": round(sum(a.action.predicted_usd or 0.0 for a in judged), 6),
        "realized_usd": round(sum(a.marginal_usd for a in items), 6),
        "realized_judged_usd": round(sum(a.marginal_usd for a in judged), 6),
        "paid": sum(1 for a in items if a.marginal_usd > 0),
        "predicted_pays_realized_not": sum(
            1 for a in judged if (a.action.predicted_usd or 0.0) > 0 and a.marginal_usd <= 0
        ),
        "facts_lost": sum(a.facts_lost for a in items),
        "lost_shapes": dict(sorted(shapes.items(), key=lambda kv: -kv[1])),
    }


def _by_kind(actions: Sequence[AuditedAction]) -> dict[str, dict[str, Any]]:
    return {
        kind: _totals(a for a in actions if a.action.kind == kind)
        for kind in ACTION_KINDS
        if any(a.action.kind == kind for a in actions)
    }


def audit_doc(
    audits: Sequence[SessionAudit],
    config: BenchConfig,
    *,
    strategy: str,
    max_actions: int,
    wall_seconds: float | None = None,
) -> dict[str, Any]:
    """The audit of one mode as a JSON-ready dict."""
    actions = [a for s in audits for a in s.actions]
    groups = {s.session_id: s.group for s in audits}
    ours = [s.actual for s in audits]
    base = [s.vanilla for s in audits]
    base_cost = sum(c.input_cost_usd for r in base for c in r.calls)
    our_cost = sum(c.input_cost_usd for r in ours for c in r.calls)
    sources = sorted({s.source for s in audits})
    pops = sorted({(s.source, s.group) for s in audits})
    rows = group_rows(ours, base, groups)
    taken: dict[str, int] = {}
    for s in audits:
        for kind, n in s.taken_kinds.items():
            taken[kind] = taken.get(kind, 0) + n
    doc: dict[str, Any] = {
        "provider": config.provider,
        "mode": config.mode,
        "strategy": strategy,
        "sessions": len(audits),
        "replays": sum(s.replays for s in audits),
        "max_actions_per_session": max_actions,
        "actions_taken": sum(s.taken for s in audits),
        "actions_audited": len(actions),
        "actions_taken_by_kind": {k: taken[k] for k in ACTION_KINDS if k in taken},
        "input_cost_usd": round(our_cost, 6),
        "vanilla_input_cost_usd": round(base_cost, 6),
        "cost_ratio": round(our_cost / base_cost, 4) if base_cost else 0.0,
        "by_kind": _by_kind(actions),
        "per_source": {
            source: _by_kind([a for a in actions if a.source == source]) for source in sources
        },
        "per_group": {
            f"{source}/{group}": _by_kind(
                [a for a in actions if a.source == source and a.group == group]
            )
            for source, group in pops
        },
        "groups": [
            {
                "source": r.source,
                "group": r.group,
                "sessions": r.sessions,
                "cost_ratio": r.cost_ratio,
                "fidelity_visible": r.fidelity_visible,
                "fidelity_interval": [r.low, r.high],
                "facts_needed": r.facts_needed,
            }
            for r in rows
        ],
        "errors": [f"{s.session_id}: {s.actual.error}" for s in audits if s.actual.error],
        "actions": [
            {
                "session": a.session_id,
                "source": a.source,
                "group": a.group,
                "kind": a.action.kind,
                "call": a.action.call,
                "reason": a.action.reason,
                "edits": a.action.edits,
                "removed_tokens": a.action.removed_tokens,
                "remiss_tokens": a.action.remiss_tokens,
                "predicted_usd": (
                    None if a.action.predicted_usd is None else round(a.action.predicted_usd, 6)
                ),
                "realized_usd": round(a.realized_usd, 6),
                "marginal_usd": round(a.marginal_usd, 6),
                "facts_lost": a.facts_lost,
                "lost_shapes": a.lost_shapes,
            }
            for a in actions
        ],
    }
    if wall_seconds is not None:
        doc["wall_seconds"] = round(wall_seconds, 1)
    return doc


def _kind_lines(label: str, kinds: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = []
    for kind, t in kinds.items():
        shapes = ", ".join(f"{s} {n}" for s, n in list(t["lost_shapes"].items())[:3])
        lines.append(
            f"{label[:28]:<28} {kind:<9} {t['actions']:>5} {t['forced']:>5} "
            f"{t['predicted_usd']:>10.4f} {t['realized_usd']:>10.4f} {t['paid']:>4}/"
            f"{t['actions']:<4} {t['predicted_pays_realized_not']:>5} {t['facts_lost']:>5}"
            + (f"  {shapes}" if shapes else "")
        )
    return lines


def format_audit(doc: Mapping[str, Any]) -> str:
    """The audit table: per source and kind, per kind, and per population."""
    head = (
        f"{'source':<28} {'kind':<9} {'acts':>5} {'forcd':>5} {'predict $':>10} "
        f"{'realized $':>10} {'paid':>9} {'wrong':>5} {'lost':>5}  lost fact shapes"
    )
    lines = [
        f"audit of {doc['strategy']} · {doc['provider']} · mode {doc['mode']} · "
        f"{doc['sessions']} sessions · {doc['actions_audited']} of {doc['actions_taken']} "
        f"actions audited · {doc['replays']} replays"
        + (f" · {doc['wall_seconds']:.0f} s" if "wall_seconds" in doc else ""),
        "actions taken: "
        + (", ".join(f"{k} {n}" for k, n in doc["actions_taken_by_kind"].items()) or "none"),
        "predict: the cost model's net saving when it acted (forced actions excluded); "
        "realized: counterfactual replay without the action minus the actual replay "
        "(input cost; folds and refreshes: marginal); paid: actions with a positive realized "
        "saving; wrong: predicted to pay, did not; lost: later-used facts it removed",
        head,
        "-" * len(head),
    ]
    for source, kinds in doc["per_source"].items():
        lines += _kind_lines(source, kinds)
    lines.append("-" * len(head))
    lines += _kind_lines("all sources", doc["by_kind"])
    lines.append("")
    lines.append(
        f"per population: {doc['strategy']} input × vanilla, visible fidelity "
        "[90% bootstrap interval over sessions], realized saving per kind ($)"
    )
    lines.append(f"{'source/group':<44} {'sess':>4} {'× van':>6} {'fid.vis':>7} {'interval':>15}")
    for row in doc["groups"]:
        name = f"{row['source']}/{row['group']}"
        kinds = doc["per_group"].get(name, {})
        cells = "  ".join(f"{k} {t['realized_usd']:+.4f}" for k, t in kinds.items())
        low, high = row["fidelity_interval"]
        lines.append(
            f"{name[:44]:<44} {row['sessions']:>4} {row['cost_ratio']:>6.3f} "
            f"{row['fidelity_visible']:>7.3f} [{low:.3f}, {high:.3f}]  {cells}"
        )
    worst = min(doc["groups"], key=lambda r: r["fidelity_visible"], default=None)
    if worst is not None:
        lines.append(
            f"worst group: {worst['source']}/{worst['group']} at visible fidelity "
            f"{worst['fidelity_visible']:.3f}; overall {doc['cost_ratio']:.3f} × vanilla"
        )
    if doc["errors"]:
        lines.append(f"! {len(doc['errors'])} session(s) failed, first: {doc['errors'][0]}")
    return "\n".join(lines) + "\n"

"""When the cost model will fold on its own: the horizon of a fold that comes before it.

A finished-task fold removes finished work from every later request, but a cost-model fold
expected k calls later would take the same messages anyway (it folds everything between the
task statement and the protected tail). Against that, the finished-task fold gains the
removed tokens' cached price on k calls only, while it pays its re-miss now: its horizon is
k, not the current task's expected length. (After the cost-model fold both views hold one
summary of the same work; each later fold summarizes the earlier summary with the new work,
so a difference in the summaries' sizes fades fold by fold and is not counted.)

k is predicted from the cost-model fold's own rule: the range it would fold now grows by the
thread's growth per call (new messages pass the protected tail into the range), its summary
grows with its share of the range, the expected remaining calls grow with the calls made, and
k is the first call at which that fold removes at least `fold_min_tokens` and pays
(`cachepilot bench --audit`, continuous mode: a finished-task fold one call before the
cost-model fold split one fold into two re-misses and lost money).
"""

from __future__ import annotations

from typing import NamedTuple

from cachepilot.fold.request import summary_budget
from cachepilot.maintenance.policy import MaintenanceConfig, rates
from cachepilot.pricing import Price

__all__ = ["NextFold", "calls_until_cost_fold"]


class NextFold(NamedTuple):
    """The cost-model fold expected next."""

    calls: int
    """Calls from now until it pays (0: it pays now)."""
    folded_tokens: int
    """Tokens of the range it is expected to take then."""


def calls_until_cost_fold(
    folded: int,
    after: int,
    *,
    growth: float,
    call: int,
    config: MaintenanceConfig,
    price: Price,
    limit: int,
) -> NextFold | None:
    """The first call from `call` on at which a cost-model fold pays on its own, or None
    when none does within `limit` calls.

    `folded`: tokens of the range the cost-model fold would take now; `after`: tokens after
    it (the protected tail, which stays about that size); `growth`: tokens the range gains a
    call. The fold at call `call + j` pays by the rule of `policy.fold_estimate`: it removes
    the range less its summary, at least `fold_min_tokens`, and that saving over the expected
    remaining calls exceeds the re-miss of its summary and the tail (by `fold_margin`).
    Linear in `limit` (at most `max_expected_calls` in practice).
    """
    growth = max(0.0, growth)
    for j in range(max(0, limit) + 1):
        size = folded + round(growth * j)
        summary = summary_budget(
            size,
            config.fold_summary_tokens,
            config.fold_summary_share,
            config.fold_summary_max_tokens,
        )
        removed = size - summary
        if removed < config.fold_min_tokens:
            continue
        rate = rates(config, price, call + j)
        cost = (summary + after) * rate.remiss_per_token * (1.0 + config.fold_margin)
        if removed * rate.saving_per_token > cost:
            return NextFold(j, size)
    return None

"""When the next fold comes, and what an edit before it gains.

An edit of messages a later fold takes anyway gains only until that fold: after it the
summary stands for them.

* A stub or an argument reduction is priced by the pace of the thread's folds so far
  (`calls_until_fold`; `policy.decide` uses it).
* A finished-task fold is priced against the cost-model fold expected to take the same
  messages (it folds everything between the task statement and the protected tail):
  `calls_until_cost_fold` predicts that fold from its own rule (the range it would take now
  grows by the thread's growth per call, its summary with its share of the range, the
  expected remaining calls with the calls made), and the finished-task fold gains the removed
  tokens' cached price only on the calls until then (never fewer than `min_expected_calls`:
  docs/audit.md measured that floor as the cheaper rule), while it pays its re-miss now. Part of
  that re-miss is paid once either way (`prepaid_remiss`): after it the cost-model fold's range
  holds the finished tasks' small summary instead of the tasks, so its own summary, which it
  re-misses, is smaller. After the cost-model fold both views hold one summary of the same
  work, and each later fold summarizes the earlier summary with the new work; the difference
  is not counted beyond it. (`cachepilot bench --audit`, continuous mode: a finished-task fold
  taken one call before the cost-model fold split one fold into two re-misses and lost money.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from cachepilot.maintenance.fold_cost import range_estimate, summary_estimate
from cachepilot.maintenance.policy import MaintenanceConfig, rates
from cachepilot.pricing import Price

__all__ = ["NextFold", "calls_until_cost_fold", "calls_until_fold", "prepaid_remiss"]


class NextFold(NamedTuple):
    """The cost-model fold expected next."""

    calls: int
    """Calls from now until it pays (0: it pays now)."""
    folded_tokens: int
    """Tokens of the range it is expected to take then."""
    earlier_tokens: int = 0
    """Tokens of the earlier fold summary that opens that range (its summary is never
    smaller), 0 when none does."""


def calls_until_fold(
    fold_calls: Sequence[int], *, complete: bool, now: int | None = None
) -> int | None:
    """Calls until the next fold, judged from the calls at which the thread's folds were taken
    (in order): the mean gap between them (from call 0 when `complete`, the list reaching
    back to the thread's start), less the calls since the last fold when `now` (the current
    call) is given, at least 1; None before two folds (one when `complete`) were seen.

    A stub or an argument reduction of a message a fold will take saves its whole size only
    until that fold: after it the summary stands for the message, and the edit saves only what
    the summary would have spent on it (`cachepilot bench --audit`: argument reductions taken
    between frequent folds lost money)."""
    calls = [0, *fold_calls] if complete else list(fold_calls)
    if len(calls) < 2:
        return None
    gap = round((calls[-1] - calls[0]) / (len(calls) - 1))
    return max(1, gap - (now - calls[-1] if now is not None else 0))


def calls_until_cost_fold(
    folded: int,
    after: int,
    *,
    growth: float,
    call: int,
    config: MaintenanceConfig,
    price: Price,
    limit: int,
    earlier: int = 0,
) -> NextFold | None:
    """The first call from `call` on at which a cost-model fold pays on its own, or None
    when none does within `limit` calls (`earlier`: the earlier summary opening the range,
    `fold_cost.range_estimate`).

    `folded`: tokens of the range the cost-model fold would take now; `after`: tokens after
    it (the protected tail, which stays about that size); `growth`: tokens the range gains a
    call. The fold at call `call + j` pays by the rule of `fold_cost.fold_estimate`
    (`fold_cost.range_estimate`): it removes
    the range less its summary, at least `fold_min_tokens`, and that saving over the expected
    remaining calls exceeds the re-miss of its summary and the tail (by `fold_margin`).
    Linear in `limit` (at most `max_expected_calls` in practice).
    """
    growth = max(0.0, growth)
    for j in range(max(0, limit) + 1):
        size = folded + round(growth * j)
        rate = rates(config, price, call + j)
        estimate = range_estimate(size, after, config, rate, earlier=earlier)
        if estimate.removed_tokens >= config.fold_min_tokens and estimate.pays:
            return NextFold(j, size, earlier)
    return None


def prepaid_remiss(
    folded: int,
    next_fold: int,
    config: MaintenanceConfig,
    *,
    earlier: int = 0,
    takes_earlier: bool = True,
) -> int:
    """Tokens of a finished-task fold's re-miss the next cost-model fold would pay anyway.

    `folded`: tokens the finished-task fold takes (into a summary of `fold_summary_tokens`);
    `next_fold`: tokens of the range the cost-model fold would take (these among them). That
    fold re-misses its summary; after the finished-task fold its range is smaller by the
    difference, and so is its summary. `earlier`: the body of an earlier fold summary that
    opens that range (`fold_cost.earlier_summary_tokens`), which its summary is never smaller
    than (`fold_cost.summary_estimate`); `takes_earlier`: the finished-task fold's range opens
    with it too, so that after it the cost-model fold's range opens with the finished tasks'
    summary instead (else it still opens with the earlier one).
    """
    rest = max(0, next_fold - folded) + config.fold_summary_tokens
    whole = summary_estimate(max(next_fold, folded), config, earlier=earlier)
    after = summary_estimate(rest, config, earlier=0 if takes_earlier else earlier)
    return max(0, whole - after)

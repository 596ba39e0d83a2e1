"""What a fold is expected to save: the cost model on one range of the view.

A fold replaces a range of the view by its summary: every later request is smaller by the
range less the summary (a saving of cache hits over the calls the session is expected to
run), and the range's start breaks the cached prefix once (the summary and everything after
it are billed again). `fold_estimate` prices the cost model's fold, `task_fold_estimate` a
finished-task fold, both by `range_estimate`; `policy.decide` prices stubs by the same rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cachepilot.fold.request import is_fold_summary, summary_body, summary_budget
from cachepilot.maintenance.policy import Decision, MaintenanceConfig, Rates, message_sizes, rates
from cachepilot.messages import Message
from cachepilot.pricing import Price
from cachepilot.tokens import TokenCounter

__all__ = [
    "FoldEstimate",
    "earlier_summary_tokens",
    "fold_estimate",
    "fold_pays",
    "range_estimate",
    "summary_estimate",
    "task_fold_estimate",
]


@dataclass(frozen=True, slots=True)
class FoldEstimate:
    """The cost model's view of one possible fold."""

    pays: bool
    """The expected saving exceeds the re-miss."""
    removed_tokens: int
    """Tokens the fold removes from every later request (range minus summary)."""
    remiss_tokens: int
    """Tokens from the range's start on, billed again at the miss price once."""
    rate: Rates
    prepaid_tokens: int = 0
    """Of `remiss_tokens`, what a later fold would re-miss anyway (its summary smaller by
    what this fold condenses, see `task_fold_estimate`): not counted against this fold."""

    def decision(self, call: int, reason: str, context_tokens: int, candidates: int) -> Decision:
        """The scheduler record of applying this fold."""
        remiss = max(0, self.remiss_tokens - self.prepaid_tokens)
        return Decision(
            call=call,
            apply=True,
            reason=reason,
            candidates=candidates,
            removed_tokens=self.removed_tokens,
            remiss_tokens=self.remiss_tokens,
            expected_calls=self.rate.expected_calls,
            saving_usd=round(self.removed_tokens * self.rate.saving_per_token, 6),
            cost_usd=round(remiss * self.rate.remiss_per_token, 6),
            context_tokens=context_tokens,
        )


def range_estimate(
    folded: int,
    after: int,
    config: MaintenanceConfig,
    rate: Rates,
    *,
    scaled: bool = True,
    prepaid: int = 0,
    earlier: int = 0,
) -> FoldEstimate:
    """The cost model on folding a range of `folded` tokens followed by `after` tokens (the
    rest of the request, re-missed with the range's summary): it pays when the tokens it
    removes, over the expected calls, save more than the re-miss (by `fold_margin`).

    `scaled`: the summary grows with the range (`fold_summary_share`), else it keeps the
    least size; `prepaid`: tokens of the re-miss a later fold pays anyway, not counted;
    `earlier`: tokens of the earlier fold summary that opens the range (its body): a scaled
    summary is never smaller (`fold.plan.plan_fold`: it stands for all of that too), so a
    fold removes only what the range holds beyond it. (`fold_min_tokens` is the caller's to
    check.)"""
    budget = summary_estimate(folded, config, scaled=scaled, earlier=earlier)
    removed = folded - budget
    remiss = folded + after - removed
    prepaid = max(0, min(prepaid, remiss))
    cost = (remiss - prepaid) * rate.remiss_per_token * (1.0 + config.fold_margin)
    pays = removed > 0 and removed * rate.saving_per_token > cost
    return FoldEstimate(pays, removed, remiss, rate, prepaid)


def summary_estimate(
    folded: int, config: MaintenanceConfig, *, scaled: bool = True, earlier: int = 0
) -> int:
    """The size of the summary a fold of a range of `folded` tokens writes, as
    `fold.plan.plan_fold` sizes it: `fold_summary_share` of the range within its bounds
    (`scaled`, else `fold_summary_tokens`), and never smaller than `earlier`, the body of an
    earlier summary opening the range (only when scaled, as there)."""
    share = config.fold_summary_share if scaled else 0.0
    return summary_budget(
        folded, config.fold_summary_tokens, share, config.fold_summary_max_tokens, earlier
    )


def earlier_summary_tokens(message: Message, counter: TokenCounter) -> int:
    """Tokens of the body of a fold summary opening a range (0 for any other message): what
    the range's new summary is never smaller than."""
    return counter.count(summary_body(message.text)) if is_fold_summary(message) else 0


def fold_estimate(
    view: Sequence[Message],
    counter: TokenCounter,
    config: MaintenanceConfig,
    price: Price,
    call: int,
    *,
    sizes: Sequence[int] | None = None,
    begin: int | None = None,
    end: int | None = None,
) -> FoldEstimate | None:
    """The cost model on folding everything between the task statement and the protected
    tail; None when that range would remove fewer than `fold_min_tokens`.

    `sizes`: `counter.count_message` of each view message, when the caller keeps them.
    `begin`, `end`: the range starts at or ends before these view indices instead (a stretch
    between the conversation the fold keeps in view, see `cachepilot.fold.keep`).
    """
    sizes = message_sizes(view, counter, sizes)
    first_user = next((i for i, m in enumerate(view) if m.role == "user"), None)
    if first_user is None:
        return None
    tail = 0
    cut = len(sizes)
    while cut > first_user + 1 and tail < config.fold_protect_tokens:
        cut -= 1
        tail += sizes[cut]
    start = first_user + 1 if begin is None else max(first_user + 1, begin)
    if end is not None:
        cut = min(cut, end)
    if cut <= start:
        return None
    folded = sum(sizes[start:cut])
    rate = rates(config, price, call)
    after = sum(sizes[start:]) - folded
    earlier = earlier_summary_tokens(view[start], counter)
    estimate = range_estimate(folded, after, config, rate, earlier=earlier)
    return None if estimate.removed_tokens < config.fold_min_tokens else estimate


def fold_pays(
    view: Sequence[Message],
    counter: TokenCounter,
    config: MaintenanceConfig,
    price: Price,
    call: int,
    *,
    sizes: Sequence[int] | None = None,
) -> bool:
    """True when folding everything between the task statement and the protected tail is
    expected to save more over the remaining calls than the re-miss it causes."""
    estimate = fold_estimate(view, counter, config, price, call, sizes=sizes)
    return estimate is not None and estimate.pays


def task_fold_estimate(
    sizes: Sequence[int],
    start: int,
    cut: int,
    *,
    config: MaintenanceConfig,
    price: Price,
    expected_calls: int,
    prepaid: int = 0,
) -> FoldEstimate:
    """The cost model on folding view messages `[start, cut)` (finished tasks) into one
    summary, over `expected_calls` remaining calls (`sizes`: tokens per view message).
    Finished work is not in use: its summary keeps the least size, `fold_summary_tokens`.
    `prepaid`: tokens of its re-miss a later fold would re-miss anyway
    (`next_fold.prepaid_remiss`), not counted against it.

    It pays by the same rule as a cost-model fold: the saving exceeds the re-miss and the
    fold removes at least `fold_min_tokens` (`cachepilot bench --audit` found smaller
    finished-task folds costing more than they saved on held-out populations)."""
    rate = rates(config, price, 0, expected_calls)
    folded = sum(sizes[start:cut])
    after = sum(sizes[start:]) - folded
    estimate = range_estimate(folded, after, config, rate, scaled=False, prepaid=prepaid)
    if estimate.pays and estimate.removed_tokens < config.fold_min_tokens:
        return replace(estimate, pays=False)
    return estimate

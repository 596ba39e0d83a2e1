"""When the `recall` tool joins a thread: the ingestion gate's cost model.

The tool's schema sits before the history in every request, so adding it mid-thread re-misses
the whole cached prefix once. A thread that never reduces anything should not carry it at all;
a thread whose first lossy reduction saves less than that re-miss keeps the result whole
instead (see `Config.recall_offer`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cachepilot.maintenance import MaintenanceConfig, rates
from cachepilot.pricing import Price
from cachepilot.tokens import TokenCounter

__all__ = ["OfferEstimate", "approx_tokens", "reduction_pays"]


_EXACT_CHARS = 1 << 18
"""Texts up to this length are counted exactly; longer ones from a sample of this size."""


def approx_tokens(counter: TokenCounter, text: str) -> int:
    """Tokens of `text`: exact up to `_EXACT_CHARS` characters, else scaled from its head (a
    50 MB output is not tokenized for one decision)."""
    if len(text) <= _EXACT_CHARS:
        return counter.count(text)
    sample = counter.count(text[:_EXACT_CHARS])
    return round(sample * len(text) / _EXACT_CHARS)


@dataclass(frozen=True, slots=True)
class OfferEstimate:
    """The cost model's view of offering `recall` with one reduction."""

    pays: bool
    """The saving, with what earlier results kept whole forwent, exceeds the cost."""
    saving_usd: float
    """What reducing this result saves over the expected remaining calls."""
    cost_usd: float
    """The re-miss of the cached prefix plus the recall schema on those calls."""


def reduction_pays(
    *,
    removed_tokens: int,
    context_tokens: int,
    recall_tokens: int,
    calls: int,
    price: Price,
    config: MaintenanceConfig,
    forgone_usd: float = 0.0,
) -> OfferEstimate:
    """Whether reducing a new result (and so offering `recall` from this call on) is expected
    to cost less than keeping it whole.

    Reducing saves `removed_tokens` now (they are new, billed at the miss or write price) and
    on each expected later call (as cache hits); it costs the re-miss of the cached prefix
    (`context_tokens`, the last request) and the recall schema on every call from now on.
    `forgone_usd` is what the results kept whole before forwent: once the sum of forgone
    savings covers the break, the break is bought (rent or buy: never more than twice the
    best choice in hindsight).
    """
    rate = rates(config, price, calls)
    first = max(price.miss_per_m, price.effective_write_per_m) / 1e6
    per_token = first + rate.saving_per_token
    saving = max(0, removed_tokens) * per_token
    cost = context_tokens * rate.remiss_per_token + recall_tokens * per_token
    return OfferEstimate(saving > 0 and saving + forgone_usd > cost, saving, cost)

"""Price table (USD per million tokens) and the cost of a usage record.

Every row names where its numbers come from and the date they were read. Users override rows
with `register_price` or pass their own `Price` to `cost`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from cachepilot.usage import Usage

__all__ = ["PRICES", "Cost", "Price", "cost", "get_price", "register_price", "storage_cost"]


@dataclass(frozen=True, slots=True)
class Price:
    """Prices of one model, USD per million tokens."""

    model: str
    """Model or profile name the row applies to."""
    miss_per_m: float
    """Uncached prompt tokens."""
    hit_per_m: float
    """Prompt tokens read from cache."""
    output_per_m: float
    """Completion tokens."""
    write_per_m: float | None = None
    """Prompt tokens written to cache; None means written tokens cost the miss price."""
    write_long_per_m: float | None = None
    """Cache writes with the long TTL (Anthropic 1h), when the provider offers one."""
    storage_per_m_hour: float | None = None
    """Keeping one million tokens in an explicit cache for one hour (Gemini `cachedContents`);
    None when the provider bills no storage."""
    source: str = ""
    """Where the numbers come from."""
    source_date: str = ""
    """ISO date the numbers were read from the source."""

    def __post_init__(self) -> None:
        for name in ("miss_per_m", "hit_per_m", "output_per_m"):
            if getattr(self, name) < 0:
                raise ValueError(f"Price.{name} must be >= 0")
        for name in ("write_per_m", "write_long_per_m", "storage_per_m_hour"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"Price.{name} must be >= 0")
        if not self.model:
            raise ValueError("Price.model must be a non-empty name")

    @property
    def effective_write_per_m(self) -> float:
        """Price of one million written tokens (the miss price when writes are not billed apart)."""
        return self.miss_per_m if self.write_per_m is None else self.write_per_m


@dataclass(frozen=True, slots=True)
class Cost:
    """Cost of a usage record in USD, split as the benchmark reports it."""

    input_usd: float
    """Cached reads + cache writes + uncached prompt tokens."""
    output_usd: float

    @property
    def total_usd(self) -> float:
        """Input plus output."""
        return self.input_usd + self.output_usd


def cost(usage: Usage, price: Price, *, long_ttl_writes: bool = False) -> Cost:
    """Price a usage record.

    Args:
        usage: normalized usage.
        price: the model's price row.
        long_ttl_writes: bill cache writes at the long-TTL write price when the row has one.
    """
    write_rate = price.effective_write_per_m
    if long_ttl_writes and price.write_long_per_m is not None:
        write_rate = price.write_long_per_m
    input_usd = (
        usage.cached_tokens * price.hit_per_m
        + usage.cache_write_tokens * write_rate
        + usage.uncached_tokens * price.miss_per_m
    ) / 1_000_000
    return Cost(input_usd=input_usd, output_usd=usage.output_tokens * price.output_per_m / 1e6)


def storage_cost(tokens: int, seconds: float, price: Price) -> float:
    """USD to keep `tokens` in an explicit cache for `seconds` (Gemini `cachedContents`: billed
    per token-hour for the resource's time to live; 0 when the row bills no storage).

    Raises:
        ValueError: for negative tokens or seconds.
    """
    if tokens < 0 or seconds < 0:
        raise ValueError("storage_cost needs tokens >= 0 and seconds >= 0")
    if price.storage_per_m_hour is None:
        return 0.0
    return tokens * price.storage_per_m_hour * (seconds / 3600.0) / 1_000_000


_OPENAI = "OpenAI API pricing page (platform.openai.com/docs/pricing)"
_ANTHROPIC = "Anthropic pricing page (docs.anthropic.com/en/docs/about-claude/pricing)"
_DEEPSEEK = "DeepSeek API pricing page (api-docs.deepseek.com/quick_start/pricing)"
_GEMINI = (
    "Gemini Developer API pricing page (ai.google.dev/gemini-api/docs/pricing), paid Standard "
    "tier, text prompts of at most 200k tokens; the context caching price is the cached-read "
    "rate, storage is per million tokens per hour"
)

PRICES: dict[str, Price] = {
    p.model: p
    for p in (
        Price(
            "gpt-5.4-mini",
            miss_per_m=0.75,
            hit_per_m=0.075,
            output_per_m=4.50,
            source=_OPENAI,
            source_date="2026-03-17",
        ),
        Price(
            "gpt-5.4",
            miss_per_m=2.50,
            hit_per_m=0.25,
            output_per_m=15.00,
            source=_OPENAI,
            source_date="2026-03-05",
        ),
        Price(
            # Breakpoint-style caching bills writes apart; no public rate was published for
            # the style's first models, so writes are billed at the miss price (1.0x).
            "gpt-5.6-breakpoint",
            miss_per_m=0.75,
            hit_per_m=0.075,
            output_per_m=4.50,
            write_per_m=0.75,
            source=_OPENAI + "; write rate assumed 1.0x miss",
            source_date="2026-11-01",
        ),
        Price(
            "claude-sonnet-4.5",
            miss_per_m=3.00,
            hit_per_m=0.30,
            output_per_m=15.00,
            write_per_m=3.75,
            write_long_per_m=6.00,
            source=_ANTHROPIC,
            source_date="2025-09-29",
        ),
        Price(
            "deepseek-chat",
            miss_per_m=0.28,
            hit_per_m=0.028,
            output_per_m=0.42,
            source=_DEEPSEEK + " (V3.2)",
            source_date="2025-09-29",
        ),
        Price(
            "gemini-2.5-flash",
            miss_per_m=0.30,
            hit_per_m=0.03,
            output_per_m=2.50,
            storage_per_m_hour=1.00,
            source=_GEMINI,
            source_date="2026-06-17",
        ),
        Price(
            # Prompts over 200k tokens cost twice as much (2.50 / 15.00 / 0.25): not modelled.
            "gemini-2.5-pro",
            miss_per_m=1.25,
            hit_per_m=0.125,
            output_per_m=10.00,
            storage_per_m_hour=4.50,
            source=_GEMINI + " (the <= 200k-token tier)",
            source_date="2026-06-17",
        ),
        Price(
            "gemini-3-flash",
            miss_per_m=0.50,
            hit_per_m=0.05,
            output_per_m=3.00,
            storage_per_m_hour=1.00,
            source=_GEMINI + " (gemini-3-flash-preview)",
            source_date="2026-07-04",
        ),
        Price(
            # The input and output rates as Google AI Studio listed them; the cached rate is
            # 0.1x input like every Gemini 2.5+ row, storage the Pro rate of 2.5 Pro.
            "gemini-3-pro",
            miss_per_m=2.00,
            hit_per_m=0.20,
            output_per_m=12.00,
            storage_per_m_hour=4.50,
            source=_GEMINI + " (gemini-3-pro-preview, <= 200k tokens; cached and storage "
            "rates assumed from the 2.5 rows' ratios)",
            source_date="2026-02-04",
        ),
        Price(
            # Self-hosted: there is no list price. Nominal rates with the same 10:1 miss:hit
            # ratio as hosted providers, so relative savings stay comparable.
            "vllm-nominal",
            miss_per_m=0.10,
            hit_per_m=0.01,
            output_per_m=0.40,
            source="nominal (self-hosted vLLM has no list price)",
            source_date="2026-11-21",
        ),
    )
}
_LOCK = threading.Lock()


def register_price(price: Price) -> None:
    """Add or replace a row of the price table."""
    with _LOCK:
        PRICES[price.model] = price


def get_price(model: str) -> Price:
    """The price row of a model.

    Raises:
        ValueError: when no row has that name (the message lists the known ones).
    """
    with _LOCK:
        row = PRICES.get(model)
    if row is None:
        known = ", ".join(sorted(PRICES))
        raise ValueError(f"no price for model {model!r}; known: {known} (see register_price)")
    return row

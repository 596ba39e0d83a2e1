"""Provider prompt-cache profiles: the rules each provider applies, with prices and sources.

Every profile names how a hit is found (`match`), its granularity and minimum, its TTL, and
whether writes are billed. The rules are the providers' documented ones, adjusted where the
recorded usage in real traces says otherwise (see `cachepilot_bench.calibrate`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, TypeAlias

from cachepilot.pricing import Cost, Price, cost, get_price
from cachepilot.usage import Usage

__all__ = [
    "DEFAULT_PROFILE",
    "LOGICAL_STEP_SECONDS",
    "PROFILES",
    "CacheKind",
    "MatchRule",
    "ProviderProfile",
    "get_profile",
]

CacheKind: TypeAlias = Literal[
    "openai", "openai-breakpoint", "anthropic", "deepseek", "vllm", "gemini"
]
MatchRule: TypeAlias = Literal["prefix", "units", "breakpoints"]
"""How a request finds its cached prefix.

`prefix`: any prefix of an earlier request (automatic caching, vLLM block hashing).
`units`: only whole stored units (ends of earlier inputs and outputs, detected common
prefixes), DeepSeek's rule. `breakpoints`: prefixes written at explicit breakpoints, found from
the request's own breakpoints (within a lookback window of content blocks when one is set).
"""

DEFAULT_PROFILE = "openai-gpt-5.4-mini"
LOGICAL_STEP_SECONDS = 10.0
"""Clock step the simulator uses for a request without a timestamp (previous time + 10 s)."""


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    """The prompt-cache rules and prices of one provider/model family.

    Attributes:
        name: profile name (`--provider` value).
        kind: provider family.
        price: price row used to cost simulated usage (`cachepilot.pricing.cost`).
        ttl_seconds: an entry expires after this long unused; None = never (LRU only).
        min_cacheable_tokens: no hit (and no write) below this many prompt tokens.
        granularity: hits are rounded down to a multiple of this many tokens.
        context_window: nominal input window in tokens (for fold triggers, not enforced).
        description: the rule in prose, with its source.
        match: how a hit is found (see `MatchRule`).
        caches_output: the generated reply is cached after the prompt, so the next request
            that re-sends it verbatim hits through it.
        bills_writes: the provider reports and bills cache writes.
        lookback_blocks: breakpoint lookups check entries at most this many content blocks
            before each breakpoint (None = unlimited).
        max_breakpoints: explicit breakpoints allowed per request.
        default_breakpoints: where breakpoints sit when a request names none: `end` (last
            message) or `system+last` (end of tools + system, and the last message).
        detects_common_prefix: a common prefix of two requests becomes a stored unit after
            the second one (DeepSeek).
        recompute_last_token: a full hit still recomputes the last prompt token (vLLM).
        reply_with_reasoning_misses: a re-sent reply that carries reasoning does not match
            the cached output (the template re-renders reasoning differently from the
            generated stream), so only the input unit before it hits (DeepSeek, vLLM).
        max_entries: capacity, least recently used out first: distinct cached branches (a
            request extending a cached one replaces it) for `prefix`/`units`, stored
            breakpoint prefixes for `breakpoints`. An approximation of the provider's pool
            that also bounds lookup cost when every request rewrites its history.
        explicit_ttl_seconds: the default time to live of an explicit cache resource (Gemini
            `cachedContents`, billed per token-hour: `Price.storage_per_m_hour`); None when
            the provider has no such resource.
    """

    name: str
    kind: CacheKind
    price: Price
    ttl_seconds: float | None
    min_cacheable_tokens: int
    granularity: int
    context_window: int
    description: str
    match: MatchRule = "prefix"
    caches_output: bool = False
    bills_writes: bool = False
    lookback_blocks: int | None = None
    max_breakpoints: int | None = None
    default_breakpoints: Literal["end", "system+last"] = "end"
    detects_common_prefix: bool = False
    recompute_last_token: bool = False
    reply_with_reasoning_misses: bool = False
    max_entries: int = 256
    explicit_ttl_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.granularity < 1:
            raise ValueError("ProviderProfile.granularity must be >= 1")
        if self.min_cacheable_tokens < 0:
            raise ValueError("ProviderProfile.min_cacheable_tokens must be >= 0")
        if self.ttl_seconds is not None and self.ttl_seconds <= 0:
            raise ValueError("ProviderProfile.ttl_seconds must be > 0 or None")
        if self.max_entries < 1:
            raise ValueError("ProviderProfile.max_entries must be >= 1")

    def billable_hit(self, raw: int) -> int:
        """A raw matched prefix length as the provider bills it (minimum, then granularity)."""
        if raw < self.min_cacheable_tokens or raw <= 0:
            return 0
        return raw - raw % self.granularity

    def cost(self, usage: Usage) -> Cost:
        """Price a usage record with this profile's price row."""
        return cost(usage, self.price)

    def with_ttl(self, ttl_seconds: float | None) -> ProviderProfile:
        """A copy with another TTL (e.g. OpenAI extended retention, 24 h)."""
        return dataclasses.replace(self, ttl_seconds=ttl_seconds)


def _anthropic_1h_price() -> Price:
    base = get_price("claude-sonnet-4.5")
    return dataclasses.replace(
        base,
        model="claude-sonnet-4.5-1h-cache",
        write_per_m=base.write_long_per_m,
        source=base.source + "; cache writes at the 1-hour TTL rate (2x input)",
    )


_GEMINI_IMPLICIT = (
    "Gemini implicit caching (on by default for Gemini 2.5 and newer): a request whose "
    "prompt shares a prefix with a recent request of the same model reads it at the "
    "context-caching price (0.1x input); writes are free and not reported; "
    "`cachedContentTokenCount` reports the hit, `promptTokenCount` counts it too. No marks: "
    "the prefix runs from the system instruction and tools through the contents. Minimum "
    "prompt for a hit: {minimum} tokens ({model}, the caching page's table as updated "
    "2026-10-13; the figures have changed over time: 2.5 Flash was listed at 1,024 and the "
    "API still accepts 1,024-token explicit caches on it). Retention is not documented; we "
    "use 5 min (requests 'in a short amount of time'), granularity 1 token. Explicit caching "
    "(`cachedContents`): a resource holding a prefix, default TTL 1 h, read at the same 0.1x, "
    "billed {storage} USD per million tokens per hour of its TTL; a request naming one sends "
    "no systemInstruction, tools or toolConfig. Sources: ai.google.dev/gemini-api/docs/"
    "caching and ai.google.dev/gemini-api/docs/pricing. Calibration: the hits are an upper "
    "bound; on recorded Gemini 3 Pro sessions (mini-swe-agent, 15 sessions, 635 calls after "
    "the first) the provider served 85.1 % of input tokens from cache where these rules "
    "predict 95.5 %: 9 % of calls missed fully and the median hit covered 92 % of the "
    "previous prompt (see `cachepilot_bench.calibrate`)."
)


def _gemini(name: str, model: str, minimum: int) -> ProviderProfile:
    price = get_price(name)
    return ProviderProfile(
        name=name,
        kind="gemini",
        price=price,
        ttl_seconds=300.0,
        min_cacheable_tokens=minimum,
        granularity=1,
        context_window=1_048_576,
        description=_GEMINI_IMPLICIT.format(
            minimum=f"{minimum:,}", model=model, storage=f"{price.storage_per_m_hour:.2f}"
        ),
        match="prefix",
        max_entries=128,
        explicit_ttl_seconds=3600.0,
    )


_OPENAI_AUTO = (
    "OpenAI automatic prompt caching: prompts of 1024 tokens or more hit the longest prefix "
    "shared with an earlier request still in cache, billed in 128-token steps "
    "(1024, 1152, …); every prefix of every request is cached, writes are free and not "
    "reported. Retention: 5-10 min of inactivity (up to 1 h off-peak); we use 5 min, the "
    "documented lower bound. Outputs are not assumed cached. Source: "
    "platform.openai.com/docs/guides/prompt-caching."
)

PROFILES: dict[str, ProviderProfile] = {
    p.name: p
    for p in (
        ProviderProfile(
            name="openai-gpt-5.4-mini",
            kind="openai",
            price=get_price("gpt-5.4-mini"),
            ttl_seconds=300.0,
            min_cacheable_tokens=1024,
            granularity=128,
            context_window=400_000,
            description=_OPENAI_AUTO,
            match="prefix",
            max_entries=128,
        ),
        ProviderProfile(
            name="openai-gpt-5.4",
            kind="openai",
            price=get_price("gpt-5.4"),
            ttl_seconds=300.0,
            min_cacheable_tokens=1024,
            granularity=128,
            context_window=1_000_000,
            description=_OPENAI_AUTO,
            match="prefix",
            max_entries=128,
        ),
        ProviderProfile(
            name="openai-gpt-5.6-breakpoint",
            kind="openai-breakpoint",
            price=get_price("gpt-5.6-breakpoint"),
            ttl_seconds=300.0,
            min_cacheable_tokens=1024,
            granularity=1,
            context_window=400_000,
            description=(
                "OpenAI breakpoint-style caching (5.6+): a request is cached at its breakpoints "
                "(default: its end; `Request.cache_breakpoints` names others, up to 4); a later "
                "request hits the longest cached breakpoint prefix it contains, exactly, with no "
                "lookback limit. Writes are reported and billed: a request writes everything "
                "from its cached prefix to its last breakpoint (12,000-token request: write "
                "12,000, read 0; a 15,000-token extension: read 12,000, write 3,000). Minimum "
                "1024 tokens, TTL 5 min. Write price: price row `gpt-5.6-breakpoint`."
            ),
            match="breakpoints",
            bills_writes=True,
            max_breakpoints=4,
            default_breakpoints="end",
            max_entries=4096,
        ),
        ProviderProfile(
            name="anthropic",
            kind="anthropic",
            price=get_price("claude-sonnet-4.5"),
            ttl_seconds=300.0,
            min_cacheable_tokens=1024,
            granularity=1,
            context_window=200_000,
            description=(
                "Anthropic prompt caching: up to 4 `cache_control` breakpoints (default here, "
                "as Claude Code and automatic caching do: end of tools + system, and the last "
                "message). Each breakpoint writes the prefix up to it (≥ 1024 tokens, Sonnet); "
                "a request reads the longest earlier-written prefix that ends at a block "
                "boundary at most 20 content blocks before one of its breakpoints (the "
                "lookback window), exact to the token. cache_write = tokens from the end of "
                "the hit to the last breakpoint (1.25x input), reads 0.1x, tokens after the "
                "last breakpoint plain input. TTL 5 min, refreshed on every read. Source: "
                "docs.anthropic.com/en/docs/build-with-claude/prompt-caching."
            ),
            match="breakpoints",
            bills_writes=True,
            lookback_blocks=20,
            max_breakpoints=4,
            default_breakpoints="system+last",
            max_entries=4096,
        ),
        ProviderProfile(
            name="anthropic-1h",
            kind="anthropic",
            price=_anthropic_1h_price(),
            ttl_seconds=3600.0,
            min_cacheable_tokens=1024,
            granularity=1,
            context_window=200_000,
            description=(
                'Anthropic prompt caching with the 1-hour TTL (`ttl: "1h"`, what Claude Code '
                "uses): same rules as `anthropic`, writes billed at 2x input. Calibrated on "
                "Claude Code traces: each call reads the previous call's last breakpoint and "
                "writes the new tokens (see `cachepilot_bench.calibrate`)."
            ),
            match="breakpoints",
            bills_writes=True,
            lookback_blocks=20,
            max_breakpoints=4,
            default_breakpoints="system+last",
            max_entries=4096,
        ),
        ProviderProfile(
            name="deepseek",
            kind="deepseek",
            price=get_price("deepseek-chat"),
            ttl_seconds=4 * 3600.0,
            min_cacheable_tokens=64,
            granularity=64,
            context_window=128_000,
            description=(
                "DeepSeek context caching on disk: each request stores cache units at the end "
                "of its input and at the end of its output; a common prefix of two requests "
                "becomes a unit after the second one. A later request hits the longest unit "
                "it contains in full, stored in 64-token blocks (hit rounded down to 64). "
                "Calibrated on recorded usage: hits equal the previous call's prompt + "
                "completion rounded down to 64 (the reply is cached). Units last hours "
                "(documented: cleared within hours to days when unused); we use 4 h. No write "
                "billing. Source: api-docs.deepseek.com/guides/kv_cache."
            ),
            match="units",
            caches_output=True,
            detects_common_prefix=True,
            reply_with_reasoning_misses=True,
            max_entries=64,
        ),
        ProviderProfile(
            name="vllm-block16",
            kind="vllm",
            price=get_price("vllm-nominal"),
            ttl_seconds=None,
            min_cacheable_tokens=16,
            granularity=16,
            context_window=131_072,
            description=(
                "vLLM automatic prefix caching: KV blocks of 16 tokens are hashed with their "
                "prefix; a request hits every full block of its longest common prefix with "
                "cached blocks (the last prompt token is always recomputed). Blocks filled "
                "while decoding are cached too, so a re-sent reply hits. No TTL: eviction is "
                "LRU under memory pressure (assumed large). Nominal prices (row `vllm-nominal`)."
            ),
            match="prefix",
            caches_output=True,
            reply_with_reasoning_misses=True,
            recompute_last_token=True,
            max_entries=128,
        ),
        _gemini("gemini-2.5-flash", "Gemini 2.5 Flash", 2048),
        _gemini("gemini-2.5-pro", "Gemini 2.5 Pro", 2048),
        _gemini("gemini-3-flash", "Gemini 3 Flash", 4096),
        _gemini("gemini-3-pro", "Gemini 3 Pro", 4096),
    )
}


def get_profile(name: str) -> ProviderProfile:
    """The profile called `name`.

    Raises:
        ValueError: when no profile has that name (the message lists the known ones).
    """
    profile = PROFILES.get(name)
    if profile is None:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown provider profile {name!r}; known: {known}")
    return profile

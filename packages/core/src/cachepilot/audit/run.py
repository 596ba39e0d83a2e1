"""The audit: simulate every call of a log under a provider profile and explain every break.

One `CacheSimulator` serves the whole file in file order: a provider's prompt cache is shared
by every request of one account, so a new thread can hit a prefix another thread wrote.
Each call after the first of its thread is explained against the thread's previous call
(`cachepilot.diagnose.breaks.explain`). When the provider's usage was recorded, a call whose content
extends the previous one but whose recorded hit ratio falls far below the simulated one is a
`provider_miss` (eviction or routing the request cannot show), a `ttl_expiry` when it
came after the TTL, or a `provider_edit` when the request asks the provider to edit its
context server-side (`context_management`): the provider's own rewrite, never counted as a
break of the request.

Anthropic requests are simulated under Anthropic's rules as sent: cached at their own
`cache_control` marks, at the last block too when the request asks for automatic caching (a
top-level `cache_control`), and not at all when they carry neither: their misses are the
request's, never the provider's, and nothing is lost when such a thread's prefix changes. The
default profile follows the TTL the marks ask for (`anthropic-1h` when any asks for `1h`).

Costs are the profile's prices on simulated usage with the recorded output tokens. The
**avoidable cost** of a break is its re-missed tokens priced at (miss − hit), or (write − hit)
on providers that bill cache writes, for the causes in `AVOIDABLE_CAUSES`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cachepilot.audit.sources import LoggedCall, load_calls
from cachepilot.audit.threads import Thread, group_threads
from cachepilot.diagnose.breaks import CAUSES, CauseKind, Explanation, explain
from cachepilot.pricing import Cost
from cachepilot.sim import DEFAULT_PROFILE, PROFILES, CacheSimulator, ProviderProfile, get_profile
from cachepilot.sim.render import render_request
from cachepilot.tokens import TokenCounter, get_counter
from cachepilot.usage import Usage

__all__ = [
    "PROVIDER_MISS_GAP",
    "AuditReport",
    "CallAudit",
    "ThreadAudit",
    "audit_calls",
    "audit_file",
    "default_profile_for",
]

PROVIDER_MISS_GAP = 0.5
"""A recorded hit ratio this far below the simulated one is a provider-side miss."""


@dataclass(frozen=True, slots=True)
class CallAudit:
    """One audited call.

    Attributes:
        thread: id of its thread.
        ordinal: position in its thread (0 = first).
        call: the logged call.
        simulated: usage under the profile (output tokens as recorded).
        cost: the profile's price of `simulated`.
        explanation: why it hit or missed the thread's previous call (None for the first).
    """

    thread: str
    ordinal: int
    call: LoggedCall
    simulated: Usage
    cost: Cost
    explanation: Explanation | None

    @property
    def is_break(self) -> bool:
        """The call missed tokens its thread's previous call had cached."""
        return self.explanation is not None and self.explanation.is_break

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        rec = self.call.usage
        return {
            "thread": self.thread,
            "ordinal": self.ordinal,
            "source": self.call.source,
            "api": self.call.api,
            "model": self.call.request.model,
            "timestamp": self.call.timestamp,
            "messages": len(self.call.request.messages),
            "prompt_tokens": self.simulated.input_tokens,
            "cached_tokens": self.simulated.cached_tokens,
            "cache_write_tokens": self.simulated.cache_write_tokens,
            "output_tokens": self.simulated.output_tokens,
            "hit_rate": self.simulated.hit_rate,
            "cost_usd": self.cost.total_usd,
            "input_cost_usd": self.cost.input_usd,
            "recorded": None if rec is None else rec.to_dict(),
            "explanation": None if self.explanation is None else self.explanation.to_dict(),
        }


def _sum(usages: Sequence[Usage]) -> Usage:
    total = Usage()
    for usage in usages:
        total = total + usage
    return total


def _totals(calls: Sequence[CallAudit], rate_per_m: float) -> dict[str, Any]:
    sim = _sum([c.simulated for c in calls])
    recorded = [c.call.usage for c in calls if c.call.usage is not None]
    rec = _sum(recorded)
    warm = _sum([c.simulated for c in calls if c.ordinal > 0])
    breaks = [c for c in calls if c.is_break]
    uncached = sum(1 for c in calls if c.call.cache_mode == "none")
    by_cause: dict[str, dict[str, Any]] = {}
    for c in breaks:
        assert c.explanation is not None
        exp = c.explanation
        slot = by_cause.setdefault(
            exp.cause, {"breaks": 0, "remissed_tokens": 0, "avoidable_usd": 0.0}
        )
        slot["breaks"] += 1
        slot["remissed_tokens"] += exp.remissed_tokens
        if exp.avoidable:
            slot["avoidable_usd"] += exp.remissed_tokens * rate_per_m / 1e6
    ordered = {k: by_cause[k] for k in CAUSES if k in by_cause}
    return {
        "calls": len(calls),
        "input_tokens": sim.input_tokens,
        "cached_tokens": sim.cached_tokens,
        "cache_write_tokens": sim.cache_write_tokens,
        "uncached_tokens": sim.uncached_tokens,
        "output_tokens": sim.output_tokens,
        "hit_rate": sim.hit_rate,
        "warm_hit_rate": warm.hit_rate,
        "cost_usd": sum(c.cost.total_usd for c in calls),
        "input_cost_usd": sum(c.cost.input_usd for c in calls),
        "breaks": len(breaks),
        "prefix_breaks": sum(1 for c in breaks if c.explanation and c.explanation.prefix_break),
        "remissed_tokens": sum(c.explanation.remissed_tokens for c in breaks if c.explanation),
        "avoidable_usd": sum(v["avoidable_usd"] for v in ordered.values()),
        "by_cause": ordered,
        "uncached_calls": uncached,
        "recorded_calls": len(recorded),
        "recorded": rec.to_dict() if recorded else None,
        "recorded_hit_rate": rec.hit_rate if recorded else None,
    }


@dataclass(slots=True)
class ThreadAudit:
    """The audited calls of one thread."""

    id: str
    key: str
    calls: list[CallAudit] = field(default_factory=list)


@dataclass(slots=True)
class AuditReport:
    """Everything `cachepilot audit` prints.

    Attributes:
        path: the audited file ("" for in-memory calls).
        profile: provider profile used.
        hidden_prefix_tokens: opaque prefix tokens added to every request.
        threads: per-thread results, in order of first call.
        calls: every call in file order.
        notes: what the reader skipped or could not decode (HTTP errors, bodies in an
            encoding without decoder), one line each.
    """

    path: str
    profile: ProviderProfile
    hidden_prefix_tokens: int
    threads: list[ThreadAudit]
    calls: list[CallAudit]
    notes: list[str] = field(default_factory=list)

    @property
    def avoidable_rate_per_m(self) -> float:
        """USD per million re-missed tokens a break costs beyond a hit."""
        price = self.profile.price
        miss = price.effective_write_per_m if self.profile.bills_writes else price.miss_per_m
        return max(0.0, miss - price.hit_per_m)

    @property
    def totals(self) -> dict[str, Any]:
        """File totals (see `to_dict`)."""
        return _totals(self.calls, self.avoidable_rate_per_m)

    @property
    def breaks(self) -> list[CallAudit]:
        """Calls that missed what their thread's previous call had cached."""
        return [c for c in self.calls if c.is_break]

    @property
    def prefix_breaks(self) -> list[CallAudit]:
        """Breaks caused by a change of the request itself."""
        return [c for c in self.breaks if c.explanation is not None and c.explanation.prefix_break]

    def to_dict(self) -> dict[str, Any]:
        """The `--json` document."""
        rate = self.avoidable_rate_per_m
        return {
            "file": self.path,
            "provider": self.profile.name,
            "hidden_prefix_tokens": self.hidden_prefix_tokens,
            "requests": len(self.calls),
            "threads": [
                {
                    "id": t.id,
                    "key": t.key,
                    "totals": _totals(t.calls, rate),
                    "calls": [c.to_dict() for c in t.calls],
                }
                for t in self.threads
            ],
            "totals": self.totals,
            "notes": list(self.notes),
        }


def default_profile_for(calls: Sequence[LoggedCall]) -> str:
    """`anthropic` when every call is an Anthropic Messages call (`anthropic-1h` when a mark
    asks for the 1-hour TTL); for Gemini calls, the Gemini profile their model names
    (`gemini-2.5-flash` when none does); else the default profile."""
    if calls and all(c.api == "gemini" for c in calls):
        model = calls[0].request.model or ""
        named = [name for name in PROFILES if name.startswith("gemini-") and name in model]
        return max(named, key=len) if named else "gemini-2.5-flash"
    if calls and all(c.api == "anthropic" for c in calls):
        if any((c.cache_ttl_seconds or 0) > 300 for c in calls):
            return "anthropic-1h"
        return "anthropic"
    return DEFAULT_PROFILE


def _as_sent(call: LoggedCall) -> LoggedCall:
    """An Anthropic request that asks for no caching is simulated with no breakpoint (the
    profile's default marks stand for a client whose marks are unknown, not for none)."""
    if call.cache_mode == "none" and call.request.cache_breakpoints is None:
        return call.with_request(dataclasses.replace(call.request, cache_breakpoints=()))
    return call


def _uncached(exp: Explanation) -> Explanation:
    """A change after a request that cached nothing loses nothing."""
    if exp.cause == "none":
        return exp
    note = f"request changed ({exp.cause}: {exp.summary}), but nothing was cached to lose"
    return dataclasses.replace(
        exp,
        cause="none",
        detail="uncached",
        summary="the previous request carries no cache_control (and asks for no automatic "
        "caching): Anthropic cached nothing",
        remissed_tokens=0,
        avoidable=False,
        notes=(*exp.notes, note),
    )


def _hidden_prefix(threads: Sequence[Thread], counter: TokenCounter) -> int:
    """Prompt tokens the providers billed beyond what the requests show (min over threads)."""
    found: list[int] = []
    for thread in threads:
        first = thread.calls[0]
        if first.usage is None or first.usage.input_tokens <= 0:
            continue
        shown = render_request(first.request, counter).total_tokens
        found.append(max(0, first.usage.input_tokens - shown))
    return min(found) if found else 0


def _provider_miss(
    exp: Explanation,
    call: LoggedCall,
    previous: LoggedCall,
    simulated: Usage,
    profile: ProviderProfile,
) -> Explanation:
    """Reclassify a clean extension the provider still missed (recorded usage says so)."""
    rec, prev = call.usage, previous.usage
    if exp.cause != "none" or rec is None or prev is None or rec.input_tokens <= 0:
        return exp
    gap = simulated.hit_rate - rec.hit_rate
    if gap < PROVIDER_MISS_GAP:
        return exp
    lost = round(simulated.input_tokens * gap)
    if exp.cause == "none" and exp.idle_seconds is not None and profile.ttl_seconds is not None:
        expired = exp.idle_seconds > profile.ttl_seconds
    else:
        expired = False
    edits = _context_edits(call)
    cause: CauseKind = "ttl_expiry" if expired else "provider_edit" if edits else "provider_miss"
    idle = "" if exp.idle_seconds is None else f" after {exp.idle_seconds:.0f} s idle"
    if cause == "provider_edit":
        why = f"the request asks the provider to edit its context ({', '.join(edits)})"
    else:
        why = "the cache expired" if expired else "evicted or routed elsewhere"
    summary = (
        f"provider reported {rec.cached_tokens:,} of {rec.input_tokens:,} prompt tokens cached"
        f"{idle}, though the request extends the previous one (simulated: "
        f"{simulated.cached_tokens:,} of {simulated.input_tokens:,}): {why}; "
        f"~{lost:,} tokens re-missed"
    )
    return dataclasses.replace(
        exp, cause=cause, detail="recorded", summary=summary, remissed_tokens=lost
    )


def _context_edits(call: LoggedCall) -> list[str]:
    """The server-side context edits a request asks for (Anthropic `context_management`
    edit types, or `compaction` for OpenAI Responses), bounded; empty when none."""
    value = call.params.get("context_management")
    if not value:
        return []
    entries = value.get("edits") if isinstance(value, dict) else value
    if not isinstance(entries, list):
        return ["context_management"]
    kinds = [str(e.get("type"))[:60] for e in entries[:8] if isinstance(e, dict) and e.get("type")]
    return kinds or ["context_management"]


def audit_calls(
    calls: Sequence[LoggedCall],
    *,
    provider: ProviderProfile | str | None = None,
    hidden_prefix_tokens: int | None = None,
    counter: TokenCounter | None = None,
    path: str = "",
) -> AuditReport:
    """Audit logged calls.

    Args:
        calls: the calls, in the order they were made.
        provider: profile or name; None picks `default_profile_for(calls)`.
        hidden_prefix_tokens: opaque tokens before every request; None estimates them from
            the recorded usage of each thread's first call (0 without recorded usage).
        counter: token counter (default: the shared o200k_base counter).
        path: the file name, for the report.

    Raises:
        ValueError: on an unknown profile or a negative hidden prefix.
    """
    if provider is None:
        provider = default_profile_for(calls)
    profile = get_profile(provider) if isinstance(provider, str) else provider
    counter = counter or get_counter()
    # Positions in the given order identify calls (indices from several files may repeat).
    calls = [
        _as_sent(c if c.index == i else dataclasses.replace(c, index=i))
        for i, c in enumerate(calls)
    ]
    threads = group_threads(calls)
    if hidden_prefix_tokens is None:
        hidden_prefix_tokens = _hidden_prefix(threads, counter)
    if hidden_prefix_tokens < 0:
        raise ValueError("hidden_prefix_tokens must be >= 0")
    sim = CacheSimulator(profile, counter=counter, hidden_prefix_tokens=hidden_prefix_tokens)
    where: dict[int, tuple[Thread, int]] = {}
    for thread in threads:
        for ordinal, call in enumerate(thread.calls):
            where[call.index] = (thread, ordinal)
    results: dict[int, CallAudit] = {}
    for index in sorted(where):
        thread, ordinal = where[index]
        call = thread.calls[ordinal]
        output = call.usage.output_tokens if call.usage is not None else 0
        try:
            simulated = sim.submit(call.request, output_tokens=output)
        except ValueError:
            # Breakpoints the profile does not accept: let the profile place its own.
            request = dataclasses.replace(call.request, cache_breakpoints=None)
            simulated = sim.submit(request, output_tokens=output)
        exp = None
        if ordinal > 0:
            previous = thread.calls[ordinal - 1]
            exp = explain(
                previous,
                call,
                profile=profile,
                counter=counter,
                hidden_prefix_tokens=hidden_prefix_tokens,
            )
            exp = _provider_miss(exp, call, previous, simulated, profile)
            if previous.cache_mode == "none":
                exp = _uncached(exp)
        results[index] = CallAudit(
            thread.id, ordinal, call, simulated, profile.cost(simulated), exp
        )
    audited = [ThreadAudit(t.id, t.key, [results[c.index] for c in t.calls]) for t in threads]
    return AuditReport(
        path=path,
        profile=profile,
        hidden_prefix_tokens=hidden_prefix_tokens,
        threads=audited,
        calls=[results[i] for i in sorted(results)],
        notes=[note for c in calls for note in c.notes],
    )


def audit_file(
    path: str | os.PathLike[str],
    *,
    provider: ProviderProfile | str | None = None,
    hidden_prefix_tokens: int | None = None,
    counter: TokenCounter | None = None,
) -> AuditReport:
    """Audit a vcrpy cassette (YAML or JSON) or a JSONL request log.

    Raises:
        ValueError: when the file is unreadable or holds no model call, or on a bad option.
    """
    notes: list[str] = []
    calls = load_calls(path, notes=notes)
    report = audit_calls(
        calls,
        provider=provider,
        hidden_prefix_tokens=hidden_prefix_tokens,
        counter=counter,
        path=os.fspath(path),
    )
    report.notes = notes
    return report

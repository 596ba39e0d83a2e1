"""The prompt-cache simulator: cache state, TTL, lookups and usage per request.

Two stores implement the profiles' match rules:

- `_PathStore` (`prefix` and `units` rules: OpenAI automatic, DeepSeek, vLLM) keeps the
  distinct cached *branches* (a request that extends a cached one replaces it), each with its
  last-use time and, for DeepSeek, the sorted token positions of its stored units. A lookup
  compares the request with each live branch (segment keys first, tokens only inside the first
  differing segment).
- `_BreakpointStore` (`breakpoints` rule: Anthropic, OpenAI breakpoint style) keeps the
  prefixes written at breakpoints with their last-use time; a lookup walks back from each
  breakpoint of the request, content-block boundary by boundary (inside a message too),
  within the lookback window of content blocks.

Time comes from `Request.timestamp`; a request without one is placed `LOGICAL_STEP_SECONDS`
(10 s) after the previous request (the first at t = 0).
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field

from cachepilot.sim.profiles import LOGICAL_STEP_SECONDS, ProviderProfile, get_profile
from cachepilot.sim.render import (
    RenderedRequest,
    Request,
    Segment,
    common_prefix,
    render_request,
)
from cachepilot.tokens import TokenCounter, get_counter
from cachepilot.usage import Usage

__all__ = ["CacheSimulator", "SubmitRecord"]


@dataclass(frozen=True, slots=True)
class SubmitRecord:
    """What the simulator saw of one submitted request.

    Attributes:
        timestamp: simulated time of the request.
        total_tokens: prompt tokens, hidden prefix included.
        cached_tokens: tokens billed as cache reads.
        cache_write_tokens: tokens billed as cache writes (0 when the profile does not bill).
        common_prefix_tokens: tokens shared with the previous request (0 for the first).
        prefix_extends: the previous request is a prefix of this one, byte for byte (True for
            the first request: there is nothing to break).
        divergence_segment: index of the first segment that differs from the previous request
            (None when it extends it).
        divergence: that segment's label (`system`, `tool 1`, `message 12`), or None.
        idle_seconds: time since the previous request (None for the first).
        hit_tokens_raw: the matched prefix before the provider's minimum and granularity.
    """

    timestamp: float
    total_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    common_prefix_tokens: int
    prefix_extends: bool
    divergence_segment: int | None
    divergence: str | None
    idle_seconds: float | None
    hit_tokens_raw: int


REPLY_SLACK_TOKENS = 8
"""Tokens a re-sent reply may fall short of `output_tokens` and still count as the reply."""


def _reply_credit(segment: Segment, output_tokens: int, profile: ProviderProfile) -> int:
    """Tokens of a re-sent reply that hit the cached output (0 when it is not the reply).

    The generated reply is cached after its prompt; the next request hits through it only
    when it re-sends the whole reply: an assistant message at least as long as the output
    (within `REPLY_SLACK_TOKENS` or 2 %), without reasoning when the profile says re-sent
    reasoning does not match the generated stream.
    """
    if segment.role != "assistant":
        return 0
    if segment.has_reasoning and profile.reply_with_reasoning_misses:
        return 0
    slack = max(REPLY_SLACK_TOKENS, output_tokens // 50)
    if segment.n_tokens + slack < output_tokens:
        return 0
    return min(output_tokens, segment.n_tokens)


@dataclass(slots=True)
class _Branch:
    req: RenderedRequest
    last_used: float
    units: list[int]
    output_tokens: int = 0


@dataclass(slots=True)
class _PathPlan:
    raw_hit: int
    contained: list[tuple[_Branch, int]]
    """Branches the request extends, each with the end of its reply unit (0 if none)."""
    parent: _Branch | None
    parent_lcp: int


class _PathStore:
    """Cached branches for the `prefix` and `units` rules."""

    def __init__(self, profile: ProviderProfile) -> None:
        self.profile = profile
        self.branches: list[_Branch] = []

    def _alive(self, now: float) -> list[_Branch]:
        ttl = self.profile.ttl_seconds
        if ttl is not None:
            self.branches = [b for b in self.branches if now - b.last_used <= ttl]
        return self.branches

    def lookup(self, req: RenderedRequest, now: float) -> _PathPlan:
        profile = self.profile
        units_rule = profile.match == "units"
        best = 0
        parent: _Branch | None = None
        parent_lcp = -1
        contained: list[tuple[_Branch, int]] = []
        for branch in self._alive(now):
            cached = branch.req
            lcp, same = common_prefix(req, cached)
            extends = lcp >= cached.total_tokens
            credit = 0
            if (
                extends
                and profile.caches_output
                and branch.output_tokens > 0
                and same == len(cached.segments)
                and same < len(req.segments)
            ):
                credit = _reply_credit(req.segments[same], branch.output_tokens, profile)
            if units_rule:
                at = bisect.bisect_right(branch.units, lcp)
                raw = branch.units[at - 1] if at else 0
                if credit:
                    raw = max(raw, cached.total_tokens + credit)
            else:
                raw = lcp + credit
            best = max(best, raw)
            if extends:
                contained.append((branch, cached.total_tokens + credit if credit else 0))
            if lcp >= parent_lcp:
                parent, parent_lcp = branch, lcp
        if profile.recompute_last_token:
            best = min(best, req.total_tokens - 1)
        best = max(0, min(best, req.total_tokens))
        return _PathPlan(best, contained, parent, parent_lcp)

    def commit(self, req: RenderedRequest, plan: _PathPlan, now: float, output: int) -> None:
        units: list[int] = []
        if self.profile.match == "units":
            # The request now holds every unit it contains (refreshed with it), its own input
            # end, and the common prefix with the branch it diverged from (DeepSeek persists
            # a detected common prefix as a unit of its own).
            held: set[int] = {req.total_tokens}
            for branch, reply_end in plan.contained:
                held.update(branch.units)
                if reply_end:
                    held.add(reply_end)
            parent, lcp = plan.parent, plan.parent_lcp
            if parent is not None:
                held.update(u for u in parent.units if u <= lcp)
                diverged = 0 < lcp < min(parent.req.total_tokens, req.total_tokens)
                if diverged and self.profile.detects_common_prefix:
                    held.add(lcp)
            units = sorted(held)
        if plan.contained:
            gone = {id(b) for b, _ in plan.contained}
            self.branches = [b for b in self.branches if id(b) not in gone]
        self.branches.append(_Branch(req, now, units, output))
        if len(self.branches) > self.profile.max_entries:
            self.branches.sort(key=lambda b: b.last_used)
            del self.branches[: len(self.branches) - self.profile.max_entries]


@dataclass(slots=True)
class _Unit:
    keys: array[int]
    """Segment keys of the request that wrote it (the unit is `keys[: segments]`)."""
    segments: int
    end: int
    last_used: float
    open_key: int | None = None
    """Key of its last segment through its last content block (a message segment), by
    which a request whose message there gained blocks at its end still finds it."""


@dataclass(slots=True)
class _BreakpointPlan:
    raw_hit: int
    read: list[_Unit] = field(default_factory=list)
    breakpoints: list[int] = field(default_factory=list)


class _BreakpointStore:
    """Prefixes written at breakpoints, for the `breakpoints` rule.

    Units are indexed by (segment count, key of their last segment); a candidate matches when
    the request's leading segment keys equal the writer's (one array comparison). A lookup
    also checks the content-block boundaries inside a message, as Anthropic does: a unit
    written at the end of a message is found in a request whose message there carries more
    blocks after the same ones (e.g. a text block joined to a user turn). Those units are
    indexed a second time by (segment count, `_Unit.open_key`).
    """

    def __init__(self, profile: ProviderProfile) -> None:
        self.profile = profile
        self.units: dict[tuple[int, int], list[_Unit]] = {}
        self.open_units: dict[tuple[int, int], list[_Unit]] = {}
        self.count = 0

    def breakpoints(self, request: Request, req: RenderedRequest) -> list[int]:
        """Segment indices whose end carries a breakpoint (sorted, distinct)."""
        profile = self.profile
        last = len(req.segments) - 1
        if last < 0:
            return []
        if request.cache_breakpoints is None:
            if profile.default_breakpoints == "end":
                return [last]
            header = req.first_message - 1
            return sorted({i for i in (header, last) if i >= 0})
        out: set[int] = set()
        for index in request.cache_breakpoints:
            if not -1 <= index < req.n_messages:
                raise ValueError(
                    f"cache breakpoint {index} out of range: the request has {req.n_messages} "
                    "messages (use -1 for the end of tools + system)"
                )
            segment = req.message_segment(index)
            if segment >= 0:
                out.add(segment)
        if profile.max_breakpoints is not None and len(out) > profile.max_breakpoints:
            raise ValueError(
                f"{len(out)} cache breakpoints; profile {profile.name!r} allows at most "
                f"{profile.max_breakpoints}"
            )
        return sorted(out)

    def _find(self, req: RenderedRequest, segment: int, now: float) -> _Unit | None:
        """The live unit equal to the request's prefix through `segment`, if any."""
        bucket = self.units.get((segment + 1, req.keys[segment]))
        if not bucket:
            return None
        ttl = self.profile.ttl_seconds
        prefix = req.keys[: segment + 1]
        for unit in bucket:
            if ttl is not None and now - unit.last_used > ttl:
                continue
            if unit.keys[: segment + 1] == prefix:
                return unit
        return None

    def _find_open(self, req: RenderedRequest, segment: int, key: int, now: float) -> _Unit | None:
        """The live unit whose prefix is the request's through segment - 1, then a message
        whose blocks through its last one have content key `key`."""
        bucket = self.open_units.get((segment + 1, key))
        if not bucket:
            return None
        ttl = self.profile.ttl_seconds
        prefix = req.keys[:segment]
        for unit in bucket:
            if ttl is not None and now - unit.last_used > ttl:
                continue
            if unit.keys[:segment] == prefix:
                return unit
        return None

    def _inner_hit(
        self, req: RenderedRequest, k: int, crossed: int, now: float
    ) -> tuple[_Unit, int] | None:
        """A unit ending at a block boundary inside message segment k (the latest one
        within the lookback window), with the tokens it covers; `crossed` blocks lie
        between the breakpoint and the end of segment k."""
        segment = req.segments[k]
        if len(segment.block_keys) < 2 or not self.open_units:
            return None
        lookback = self.profile.lookback_blocks
        before = req.ends[k - 1] if k else 0
        last = len(segment.block_keys) - 1
        for j in range(last - 1, -1, -1):
            if lookback is not None and crossed + last - j > lookback:
                return None
            unit = self._find_open(req, k, segment.block_keys[j], now)
            if unit is not None:
                return unit, before + segment.block_ends[j]
        return None

    def lookup(self, req: RenderedRequest, breakpoints: list[int], now: float) -> _BreakpointPlan:
        lookback = self.profile.lookback_blocks
        plan = _BreakpointPlan(0, breakpoints=breakpoints)
        segments = req.segments
        for point in breakpoints:
            blocks = 0
            k = point
            while k >= 0:
                unit = self._find(req, k, now)
                if unit is not None:
                    plan.read.append(unit)
                    plan.raw_hit = max(plan.raw_hit, req.ends[k])
                    break
                inner = self._inner_hit(req, k, blocks, now)
                if inner is not None:
                    plan.read.append(inner[0])
                    plan.raw_hit = max(plan.raw_hit, inner[1])
                    break
                if lookback is not None:
                    # Moving to the boundary before segment k puts its blocks in between.
                    blocks += segments[k].blocks
                    if blocks > lookback:
                        break
                k -= 1
        return plan

    def commit(self, req: RenderedRequest, plan: _BreakpointPlan, now: float) -> int:
        """Refresh what was read, write the breakpoints; returns the tokens written."""
        for read in plan.read:
            read.last_used = now
        minimum = self.profile.min_cacheable_tokens
        written_to = 0
        for point in plan.breakpoints:
            end = req.ends[point]
            if end < minimum or end <= 0:
                continue
            known = self._find(req, point, now)
            if known is None:
                block_keys = req.segments[point].block_keys
                unit = _Unit(req.keys, point + 1, end, now, block_keys[-1] if block_keys else None)
                self._index(unit)
                self.count += 1
            else:
                known.last_used = now
            written_to = max(written_to, end)
        if self.count > 2 * self.profile.max_entries:
            self._trim(now)
        return max(0, written_to - plan.raw_hit)

    def _trim(self, now: float) -> None:
        """Drop expired units, then the least recently used beyond capacity."""
        ttl = self.profile.ttl_seconds
        units = [u for bucket in self.units.values() for u in bucket]
        if ttl is not None:
            units = [u for u in units if now - u.last_used <= ttl]
        units.sort(key=lambda u: u.last_used)
        units = units[max(0, len(units) - self.profile.max_entries) :]
        self.units = {}
        self.open_units = {}
        for unit in units:
            self._index(unit)
        self.count = len(units)

    def _index(self, unit: _Unit) -> None:
        self.units.setdefault((unit.segments, unit.keys[unit.segments - 1]), []).append(unit)
        if unit.open_key is not None:
            self.open_units.setdefault((unit.segments, unit.open_key), []).append(unit)


class CacheSimulator:
    """Simulated provider prompt cache: submit requests, get the usage the provider would bill.

    Args:
        profile: a `ProviderProfile` or a profile name (see `PROFILES`).
        counter: token counter for rendering (default: the shared o200k_base counter).
        hidden_prefix_tokens: opaque tokens prepended to every request (system prompt or tool
            schemas a trace did not record); identical on every call, so they cache.

    Raises:
        ValueError: on an unknown profile name or a negative hidden prefix.
    """

    def __init__(
        self,
        profile: ProviderProfile | str,
        counter: TokenCounter | None = None,
        hidden_prefix_tokens: int = 0,
    ) -> None:
        if isinstance(profile, str):
            profile = get_profile(profile)
        if hidden_prefix_tokens < 0:
            raise ValueError("hidden_prefix_tokens must be >= 0")
        self.profile = profile
        self.counter = counter or get_counter()
        self.hidden_prefix_tokens = hidden_prefix_tokens
        self.last: SubmitRecord | None = None
        """Record of the last `submit` (None before the first)."""
        self.totals = Usage()
        """Sum of the usage of every submitted request since the last reset."""
        self._path = _PathStore(profile)
        self._breaks = _BreakpointStore(profile)
        self._previous: RenderedRequest | None = None
        self._now: float | None = None

    @property
    def time(self) -> float | None:
        """Simulated time of the last request (None before the first)."""
        return self._now

    def reset(self) -> None:
        """Forget the cache, the clock, the last record and the totals."""
        self._path = _PathStore(self.profile)
        self._breaks = _BreakpointStore(self.profile)
        self._previous = None
        self._now = None
        self.last = None
        self.totals = Usage()

    def render(self, request: Request) -> RenderedRequest:
        """The request as this simulator renders it (hidden prefix included)."""
        return render_request(
            request,
            self.counter,
            hidden_prefix_tokens=self.hidden_prefix_tokens,
        )

    def _time_of(self, request: Request) -> float:
        if request.timestamp is not None:
            return float(request.timestamp)
        return 0.0 if self._now is None else self._now + LOGICAL_STEP_SECONDS

    def preview(self, request: Request) -> Usage:
        """The usage `submit` would report now, without changing any state."""
        rendered = self.render(request)
        now = self._time_of(request)
        if self.profile.match == "breakpoints":
            plan = self._breaks.lookup(rendered, self._breaks.breakpoints(request, rendered), now)
            cached = self.profile.billable_hit(plan.raw_hit)
            top = max(
                (
                    rendered.ends[p]
                    for p in plan.breakpoints
                    if rendered.ends[p] >= self.profile.min_cacheable_tokens
                ),
                default=0,
            )
            write = max(0, top - plan.raw_hit) if self.profile.bills_writes else 0
            return Usage(rendered.total_tokens, cached, min(write, rendered.total_tokens - cached))
        saved = list(self._path.branches)
        try:
            path_plan = self._path.lookup(rendered, now)
        finally:
            self._path.branches = saved
        return Usage(rendered.total_tokens, self.profile.billable_hit(path_plan.raw_hit))

    def submit(self, request: Request, output_tokens: int = 0) -> Usage:
        """Send one request through the simulated cache.

        Args:
            request: the request.
            output_tokens: tokens the model generates in reply (reported in the usage; cached
                after the prompt by profiles with `caches_output`).

        Returns:
            The usage the provider would report: every prompt token in `input_tokens`, cache
            reads in `cached_tokens`, billed writes in `cache_write_tokens`.

        Raises:
            ValueError: on negative `output_tokens` or invalid cache breakpoints.
        """
        if output_tokens < 0:
            raise ValueError("output_tokens must be >= 0")
        rendered = self.render(request)
        now = self._time_of(request)
        profile = self.profile
        total = rendered.total_tokens
        if profile.match == "breakpoints":
            points = self._breaks.breakpoints(request, rendered)
            bplan = self._breaks.lookup(rendered, points, now)
            raw = bplan.raw_hit
            written = self._breaks.commit(rendered, bplan, now)
            cached = profile.billable_hit(raw)
            if not profile.bills_writes:
                written = 0
        else:
            pplan = self._path.lookup(rendered, now)
            raw = pplan.raw_hit
            self._path.commit(rendered, pplan, now, output_tokens)
            cached = profile.billable_hit(raw)
            written = 0
        cached = min(cached, total)
        written = min(written, total - cached)
        previous = self._previous
        if previous is None:
            shared, extends, divergence = 0, True, None
        else:
            shared, same = common_prefix(previous, rendered)
            extends = shared >= previous.total_tokens
            divergence = None if extends else same
        self.last = SubmitRecord(
            timestamp=now,
            total_tokens=total,
            cached_tokens=cached,
            cache_write_tokens=written,
            common_prefix_tokens=shared,
            prefix_extends=extends,
            divergence_segment=divergence,
            divergence=(
                rendered.label(divergence)
                if divergence is not None and divergence < len(rendered.segments)
                else None
            ),
            idle_seconds=None if self._now is None else now - self._now,
            hit_tokens_raw=raw,
        )
        self._previous = rendered
        self._now = now
        usage = Usage(
            input_tokens=total,
            cached_tokens=cached,
            cache_write_tokens=written,
            output_tokens=output_tokens,
        )
        self.totals = self.totals + usage
        return usage

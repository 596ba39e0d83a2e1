"""Calibration: replay recorded sessions through a profile, compare with the provider's usage.

Each recorded call is replayed as it was sent (every message before that assistant message,
tools and system included) at its recorded time, with the reply's tokens as output. The
hidden prefix (system prompt / tool schemas the trace did not record) is what the first
call billed beyond our rendering of it: `max(0, recorded input − rendered input)`.

Our tokenizer (o200k_base) is not the provider's, so raw token counts differ: calls are
compared on their **hit ratio** (cached / input), aggregates on the hit rate
(Σ cached / Σ input); `input_ratio` shows how far the token totals are apart.

Findings on `../shared/data/traces` (steady state = each session's first call left out):

- DeepSeek (mini-swe-agent 1.1, 13 sessions, 988 calls). Recorded hits are, in 746 of 988
  calls, exactly the previous call's prompt **plus completion** rounded down to 64: the reply
  is cached after its prompt (DeepSeek's documented "unit at the end of the model output").
  The documented rule alone (common prefix with earlier prompts) under-predicts (mean abs
  error 0.0132 → 0.0061 with reply caching). With deepseek-reasoner the hit is the previous
  prompt only: a reply re-sent with its reasoning does not match the generated stream
  (`reply_with_reasoning_misses`; reasoner mean abs error 0.0172 → 0.0041). Residuals: one
  session (django-11905) where units appeared one or two calls late (not modelled: other
  sessions with the same spacing hit at once), a few hits from other runs of the same task,
  and first calls hitting the shared tool-schema/system prefix of other sessions (320 tokens).
- Claude Code (9 sessions with 2+ calls, 331 calls, profile `anthropic-1h`): every call
  reads exactly the previous request's last breakpoint and writes the new tokens, as the
  default breakpoints (tools+system, last message) predict; writes are recorded as 1-hour
  TTL, and a 576 s idle gap still hit. No call added more than 19 blocks, so the 20-block
  lookback is not exercised by these traces. Unpredictable from the trace: 3 breaks back to
  the tools+system breakpoint right after a `<task-notification>` message and one after an
  MCP reconnect (client-side rewrites of early context), one full miss after 19 min idle
  (provider eviction within the TTL), and first calls (sub-agents, compaction calls) reading
  caches warmed by other sessions.
- Gemini 3 Pro (mini-swe-agent 1.15, 15 sessions, 635 calls after the first, profile
  `gemini-3-pro`): implicit caching is best effort. The provider served 85.1 % of input tokens
  from cache where prefix matching predicts 95.5 % (mean abs error 0.159 per call, median
  0.078): 58 calls (9 %) missed fully although their prefix had been sent seconds before, and
  a hit covered a median 92 % of the previous prompt (p10 73 %), with no fixed granularity.
  Neither is modelled: the Gemini profiles' hits are an upper bound.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachepilot.sim.engine import CacheSimulator
from cachepilot.sim.profiles import DEFAULT_PROFILE, ProviderProfile, get_profile
from cachepilot.sim.render import Request, render_request
from cachepilot.tokens import TokenCounter, get_counter
from cachepilot.usage import Usage
from cachepilot_bench.traces import Session, load_paths, split_system

__all__ = [
    "DEFAULT_TOLERANCES",
    "CalibrationReport",
    "CalibrationSummary",
    "CallComparison",
    "SessionCalibration",
    "calibrate",
    "calibrate_paths",
    "calibrate_session",
    "estimate_hidden_prefix",
    "profile_for",
    "summarize",
]

DEFAULT_TOLERANCES: tuple[float, ...] = (0.01, 0.02, 0.05, 0.10)
"""Absolute hit-ratio tolerances (0.02 = ±2 percentage points) reported per summary."""


@dataclass(frozen=True, slots=True)
class CallComparison:
    """One recorded call next to its simulated usage."""

    session_id: str
    call: int
    """Ordinal of the call in its session (0 = first)."""
    message_index: int
    """Index of the assistant message in `Session.messages`."""
    timestamp: float | None
    recorded: Usage
    predicted: Usage

    @property
    def recorded_hit_ratio(self) -> float:
        """Recorded cached / recorded input."""
        return self.recorded.hit_rate

    @property
    def predicted_hit_ratio(self) -> float:
        """Predicted cached / predicted input."""
        return self.predicted.hit_rate

    @property
    def error(self) -> float:
        """Predicted minus recorded hit ratio."""
        return self.predicted_hit_ratio - self.recorded_hit_ratio

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "session_id": self.session_id,
            "call": self.call,
            "message_index": self.message_index,
            "timestamp": self.timestamp,
            "recorded": self.recorded.to_dict(),
            "predicted": self.predicted.to_dict(),
            "recorded_hit_ratio": self.recorded_hit_ratio,
            "predicted_hit_ratio": self.predicted_hit_ratio,
        }


@dataclass(frozen=True, slots=True)
class SessionCalibration:
    """All compared calls of one session."""

    session_id: str
    source: str
    profile: str
    hidden_prefix_tokens: int
    calls: tuple[CallComparison, ...]


@dataclass(frozen=True, slots=True)
class CalibrationSummary:
    """Aggregate comparison over a set of calls.

    Attributes:
        source: trace format (e.g. `claude-code`).
        profile: simulator profile used.
        sessions: sessions with at least one compared call.
        calls: compared calls.
        recorded_hit_rate: Σ recorded cached / Σ recorded input.
        predicted_hit_rate: Σ predicted cached / Σ predicted input.
        hit_rate_rel_error: predicted_hit_rate / recorded_hit_rate − 1.
        hit_tokens_rel_error: Σ predicted cached / Σ recorded cached − 1 (raw tokens: biased
            by the tokenizer difference, see `input_ratio`).
        input_ratio: Σ predicted input / Σ recorded input.
        recorded_write_rate: Σ recorded cache writes / Σ recorded input.
        predicted_write_rate: Σ predicted cache writes / Σ predicted input.
        mean_abs_error: mean |predicted − recorded| hit ratio per call.
        median_abs_error: median of the same.
        within: tolerance → share of calls whose hit ratio is within ± tolerance.
    """

    source: str
    profile: str
    sessions: int
    calls: int
    recorded_hit_rate: float
    predicted_hit_rate: float
    hit_rate_rel_error: float
    hit_tokens_rel_error: float
    input_ratio: float
    recorded_write_rate: float
    predicted_write_rate: float
    mean_abs_error: float
    median_abs_error: float
    within: dict[float, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tolerance keys as strings)."""
        return {
            "source": self.source,
            "profile": self.profile,
            "sessions": self.sessions,
            "calls": self.calls,
            "recorded_hit_rate": self.recorded_hit_rate,
            "predicted_hit_rate": self.predicted_hit_rate,
            "hit_rate_rel_error": self.hit_rate_rel_error,
            "hit_tokens_rel_error": self.hit_tokens_rel_error,
            "input_ratio": self.input_ratio,
            "recorded_write_rate": self.recorded_write_rate,
            "predicted_write_rate": self.predicted_write_rate,
            "mean_abs_error": self.mean_abs_error,
            "median_abs_error": self.median_abs_error,
            "within": {f"{k:g}": v for k, v in self.within.items()},
        }


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    """Per-source summaries over all calls and over steady-state calls (first calls left out).

    A session's first call can hit a cache warmed by *other* sessions (the provider saw the
    same system prompt and tool schemas before); a per-session replay cannot know that, so
    `steady` leaves first calls out.
    """

    sessions: tuple[SessionCalibration, ...]
    summaries: dict[str, CalibrationSummary]
    """Source → summary over every compared call."""
    steady: dict[str, CalibrationSummary]
    """Source → summary without each session's first call."""

    def outliers(self, threshold: float = 0.10) -> list[CallComparison]:
        """Calls whose hit ratio is off by more than `threshold`, worst first."""
        rows = [c for s in self.sessions for c in s.calls if abs(c.error) > threshold]
        return sorted(rows, key=lambda c: -abs(c.error))

    def to_dict(self, *, calls: bool = False) -> dict[str, Any]:
        """JSON-ready dict; per-call rows only when `calls`."""
        out: dict[str, Any] = {
            "summaries": {k: v.to_dict() for k, v in self.summaries.items()},
            "steady": {k: v.to_dict() for k, v in self.steady.items()},
            "sessions": [
                {
                    "session_id": s.session_id,
                    "source": s.source,
                    "profile": s.profile,
                    "hidden_prefix_tokens": s.hidden_prefix_tokens,
                    "calls": len(s.calls),
                }
                for s in self.sessions
            ],
        }
        if calls:
            out["calls"] = [c.to_dict() for s in self.sessions for c in s.calls]
        return out


def profile_for(session: Session) -> ProviderProfile:
    """The profile matching a session's provider (by source and recorded model name).

    Claude Code → `anthropic-1h` (Claude Code writes with the 1-hour TTL); DeepSeek models →
    `deepseek`; Gemini models → the Gemini profile of their generation and tier
    (`gemini-2.5-flash` when none matches); OpenAI models → the default; anything else → the
    default.
    """
    models = " ".join(m for m in (session.model, *(c.model for c in session.calls)) if m).lower()
    if "gemini" in models:
        for name in ("gemini-3-pro", "gemini-3-flash", "gemini-2.5-pro", "gemini-2.5-flash"):
            if name in models:
                return get_profile(name)
        return get_profile("gemini-2.5-flash")
    if session.source == "claude-code" or "claude" in models:
        return get_profile("anthropic-1h")
    if "deepseek" in models:
        return get_profile("deepseek")
    return get_profile(DEFAULT_PROFILE)


def estimate_hidden_prefix(session: Session, counter: TokenCounter) -> int:
    """Prompt tokens the first recorded call billed beyond what the trace shows (0 if unknown).

    System prompts and tool schemas a trace did not record still cost tokens on every call;
    the first call's recorded input minus our rendering of what it shows reveals their size.
    """
    system, body = split_system(session.messages)
    offset = len(session.messages) - len(body)
    first = next((i for i, m in enumerate(body) if m.role == "assistant"), None)
    if first is None:
        return 0
    call = session.call_for(first + offset)
    if call is None or call.usage is None or call.usage.input_tokens <= 0:
        return 0
    shown = render_request(Request(system, body[:first], session.tools), counter).total_tokens
    return max(0, call.usage.input_tokens - shown)


def calibrate_session(
    session: Session,
    profile: ProviderProfile | str | None = None,
    counter: TokenCounter | None = None,
    *,
    hidden_prefix_tokens: int | None = None,
) -> SessionCalibration:
    """Replay one session's recorded calls and pair each with the simulated usage.

    Args:
        session: a loaded session; calls without recorded usage are replayed (they warm the
            cache) but not compared.
        profile: profile or name; None picks `profile_for(session)`.
        counter: token counter (default: the shared o200k_base one).
        hidden_prefix_tokens: override the hidden prefix derived from the first call.
    """
    if profile is None:
        profile = profile_for(session)
    elif isinstance(profile, str):
        profile = get_profile(profile)
    counter = counter or get_counter()
    system, body = split_system(session.messages)
    offset = len(session.messages) - len(body)
    calls = [i for i, m in enumerate(body) if m.role == "assistant"]
    if hidden_prefix_tokens is None:
        hidden_prefix_tokens = estimate_hidden_prefix(session, counter)
    # A client that rebuilds its (unrecorded) prefix on every user turn, e.g. a timestamp in
    # the system prompt and reshuffled tools: the hidden prefix is new text on each turn.
    per_turn = session.meta.get("hidden_prefix_changes") == "per-user-turn"
    sim = CacheSimulator(
        profile, counter=counter, hidden_prefix_tokens=0 if per_turn else hidden_prefix_tokens
    )
    rows: list[CallComparison] = []
    for ordinal, index in enumerate(calls):
        recorded = session.call_for(index + offset)
        shown_system = system
        if per_turn:
            turn = sum(1 for m in body[:index] if m.role == "user")
            hidden = f"[hidden prefix of user turn {turn}]" + " x" * hidden_prefix_tokens
            shown_system = hidden if system is None else f"{hidden}\n{system}"
        request = Request(
            shown_system,
            body[:index],
            session.tools,
            timestamp=recorded.timestamp if recorded else None,
        )
        predicted = sim.submit(request, output_tokens=counter.count_message(body[index]))
        if recorded is None or recorded.usage is None or recorded.usage.input_tokens <= 0:
            continue
        rows.append(
            CallComparison(
                session_id=session.id,
                call=ordinal,
                message_index=index + offset,
                timestamp=recorded.timestamp,
                recorded=recorded.usage,
                predicted=predicted,
            )
        )
    return SessionCalibration(
        session_id=session.id,
        source=session.source,
        profile=profile.name,
        hidden_prefix_tokens=hidden_prefix_tokens,
        calls=tuple(rows),
    )


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def summarize(
    sessions: Sequence[SessionCalibration],
    *,
    source: str = "",
    skip_first: bool = False,
    tolerances: Sequence[float] = DEFAULT_TOLERANCES,
) -> CalibrationSummary:
    """Aggregate the compared calls of some sessions.

    Args:
        sessions: calibrated sessions.
        source: label for the summary (default: the sessions' common source).
        skip_first: leave out each session's first call (steady state).
        tolerances: absolute hit-ratio tolerances to report shares for.
    """
    rows = [c for s in sessions for c in s.calls if not (skip_first and c.call == 0)]
    used = {c.session_id for c in rows}
    rec_in = sum(c.recorded.input_tokens for c in rows)
    pred_in = sum(c.predicted.input_tokens for c in rows)
    rec_hit = sum(c.recorded.cached_tokens for c in rows)
    pred_hit = sum(c.predicted.cached_tokens for c in rows)
    errors = sorted(abs(c.error) for c in rows)
    n = len(errors)
    median = math.nan
    if n:
        median = errors[n // 2] if n % 2 else (errors[n // 2 - 1] + errors[n // 2]) / 2
    profiles = sorted({s.profile for s in sessions})
    sources = sorted({s.source for s in sessions})
    recorded_rate = _ratio(rec_hit, rec_in)
    predicted_rate = _ratio(pred_hit, pred_in)
    return CalibrationSummary(
        source=source or ",".join(sources),
        profile=",".join(profiles),
        sessions=len(used),
        calls=n,
        recorded_hit_rate=recorded_rate,
        predicted_hit_rate=predicted_rate,
        hit_rate_rel_error=_ratio(predicted_rate, recorded_rate) - 1,
        hit_tokens_rel_error=_ratio(pred_hit, rec_hit) - 1,
        input_ratio=_ratio(pred_in, rec_in),
        recorded_write_rate=_ratio(sum(c.recorded.cache_write_tokens for c in rows), rec_in),
        predicted_write_rate=_ratio(sum(c.predicted.cache_write_tokens for c in rows), pred_in),
        mean_abs_error=sum(errors) / n if n else math.nan,
        median_abs_error=median,
        within={
            t: (sum(1 for e in errors if e <= t + 1e-12) / n if n else math.nan) for t in tolerances
        },
    )


def calibrate(
    sessions: Iterable[Session],
    profile: ProviderProfile | str | None = None,
    counter: TokenCounter | None = None,
    *,
    profiles: Mapping[str, ProviderProfile | str] | None = None,
) -> CalibrationReport:
    """Calibrate every session that recorded cache usage, summarized per source.

    Args:
        sessions: loaded sessions (those without recorded usage are skipped).
        profile: one profile for every session; None picks per session (`profile_for`).
        counter: token counter (default: the shared o200k_base one).
        profiles: per-source overrides (`{"claude-code": "anthropic"}`).
    """
    counter = counter or get_counter()
    done: list[SessionCalibration] = []
    for session in sessions:
        if not any(c.usage is not None and c.usage.input_tokens > 0 for c in session.calls):
            continue
        chosen = profile
        if profiles and session.source in profiles:
            chosen = profiles[session.source]
        result = calibrate_session(session, chosen, counter)
        if result.calls:
            done.append(result)
    by_source: dict[str, list[SessionCalibration]] = {}
    for result in done:
        by_source.setdefault(result.source, []).append(result)
    return CalibrationReport(
        sessions=tuple(done),
        summaries={k: summarize(v, source=k) for k, v in by_source.items()},
        steady={k: summarize(v, source=k, skip_first=True) for k, v in by_source.items()},
    )


def calibrate_paths(
    paths: Iterable[str | os.PathLike[str]],
    profile: ProviderProfile | str | None = None,
    counter: TokenCounter | None = None,
) -> CalibrationReport:
    """Load trace files or folders (`cachepilot_bench.traces.load_paths`) and `calibrate` them."""
    return calibrate(load_paths(paths), profile, counter)

"""Replay harness: sessions × strategies through the provider cache simulator (DESIGN §9).

Each assistant message of a session is one model call. The request is the strategy's view of
everything before it; the output is that message. The agent's later actions are taken as
recorded. Each (session, strategy) pair gets its own simulated provider cache.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Literal

from cachepilot.memory.facts import Fact, FactIndex, view_text
from cachepilot.messages import Message, TextPart, ToolCall, pairing_issues
from cachepilot.pricing import Price, cost
from cachepilot.sim import DEFAULT_PROFILE, CacheSimulator, Request, get_profile, render_request
from cachepilot.tokens import TokenCounter, get_counter
from cachepilot.usage import Usage
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.registry import make_strategy, validate_names
from cachepilot_bench.strategy import (
    CallContext,
    ClientMarks,
    PreparedCall,
    SessionContext,
    Strategy,
)
from cachepilot_bench.traces.session import Session, split_system

__all__ = [
    "ROUND_TRIP_OUTPUT_TOKENS",
    "BenchConfig",
    "CallObserver",
    "CallResult",
    "FactCheck",
    "SessionResult",
    "chain_sessions",
    "check_facts",
    "prepare_sessions",
    "round_trip",
    "run_bench",
    "run_session",
    "split_system",
]

logger = logging.getLogger(__name__)

Mode = Literal["isolated", "continuous"]
CallObserver = Callable[[int, PreparedCall, Sequence[Fact]], None]
"""Called after each recorded call with the transcript index of the assistant message, the
strategy's view and the facts needed there that the view does not show."""
RECALL_MAX_CHARS = 20_000
"""Size cap of one recall answer (the recall tool's default `max_chars`)."""
ROUND_TRIP_OUTPUT_TOKENS = 40
"""Output tokens charged for the extra call that fetches a lost fact."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Settings of one benchmark run."""

    provider: str = DEFAULT_PROFILE
    """Provider profile name (see `cachepilot.sim.PROFILES`)."""
    mode: Mode = "isolated"
    """`isolated`: one trace per session; `continuous`: traces of one source chained."""
    encoding: str = "o200k_base"
    """Token encoding used for every count."""
    chain: int = 4
    """Continuous mode: at most this many traces chained into one session."""
    context_window: int | None = None
    """Usable input window in tokens; None takes the provider profile's."""
    workers: int = 0
    """Processes for the replay; 0 picks min(cores, sessions)."""
    client_marks: ClientMarks = "default"
    """On an explicit-breakpoint provider (Anthropic), what the agent marks itself: `default`
    (the profile's default: tools + system and the last message) or `none`. Strategies that
    place their own marks add them to these."""

    def __post_init__(self) -> None:
        if self.mode not in ("isolated", "continuous"):
            raise ValueError(f"mode must be 'isolated' or 'continuous', not {self.mode!r}")
        if self.chain < 1:
            raise ValueError("chain must be >= 1")
        if self.context_window is not None and self.context_window < 1_000:
            raise ValueError("context_window must be >= 1000 tokens")
        if self.workers < 0:
            raise ValueError("workers must be >= 0")
        if self.client_marks not in ("default", "none"):
            raise ValueError(f"client_marks must be 'default' or 'none', not {self.client_marks!r}")
        get_profile(self.provider)  # fails fast on an unknown profile


@dataclass(frozen=True, slots=True)
class CallResult:
    """One billed model call of one strategy."""

    call_number: int
    kind: Literal["call", "extra", "round_trip"]
    """`call`: the recorded call; `extra`: a strategy's own call (summarizer); `round_trip`:
    the fetch charged for a fact missing from the view."""
    usage: Usage
    input_cost_usd: float
    cost_usd: float
    prefix_extends: bool
    """The request started with the previous request of the thread."""
    maintenance: bool
    facts_needed: int = 0
    facts_visible: int = 0
    facts_recoverable: int = 0
    overhead_ms: float = 0.0


@dataclass(slots=True)
class SessionResult:
    """All calls of one (session, strategy) replay."""

    session_id: str
    source: str
    strategy: str
    can_recall: bool = False
    calls: list[CallResult] = field(default_factory=list)
    error: str | None = None
    stats: dict[str, float] = field(default_factory=dict)
    """The strategy's own counters at the end of the session."""


def _prefixed_ids(message: Message, prefix: str) -> Message:
    if message.role == "tool" and message.tool_call_id:
        return replace(message, tool_call_id=prefix + message.tool_call_id)
    if message.tool_calls:
        calls = tuple(replace(c, id=prefix + c.id) for c in message.tool_calls)
        return replace(message, tool_calls=calls)
    return message


def chain_sessions(sessions: Sequence[Session], chain: int) -> list[Session]:
    """Continuous mode: chain up to `chain` traces of one source folder into one session.

    Later traces keep their messages (tool-call ids prefixed so they stay unique); a system
    prompt equal to the first one is dropped, a different one becomes a user message. Times
    are shifted so the chained session runs forward.
    """
    groups: dict[tuple[str, str], list[Session]] = {}
    for session in sessions:
        folder = os.path.dirname(os.path.dirname(session.id)) if "/" in session.id else ""
        groups.setdefault((session.source, folder), []).append(session)
    out: list[Session] = []
    for (source, folder), members in groups.items():
        for start in range(0, len(members), chain):
            part = members[start : start + chain]
            if len(part) == 1:
                out.append(part[0])
                continue
            first_system, _ = split_system(part[0].messages)
            messages: list[Message] = []
            calls = []
            clock: float | None = None
            for n, member in enumerate(part):
                system, body = split_system(member.messages)
                _close_pending_calls(messages)
                if n == 0:
                    messages.extend(member.messages[: len(member.messages) - len(body)])
                elif system and system != first_system:
                    messages.append(Message(role="user", content=system))
                offset_index = len(messages)
                prefix = f"s{n}_" if n else ""
                messages.extend(_prefixed_ids(m, prefix) if prefix else m for m in body)
                stamps = [c.timestamp for c in member.calls if c.timestamp is not None]
                shift = 0.0
                if clock is not None and stamps:
                    shift = clock + 60.0 - min(stamps)
                base = len(member.messages) - len(body)
                for rec in member.calls:
                    ts = rec.timestamp + shift if rec.timestamp is not None else None
                    calls.append(replace(rec, index=rec.index - base + offset_index, timestamp=ts))
                if stamps:
                    clock = max(stamps) + shift
            out.append(
                Session(
                    id=f"{source}:{folder or '.'}#chain{start // chain}",
                    source=source,
                    messages=messages,
                    tools=part[0].tools,
                    calls=calls,
                    model=part[0].model,
                    meta={"chained": [m.id for m in part]},
                )
            )
    return out


SEAM_RESULT = "[no result: the recorded session ended before this call returned]"


def _close_pending_calls(messages: list[Message]) -> None:
    """Answer calls left pending at the end of a chained trace, so pairing holds at the seam."""
    issues = pairing_issues(messages, allow_pending_tail=False)
    pending = [
        i for i in issues if i.kind == "unanswered_call" and i.index == _last_assistant(messages)
    ]
    for issue in pending:
        call = next(c for c in messages[issue.index].tool_calls if c.id == issue.call_id)
        messages.append(
            Message(role="tool", content=SEAM_RESULT, tool_call_id=call.id, name=call.name)
        )


def _last_assistant(messages: Sequence[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            return i
    return -1


def _round_trip_request(view: PreparedCall, source: Message, can_recall: bool) -> Request:
    """The extra call an agent makes to get a lost fact back: recall, or re-run the tool."""
    text = source.text
    if can_recall:
        text = text[:RECALL_MAX_CHARS]
        call = ToolCall(id="fetch_lost_fact", name="recall", arguments='{"ref": "<ref>"}')
    else:
        call = ToolCall(id="fetch_lost_fact", name=source.name or "tool", arguments="{}")
    messages = [
        *view.messages,
        Message(role="assistant", content=(TextPart(""),), tool_calls=(call,)),
        Message(role="tool", content=text, tool_call_id=call.id, name=call.name),
    ]
    return Request(system=view.system, messages=messages, tools=view.tools)


def _round_trip_marks(
    view: PreparedCall, client_marks: tuple[int, ...] | None
) -> tuple[int, ...] | None:
    """Cache marks of the round trip after `view`: a strategy that marks its own requests
    marks this one too (its last mark moves to the round trip's end, two messages on)."""
    if view.cache_breakpoints is None:
        return client_marks
    marks = sorted(set(view.cache_breakpoints))
    end = len(view.messages) + 1
    if marks and marks[-1] == len(view.messages) - 1:
        marks[-1] = end
    elif len(marks) < 4:
        marks.append(end)
    return tuple(marks)


def round_trip(
    view: PreparedCall, source: Message, can_recall: bool, client_marks: tuple[int, ...] | None
) -> Request:
    """The extra call after `view` that gets back a fact of `source` the request lost
    (recall, or re-running the tool), marked as `view` is (`client_marks` when it is not)."""
    request = _round_trip_request(view, source, can_recall)
    return replace(request, cache_breakpoints=_round_trip_marks(view, client_marks))


@dataclass(frozen=True, slots=True)
class FactCheck:
    """Which facts a call needs are in its request, and which only in the archive."""

    visible: int
    """Facts in the request's text."""
    recoverable: int
    """Facts in the request's text or in the archive."""
    lost_source: int | None
    """Transcript index of the tool output of the first fact not in the request (None when
    every fact is visible)."""
    missed: tuple[Fact, ...] = ()
    """The facts not in the request's text."""


def check_facts(needed: Sequence[Fact], text: str, archive_text: str) -> FactCheck:
    """Check `needed` against a request's text and the archived originals (joined by NUL;
    empty when the strategy cannot recall)."""
    visible = recoverable = 0
    lost_source: int | None = None
    missed: list[Fact] = []
    for fact in needed:
        if fact.text in text:
            visible += 1
            recoverable += 1
            continue
        missed.append(fact)
        if archive_text and fact.text in archive_text:
            recoverable += 1
            lost_source = fact.source_index if lost_source is None else lost_source
        elif lost_source is None:
            lost_source = fact.source_index
    return FactCheck(visible, recoverable, lost_source, tuple(missed))


def run_session(
    session: Session,
    strategy: Strategy,
    config: BenchConfig,
    *,
    counter: TokenCounter | None = None,
    facts: FactIndex | None = None,
    hidden_prefix_tokens: int | None = None,
    peak_tokens: int | None = None,
    observe: CallObserver | None = None,
) -> SessionResult:
    """Replay one session through one strategy. Strategy errors end the replay, not the run.

    `observe` (optional) sees every call's view and the needed facts it does not show
    (`cachepilot_bench.losses` explains them).
    """
    counter = counter or get_counter(config.encoding)
    profile = get_profile(config.provider)
    system, body = split_system(session.messages)
    offset = len(session.messages) - len(body)
    facts = facts or FactIndex(body)
    hidden = (
        estimate_hidden_prefix(session, counter)
        if hidden_prefix_tokens is None
        else hidden_prefix_tokens
    )
    if peak_tokens is None:
        peak_tokens = render_request(
            Request(system=system, messages=body, tools=session.tools), counter
        ).total_tokens
    sim = CacheSimulator(profile, counter=counter, hidden_prefix_tokens=hidden)
    result = SessionResult(session.id, session.source, strategy.name, strategy.can_recall)
    window = config.context_window or profile.context_window
    try:
        strategy.start(
            SessionContext(
                session_id=session.id,
                system=system,
                tools=session.tools,
                context_window=window,
                counter=counter,
                trace_peak_tokens=peak_tokens,
                provider=config.provider,
                hidden_prefix_tokens=hidden,
                client_marks=config.client_marks,
            )
        )
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        logger.warning("strategy %s failed to start on %s: %s", strategy.name, session.id, exc)
        return result
    # The agent's own marks on requests a strategy does not mark itself: None lets the
    # simulator apply the profile's default; () is a request without marks.
    client_marks: tuple[int, ...] | None = None if config.client_marks == "default" else ()
    per_call_system = session.meta.get("system_per_call")
    archive: list[str] = []
    last_view: PreparedCall | None = None
    previous = 0
    call_number = 0
    for index, message in enumerate(body):
        if message.role != "assistant":
            continue
        recorded = session.call_for(index + offset)
        stamp = recorded.timestamp if recorded else None
        ctx = CallContext(
            call_number=call_number,
            new_messages=tuple(body[previous:index]),
            history=body[:index],
            timestamp=stamp,
            system=_system_at(per_call_system, call_number),
        )
        previous = index
        started = time.perf_counter()
        try:
            view = strategy.prepare(ctx)
        except Exception as exc:
            result.error = f"call {call_number}: {type(exc).__name__}: {exc}"
            logger.warning(
                "strategy %s failed on %s call %d: %s", strategy.name, session.id, call_number, exc
            )
            return result
        overhead_ms = (time.perf_counter() - started) * 1000.0
        if ctx.system is not None and view.system == system:
            # Peers never edit the system prompt: they send what the agent rendered this call.
            view = replace(view, system=ctx.system)
        archive.extend(view.archived)
        for extra in view.extra_calls:
            usage = sim.submit(
                Request(
                    system=extra.system,
                    messages=extra.messages,
                    timestamp=stamp,
                    cache_breakpoints=client_marks,
                ),
                output_tokens=extra.output_tokens,
            )
            result.calls.append(_priced(call_number, "extra", usage, sim, profile.price, False))
        output_tokens = counter.count_message(message)
        marks = client_marks if view.cache_breakpoints is None else tuple(view.cache_breakpoints)
        usage = sim.submit(
            Request(
                system=view.system,
                messages=view.messages,
                tools=view.tools,
                timestamp=stamp,
                cache_breakpoints=marks,
            ),
            output_tokens=output_tokens,
        )
        needed = facts.needed_at(index)
        check = FactCheck(0, 0, None)
        if needed:
            archive_text = "\x00".join(archive) if strategy.can_recall and archive else ""
            check = check_facts(needed, view_text(view.system, view.messages), archive_text)
        result.calls.append(
            replace(
                _priced(call_number, "call", usage, sim, profile.price, view.maintenance),
                prefix_extends=last_view is None or _extends(last_view, view),
                facts_needed=len(needed),
                facts_visible=check.visible,
                facts_recoverable=check.recoverable,
                overhead_ms=overhead_ms,
            )
        )
        last_view = view
        if observe is not None:
            observe(index, view, list(check.missed))
        if check.lost_source is not None:
            request = round_trip(view, body[check.lost_source], strategy.can_recall, client_marks)
            usage = sim.submit(request, output_tokens=ROUND_TRIP_OUTPUT_TOKENS)
            result.calls.append(
                _priced(call_number, "round_trip", usage, sim, profile.price, False)
            )
        call_number += 1
    try:
        result.stats = dict(strategy.stats())
    except Exception as exc:
        logger.warning("strategy %s stats failed on %s: %s", strategy.name, session.id, exc)
    return result


def _system_at(per_call: object, call_number: int) -> str | None:
    if isinstance(per_call, list) and call_number < len(per_call):
        value = per_call[call_number]
        return value if isinstance(value, str) else None
    return None


def _extends(previous: PreparedCall, current: PreparedCall) -> bool:
    """True when `current` starts with `previous` (same system, tools and leading messages)."""
    if previous.system != current.system or list(previous.tools) != list(current.tools):
        return False
    before, now = previous.messages, current.messages
    if len(now) < len(before):
        return False
    return all(a is b or a == b for a, b in zip(before, now, strict=False))


def _priced(  # noqa: PLR0917 - private helper, called positionally in one place
    call_number: int,
    kind: Literal["call", "extra", "round_trip"],
    usage: Usage,
    sim: CacheSimulator,
    price: Price,
    maintenance: bool,
) -> CallResult:
    priced = cost(usage, price)
    return CallResult(
        call_number=call_number,
        kind=kind,
        usage=usage,
        input_cost_usd=priced.input_usd,
        cost_usd=priced.total_usd,
        prefix_extends=sim.last.prefix_extends if sim.last is not None else True,
        maintenance=maintenance,
    )


def prepare_sessions(sessions: Iterable[Session], config: BenchConfig) -> list[Session]:
    """Sessions as the mode wants them (chained in continuous mode), empty ones dropped."""
    usable = [s for s in sessions if s.assistant_indices]
    if config.mode == "continuous":
        return chain_sessions(usable, config.chain)
    return usable


def _replay_one(args: tuple[Session, Sequence[str], BenchConfig]) -> list[SessionResult]:
    session, names, config = args
    counter = get_counter(config.encoding)
    system, body = split_system(session.messages)
    facts = FactIndex(body)
    hidden = estimate_hidden_prefix(session, counter)
    peak = render_request(
        Request(system=system, messages=body, tools=session.tools), counter
    ).total_tokens
    out = []
    for name in names:
        out.append(
            run_session(
                session,
                make_strategy(name),
                config,
                counter=counter,
                facts=facts,
                hidden_prefix_tokens=hidden,
                peak_tokens=peak,
            )
        )
    return out


def run_bench(
    sessions: Sequence[Session],
    strategies: Sequence[str],
    config: BenchConfig,
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[SessionResult]:
    """Replay every session through every strategy.

    Args:
        sessions: sessions as prepared by `prepare_sessions`.
        strategies: strategy names (validated before anything runs).
        config: the run's settings.
        progress: called as `progress(done, total, session_id)` after each session.

    Returns:
        One result per (session, strategy), sessions in input order.
    """
    names = validate_names(strategies)
    for name in names:
        make_strategy(name)  # fail fast on missing optional dependencies
    jobs = [(s, names, config) for s in sessions]
    workers = config.workers or min(os.cpu_count() or 1, len(jobs))
    results: list[SessionResult] = []
    if workers <= 1 or len(jobs) <= 1:
        for done, job in enumerate(jobs, 1):
            results.extend(_replay_one(job))
            if progress:
                progress(done, len(jobs), job[0].id)
        return results
    # Largest sessions first keeps both workers busy until the end.
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0].messages))
    by_index: dict[int, list[SessionResult]] = {}
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker) as pool:
        futures = {pool.submit(_replay_one, jobs[i]): i for i in order}
        for done, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            by_index[i] = future.result()
            if progress:
                progress(done, len(jobs), jobs[i][0].id)
    for i in range(len(jobs)):
        results.extend(by_index[i])
    return results


def _init_worker() -> None:
    logging.getLogger("cachepilot").setLevel(logging.WARNING)


def p50(values: Sequence[float]) -> float:
    """Median, 0.0 for no values."""
    return float(statistics.median(values)) if values else 0.0

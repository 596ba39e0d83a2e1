"""Why a fact left the view: per-fact accounting of cachepilot's visible-fidelity losses.

The bench counts, at each call, the facts the agent uses that its view does not show
(`cachepilot.memory.facts`). This module replays sessions through a cachepilot setting and, for
every such fact, names the step that removed it from the tool output it came from:

* `ingest`: the ingestion gate's text of that output already lacks it (a reduction pass or
  the size gate's preview);
* `stub` / `evict`: maintenance replaced the output by a stub (pruned, or a finished work
  unit evicted) that does not keep the value;
* `fold`: the output is inside a folded range and the summary does not carry the value;
* `view`: the rendered plan still shows it but the request does not (a request-level step).

`cachepilot bench --losses FILE` writes every loss as a JSON line and prints the counts per
source and cause.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Literal, TextIO

from cachepilot.memory.facts import Fact, message_search_text
from cachepilot.messages import KeyTracker, Message
from cachepilot.plan.epochs import Edit, Plan, render_plan
from cachepilot.tokens import get_counter
from cachepilot_bench.harness import BenchConfig, run_session
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.registry import make_strategy
from cachepilot_bench.strategy import PreparedCall
from cachepilot_bench.traces.session import Session

__all__ = [
    "CAUSES",
    "Cause",
    "Loss",
    "classify",
    "explain_session",
    "explain_sessions",
    "format_losses",
    "loss_counts",
    "write_losses",
]

logger = logging.getLogger(__name__)

Cause = Literal["ingest", "stub", "evict", "args", "fold", "view"]
CAUSES: tuple[Cause, ...] = ("ingest", "stub", "evict", "args", "fold", "view")
"""Every cause, in report order."""
_DETAIL_CHARS = 160


@dataclass(frozen=True, slots=True)
class Loss:
    """One needed fact missing from one call's view, and why."""

    session_id: str
    source: str
    """The trace source of the session."""
    call_index: int
    """Transcript index of the assistant message (the call) that needed the fact."""
    fact: str
    output_index: int
    """Transcript index of the tool output the fact first came from."""
    age: int
    """Messages between that output and the call."""
    cause: Cause
    detail: str
    """A short note: the output's tool, the stub or fold it sits in."""


def classify(
    transcript: Sequence[Message], keys: Sequence[str], plan: Plan, fact: Fact
) -> tuple[Cause, str]:
    """Why `fact` is not in the view of `transcript` (cachepilot's ingested messages, as the
    pilot saw them) under `plan`.

    Args:
        transcript: the messages up to the call, each tool output as the ingestion gate left it.
        keys: their stable keys (`message_keys`).
        plan: the thread's maintenance plan at the call.
        fact: the missing fact; `fact.source_index` indexes `transcript`.
    """
    source = transcript[fact.source_index]
    name = source.name or "tool"
    if fact.text not in message_search_text(source):
        return "ingest", f"{name}: the ingested output ({len(source.text):,} chars) lacks it"
    view = render_plan(transcript, plan, keys)
    position = {key: i for i, key in enumerate(keys)}
    for at, (first, last) in enumerate(view.spans):
        start, end = position.get(first), position.get(last)
        if start is None or end is None or not start <= fact.source_index <= end:
            continue
        fold = view.folds[at]
        if fold is not None:
            return "fold", _fold_detail(fold, end - start + 1)
        shown = view.messages[at]
        if shown is source or fact.text in message_search_text(shown):
            return "view", f"{name}: kept by the plan, not in the request"
        edit = _edit_of(plan, keys[fact.source_index])
        kind: Cause = edit.kind if edit is not None and edit.kind in CAUSES else "stub"
        return kind, f"{name}: {kind} ({len(shown.text):,} chars) " + _short(shown.text)
    return "view", f"{name}: not in the rendered plan"


def _edit_of(plan: Plan, key: str) -> Edit | None:
    found: Edit | None = None
    for epoch in plan.epochs:
        for edit in epoch.edits:
            if edit.kind != "fold" and edit.key == key:
                found = edit
    return found


def _fold_detail(fold: Edit, messages: int) -> str:
    tokens = get_counter().count(fold.text)
    return f"fold of {messages} messages into {tokens:,} tokens"


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _DETAIL_CHARS else flat[: _DETAIL_CHARS - 1] + "…"


def explain_session(session: Session, name: str, config: BenchConfig) -> tuple[list[Loss], int]:
    """Every visible-fidelity loss of strategy `name` (a cachepilot setting) on `session`,
    and how many facts the session's calls needed in all.

    Raises:
        ValueError: when `name` is not a cachepilot strategy.
    """
    strategy = make_strategy(name)
    if not isinstance(strategy, CachePilotStrategy):
        raise ValueError(f"{name!r} is not a cachepilot setting: losses explain cachepilot's")
    tracker = KeyTracker()
    losses: list[Loss] = []

    def observe(index: int, view: PreparedCall, missed: Sequence[Fact]) -> None:
        if not missed:
            return
        transcript = strategy.state
        keys = tracker.keys(transcript)
        plan = strategy.pilot.state(strategy.ctx.session_id).plan
        for fact in missed:
            cause, detail = classify(transcript, keys, plan, fact)
            losses.append(
                Loss(
                    session.id,
                    session.source,
                    index,
                    fact.text,
                    fact.source_index,
                    index - fact.source_index,
                    cause,
                    detail,
                )
            )

    result = run_session(session, strategy, config, observe=observe)
    if result.error:
        logger.warning("losses: %s failed on %s: %s", name, session.id, result.error)
    return losses, sum(c.facts_needed for c in result.calls if c.kind == "call")


def _explain_one(job: tuple[Session, str, BenchConfig]) -> tuple[list[Loss], int]:
    return explain_session(*job)


def explain_sessions(
    sessions: Sequence[Session],
    name: str,
    config: BenchConfig,
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> tuple[list[Loss], dict[str, int]]:
    """`explain_session` over `sessions` (in `config.workers` processes), in session order;
    with the facts needed per source (`all` sums them)."""
    make_strategy(name)  # fail fast on a bad name
    jobs = [(s, name, config) for s in sessions]
    workers = config.workers or min(os.cpu_count() or 1, len(jobs))
    results: list[tuple[list[Loss], int]] = []
    if workers <= 1 or len(jobs) <= 1:
        for done, job in enumerate(jobs, 1):
            results.append(_explain_one(job))
            if progress:
                progress(done, len(jobs), job[0].id)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            found = pool.map(_explain_one, jobs)
            for done, (job, one) in enumerate(zip(jobs, found, strict=True), 1):
                results.append(one)
                if progress:
                    progress(done, len(jobs), job[0].id)
    needed: Counter[str] = Counter()
    for job, (_, count) in zip(jobs, results, strict=True):
        needed[job[0].source] += count
        needed["all"] += count
    return [loss for losses, _ in results for loss in losses], dict(needed)


def loss_counts(losses: Iterable[Loss]) -> dict[str, dict[str, int]]:
    """Losses per source and cause (`all` sums the sources)."""
    out: dict[str, Counter[str]] = {"all": Counter()}
    for loss in losses:
        out.setdefault(loss.source, Counter())[loss.cause] += 1
        out["all"][loss.cause] += 1
    return {source: dict(counts) for source, counts in out.items()}


def format_losses(
    losses: Sequence[Loss], needed: Mapping[str, int] | None = None, *, name: str
) -> str:
    """A table of losses per source and cause; `needed` (facts needed per source) adds the
    share of facts each cause costs."""
    counts = loss_counts(losses)
    for source in needed or {}:
        counts.setdefault(source, {})
    head = f"{'source':<22} " + " ".join(f"{c:>7}" for c in CAUSES) + f" {'lost':>7}"
    lines = [f"facts missing from the view of {name}, by cause", head, "-" * len(head)]
    for source in [*sorted(s for s in counts if s != "all"), "all"]:
        row = counts[source]
        total = sum(row.values())
        cells = " ".join(f"{row.get(c, 0):>7}" for c in CAUSES)
        share = ""
        if needed and needed.get(source):
            share = f"  of {needed[source]:,} needed ({total / needed[source]:.3f})"
        lines.append(f"{source[:22]:<22} {cells} {total:>7}{share}")
    return "\n".join(lines) + "\n"


def write_losses(losses: Iterable[Loss], out: TextIO) -> int:
    """Every loss as one JSON line; returns how many."""
    written = 0
    for loss in losses:
        out.write(json.dumps(asdict(loss), ensure_ascii=False) + "\n")
        written += 1
    return written

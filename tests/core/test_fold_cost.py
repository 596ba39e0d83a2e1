"""What a fold is expected to remove is what it removes (`maintenance.fold_cost`).

A fold's summary is never smaller than the earlier summary that opens its range
(`fold.plan.plan_fold`): the cost model must count only what the range holds beyond it.
Counted as a fresh range instead, a long session whose summary has grown was folded again
every other call, each fold re-missing the whole view to remove one tool output."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold.request import FOLD_HEADER_PREFIX
from cachepilot.maintenance.fold_cost import earlier_summary_tokens, fold_estimate
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.plan.epochs import FOLD_ID_PREFIX
from cachepilot.sim import get_profile
from cachepilot.tokens import get_counter

SYSTEM = "You are a coding agent working in /srv/app."


def _output(n: int) -> str:
    digests = (hashlib.sha256(f"{n}:{i}".encode()).hexdigest()[:24] for i in range(50))
    return "\n".join(f"src/m{n}_{i}.py:{i}: {d} ok" for i, d in enumerate(digests))


def _exchange(n: int) -> list[Message]:
    call = ToolCall(f"call_{n}", "bash", json.dumps({"command": f"make {n}"}))
    return [
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", _output(n), tool_call_id=f"call_{n}", name="bash"),
    ]


def _summary(lines: int) -> Message:
    body = "\n".join(
        f"- src/m{i}.py: {hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(lines)
    )
    return Message("user", f"{FOLD_HEADER_PREFIX} 40 messages]\n{body}", id=f"{FOLD_ID_PREFIX}0")


def test_a_range_opened_by_a_large_summary_removes_only_what_follows_it() -> None:
    counter = get_counter()
    config = MaintenanceConfig()
    price = get_profile("anthropic").price
    tail = [m for n in range(8) for m in _exchange(n)]
    summary = _summary(200)
    view = [Message("user", "Fix the build."), summary, *tail]
    estimate = fold_estimate(view, counter, config, price, 60)
    assert estimate is not None
    earlier = earlier_summary_tokens(summary, counter)
    assert earlier > 4_000
    sizes = [counter.count_message(m) for m in view]
    # The range runs from the summary to the protected tail.
    protected, cut = 0, len(view)
    while protected < config.fold_protect_tokens:
        cut -= 1
        protected += sizes[cut]
    folded = sum(sizes[1:cut])
    assert earlier > int(folded * config.fold_summary_share)  # the floor is what binds
    assert estimate.removed_tokens == folded - earlier
    # The same tokens opened by an ordinary message: a summary of the range's share.
    plain = Message("user", summary.text.replace(FOLD_HEADER_PREFIX, "Notes:"))
    fresh = fold_estimate([view[0], plain, *tail], counter, config, price, 60)
    assert fresh is not None
    plain_folded = folded - sizes[1] + counter.count_message(plain)
    assert fresh.removed_tokens == plain_folded - int(plain_folded * config.fold_summary_share)
    assert fresh.removed_tokens > estimate.removed_tokens


def test_each_fold_removes_about_what_the_cost_model_expected() -> None:
    """A long session whose summary grows: every cost-model fold's recorded removal is
    within a tenth of what the view lost (summary headers and budgets not filled exactly)."""
    counter = get_counter()
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    history = [Message("user", "Fix the build.")]
    previous_view: list[Message] = []
    checked = 0
    for n in range(110):
        new = _exchange(n)
        history.extend(new)
        folds = len(pilot.state("t").plan.epochs)
        _, view, _ = pilot.prepare(SYSTEM, history, [], "t", now=float(n))
        if len(pilot.state("t").plan.epochs) == folds:
            previous_view = view
            continue
        decision = pilot.state("t").decisions[-1]
        assert decision.reason == "cost-model-fold"
        before = sum(counter.count_message(m) for m in [*previous_view, *new])
        after = sum(counter.count_message(m) for m in view)
        removed = before - after
        assert abs(removed - decision.removed_tokens) <= 0.1 * decision.removed_tokens
        checked += 1
        previous_view = view
    assert checked >= 5


def test_the_re_miss_a_later_fold_pays_anyway_counts_the_summary_that_opens_it() -> None:
    """A finished-task fold before a cost-model fold whose range opens with an earlier
    summary of 3,000 tokens: that fold's summary is never smaller (`plan_fold`), so what
    the finished-task fold spares it depends on whether it takes that summary."""
    from cachepilot.maintenance.next_fold import prepaid_remiss

    cfg = MaintenanceConfig(fold_summary_tokens=500, fold_summary_share=0.2)
    # The later fold takes 12,000 tokens: a share of 2,400, but 3,000 (the earlier summary).
    # Taking that summary with the tasks, this fold leaves it 2,000 tokens and a 500-token
    # summary: its summary is 500, so 2,500 of its re-miss are paid once either way.
    assert prepaid_remiss(10_000, 12_000, cfg, earlier=3_000, takes_earlier=True) == 2_500
    # Folding tasks after it, the later fold still opens with that summary: 3,000 either
    # way, and nothing of its re-miss is spared.
    assert prepaid_remiss(9_000, 12_000, cfg, earlier=3_000, takes_earlier=False) == 0
    # Without an earlier summary (or a share of 0), the summaries scale with the ranges.
    assert prepaid_remiss(10_000, 12_000, cfg) == 2_400 - 500
    flat = MaintenanceConfig(fold_summary_tokens=500, fold_summary_share=0.0)
    assert prepaid_remiss(10_000, 12_000, flat, earlier=3_000, takes_earlier=True) == 0


def _tasks(tasks: list[tuple[int, int]]) -> list[list[Message]]:
    """The transcript before each model call: tasks of (calls, output tokens), each later
    one opened by a new user turn."""
    history = [Message("user", "Fix the failing tests, please.")]
    snapshots = []
    for k, (calls, size) in enumerate(tasks):
        for n in range(calls):
            if k and not n:
                history.append(Message("user", f"Next: part {k}."))
            snapshots.append(list(history))
            call = ToolCall(f"c{k}_{n}", "bash", json.dumps({"command": f"run {k} {n}"}))
            lines = (f"line {i} of output {k}/{n}: value={i * 7 + n}" for i in range(size // 30))
            body = "\n".join(lines)
            history.append(Message("assistant", f"thinking {k}/{n}", tool_calls=(call,)))
            history.append(Message("tool", body, tool_call_id=call.id, name="bash"))
    return snapshots


def test_a_finished_task_fold_prices_the_next_fold_with_the_summary_that_opens_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finished-task fold's share of the next cost-model fold's re-miss is priced with
    the earlier summary that opens that fold's range (`prepaid_remiss`)."""
    from cachepilot.maintenance import next_fold
    from cachepilot.pilot import maintain

    counter = get_counter()
    seen: list[tuple[dict[str, Any], int]] = []
    view: list[Message] = []

    def recording(*args: Any, **kwargs: Any) -> int:
        opening = next((m for m in view if earlier_summary_tokens(m, counter)), None)
        expected = earlier_summary_tokens(opening, counter) if opening is not None else 0
        seen.append((kwargs, expected))
        return next_fold.prepaid_remiss(*args, **kwargs)

    monkeypatch.setattr(maintain, "prepaid_remiss", recording)
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    for t, snapshot in enumerate(_tasks([(14, 2_000), (30, 1_800), (15, 1_800)])):
        _, view, _ = pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
    opened = [(kwargs, expected) for kwargs, expected in seen if expected]
    assert opened  # a finished task was priced after an earlier fold
    for kwargs, expected in opened:
        assert kwargs.get("earlier") == expected
        assert kwargs.get("takes_earlier") is True  # both ranges open with that summary

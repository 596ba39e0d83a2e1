"""Maintenance points: candidates, the cost model, and the invariants of DESIGN §2."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.next_fold import calls_until_fold
from cachepilot.maintenance.policy import (
    Candidate,
    MaintenanceConfig,
    decide,
    prune_candidates,
)
from cachepilot.messages import Message, ToolCall, message_keys, pairing_issues
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.pricing import Price
from cachepilot.tokens import TokenCounter


class CharEncoding:
    """One token per character: hand-computable sizes."""

    name = "chars"

    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


PRICE = Price("test", miss_per_m=1.0, hit_per_m=0.1, output_per_m=1.0)


def _turns(sizes: list[int]) -> list[Message]:
    out = [Message(role="user", content="task")]
    for n, size in enumerate(sizes):
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"cmd {n}"}))
        out.append(Message(role="assistant", content=f"step {n}", tool_calls=(call,)))
        out.append(
            Message(role="tool", content=f"{n}:" + "x" * size, tool_call_id=f"c{n}", name="bash")
        )
    return out


def test_candidates_respect_the_protected_tail() -> None:
    counter = TokenCounter(CharEncoding())
    messages = _turns([1000, 1000, 1000, 1000, 1000, 1000])
    keys = message_keys(messages)
    cfg = MaintenanceConfig(
        prune=True, protect_tool_tokens=2_500, protect_results=1, min_result_tokens=10
    )
    cands = prune_candidates(messages, keys, counter, cfg, already=set())
    # Tool results sit at indices 2, 4, ..., 12; the last three (>= 2,500 tokens) are protected.
    assert [c.index for c in cands] == [2, 4, 6]
    assert all(c.kind == "stub" for c in cands)
    again = prune_candidates(messages, keys, counter, cfg, already={keys[2]})
    assert [c.index for c in again] == [4, 6]
    evict = prune_candidates(
        messages, keys, counter, cfg, already=set(), evictable={keys[4]: "superseded"}
    )
    assert [(c.index, c.kind) for c in evict] == [(2, "stub"), (4, "evict"), (6, "stub")]
    turns = MaintenanceConfig(
        prune=True, protect_tool_tokens=0, protect_results=0, protect_user_turns=1
    )
    assert prune_candidates(messages, keys, counter, turns, already=set()) == []


def _decide(call: int, removed: int, remiss_tokens: int, **kw: object) -> tuple[bool, str]:
    counter = TokenCounter(CharEncoding())
    tail = Message(role="tool", content="y" * (remiss_tokens - 4), tool_call_id="t")
    cand = Candidate(index=0, key="k", kind="stub", tokens=removed + 30, reason="old")
    until_fold = kw.pop("until_fold", None)
    cfg = MaintenanceConfig(min_prune_tokens=0, **kw)  # type: ignore[arg-type]
    record, chosen = decide(
        until_fold=until_fold,  # type: ignore[arg-type]
        call=call,
        messages=[tail],
        candidates=[cand],
        counter=counter,
        config=cfg,
        price=PRICE,
        ttl_seconds=300,
        idle_seconds=10.0,
        context_tokens=remiss_tokens,
        context_window=1_000_000,
        stub_tokens=lambda c: 30,
    )
    assert record.removed_tokens == removed
    assert record.remiss_tokens == remiss_tokens
    assert bool(chosen) == record.apply
    return record.apply, record.reason


def test_cost_model_applies_only_when_the_saving_pays() -> None:
    # Breaking costs 10,000 × (1.0 − 0.1) = $0.009; saving is removed × 0.1 × expected calls.
    # horizon 1.0 at call 40: 1,000 × 0.1e-6 × 40 = $0.004 < $0.009 → wait.
    assert _decide(40, 1_000, 10_000, horizon=1.0) == (False, "saving does not pay for the re-miss")
    # 3,000 removed at call 40: $0.012 > $0.009 → apply.
    assert _decide(40, 3_000, 10_000, horizon=1.0) == (True, "cost-model")
    # The same edit early in a session (call 5) does not pay yet.
    assert _decide(5, 3_000, 10_000, horizon=1.0)[0] is False


def test_an_edit_a_fold_will_take_saves_only_until_that_fold() -> None:
    # 3,000 removed at call 40 pays over the horizon's 40 calls (above)...
    assert _decide(40, 3_000, 10_000, horizon=1.0) == (True, "cost-model")
    # ...but not when a fold takes the message within 20 calls: the edit saves its whole size
    # for 20 calls and the summary's share of it (0.4) for the other 20, as if for 28 calls:
    # 3,000 × 0.1e-6 × 28 = $0.0084 < $0.009.
    assert _decide(40, 3_000, 10_000, horizon=1.0, until_fold=20)[0] is False
    assert _decide(40, 3_500, 10_000, horizon=1.0, until_fold=20) == (True, "cost-model")
    # Summaries of the least size: after the fold the edit saves nothing (3,500 × 20 calls).
    assert (
        _decide(40, 3_500, 10_000, horizon=1.0, until_fold=20, fold_summary_share=0.0)[0] is False
    )
    # A later fold leaves the horizon's guess in charge.
    assert _decide(40, 3_000, 10_000, horizon=1.0, until_fold=60) == (True, "cost-model")


def test_calls_until_fold_is_the_pace_of_the_folds_seen() -> None:
    assert calls_until_fold([], complete=True) is None
    assert calls_until_fold([12], complete=False) is None  # one fold of an unknown start
    assert calls_until_fold([12], complete=True) == 12
    # Folds at 15, 28, 32, 39, 42, 44 (a Claude Code session): one every 7 calls or so.
    assert calls_until_fold([15, 28, 32, 39, 42, 44], complete=True) == 7
    assert calls_until_fold([28, 32, 39, 42, 44], complete=False) == 4
    assert calls_until_fold([3, 3], complete=False) == 1  # never zero


def test_calls_until_fold_counts_the_calls_since_the_last_fold() -> None:
    """At the pace of one fold every 7 calls, 5 calls after the last one the next is 2 calls
    away, not 7: an edit of a message it will take saves its whole size for 2 calls only."""
    folds = [15, 28, 32, 39, 42, 44]
    assert calls_until_fold(folds, complete=True, now=44) == 7
    assert calls_until_fold(folds, complete=True, now=49) == 2
    assert calls_until_fold(folds, complete=True, now=60) == 1  # overdue: the next call


def test_fold_trigger_cold_cache_and_fixed_schedule() -> None:
    counter = TokenCounter(CharEncoding())
    tail = Message(role="tool", content="y" * 996, tool_call_id="t")
    cand = Candidate(index=0, key="k", kind="stub", tokens=130, reason="old")

    def run(
        cfg: MaintenanceConfig, *, call: int = 1, idle: float = 1.0, context: int = 1_000
    ) -> str:
        record, _ = decide(
            call=call,
            messages=[tail],
            candidates=[cand],
            counter=counter,
            config=cfg,
            price=PRICE,
            ttl_seconds=300,
            idle_seconds=idle,
            context_tokens=context,
            context_window=10_000,
            stub_tokens=lambda c: 30,
        )
        return record.reason if record.apply else "no:" + record.reason

    base = MaintenanceConfig(min_prune_tokens=0)
    assert run(base).startswith("no:")
    assert run(base, context=8_000) == "fold-trigger"
    assert run(base, idle=301.0) == "cold-cache"
    fixed = MaintenanceConfig(schedule="fixed", every=3)
    assert run(fixed, call=3) == "fixed-schedule"
    assert run(fixed, call=4) == "no:not a scheduled call"
    assert run(MaintenanceConfig(enabled=False), context=9_999).startswith("no:")


@pytest.mark.parametrize(
    "bad",
    [
        {"every": 0},
        {"fold_trigger": 2.0},
        {"protect_tool_tokens": -1},
        {"horizon": 0},
        {"context_window": 10},
        {"min_expected_calls": 0},
        {"nope": 1},
    ],
)
def test_bad_config_fails_fast(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        MaintenanceConfig(**bad)  # type: ignore[arg-type]


# --- invariants over random sessions -------------------------------------------------------

_session = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),  # tool calls in this step
        st.lists(st.integers(min_value=0, max_value=6_000), min_size=3, max_size=3),
        st.booleans(),  # a new user turn before this step
    ),
    min_size=2,
    max_size=14,
)


def _build(steps: list[tuple[int, list[int], bool]]) -> list[list[Message]]:
    """The transcript as it stands before each model call."""
    history: list[Message] = [Message(role="user", content="Fix the failing tests, please.")]
    snapshots: list[list[Message]] = []
    for n, (calls, sizes, new_turn) in enumerate(steps):
        if new_turn:
            history.append(Message(role="user", content=f"Next: part {n}."))
        snapshots.append(list(history))
        tool_calls = tuple(
            ToolCall(f"s{n}c{k}", "bash", json.dumps({"command": f"run {n} {k}"}))
            for k in range(calls)
        )
        history.append(Message(role="assistant", content=f"thinking {n}", tool_calls=tool_calls))
        for k in range(calls):
            body = "\n".join(
                f"line {i} of output {n}/{k}: value={i * 7 + n}" for i in range(sizes[k] // 30)
            )
            history.append(
                Message(role="tool", content=body, tool_call_id=f"s{n}c{k}", name="bash")
            )
    snapshots.append(list(history))
    return snapshots


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_session, st.integers(min_value=1, max_value=4))
def test_requests_extend_between_maintenance_points(
    steps: list[tuple[int, list[int], bool]], every: int
) -> None:
    maintenance = MaintenanceConfig(
        schedule="fixed",
        every=every,
        protect_tool_tokens=500,
        protect_results=1,
        min_result_tokens=20,
    )
    pilot = CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())
    previous: tuple[str | None, list[Message], list[dict[str, object]]] | None = None
    epochs = 0
    for t, snapshot in enumerate(_build(steps)):
        # Ingestion happens once, when a result arrives: reduce the new tool results.
        system, view, tools = pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
        assert pairing_issues(view) == [], "an edit orphaned a call or a result"
        state = pilot.state("t")
        grew = len(state.plan.epochs) > epochs
        epochs = len(state.plan.epochs)
        if previous is not None and not grew:
            p_system, p_view, p_tools = previous
            assert system == p_system and tools == p_tools
            assert view[: len(p_view)] == p_view, "history changed without a maintenance point"
        previous = (system, view, tools)
        # Every stub names an archived original that is byte-identical to what it replaced.
        originals = {m.tool_call_id: m.content for m in snapshot if m.role == "tool"}
        for message in view:
            if (
                message.role == "tool"
                and isinstance(message.content, str)
                and (
                    'recall(ref="' in message.content and message.content.startswith("[bash output")
                )
            ):
                ref = message.content.split('recall(ref="')[1][:12]
                artifact = pilot.store.get("t", ref)
                assert artifact is not None
                assert artifact.text == originals[message.tool_call_id]


def test_maintenance_really_stubs_old_results_and_keeps_them_recallable() -> None:
    steps = [(1, [6_000, 0, 0], False) for _ in range(8)]
    maintenance = MaintenanceConfig(
        prune=True, schedule="fixed", every=2, protect_tool_tokens=500, protect_results=1
    )
    pilot = CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())
    views = [
        pilot.prepare("sys", snap, (), "t", now=i * 10.0)[1] for i, snap in enumerate(_build(steps))
    ]
    state = pilot.state("t")
    assert state.plan.epochs, "no maintenance point was taken"
    assert {d.reason for d in state.decisions if d.apply} == {"fixed-schedule"}
    stubbed = [m for m in views[-1] if m.role == "tool" and "output pruned" in m.text]
    assert len(stubbed) >= 5
    assert sum(len(m.text) for m in views[-1]) < sum(len(m.text) for m in _build(steps)[-1]) / 3


def test_cost_schedule_waits_then_prunes_on_a_long_session() -> None:
    steps = [(1, [4_000, 0, 0], False) for _ in range(60)]
    # Pruning is opt-in (the audit found it losing money on recorded sessions).
    config = Config(maintenance=MaintenanceConfig(prune=True))
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    for i, snap in enumerate(_build(steps)):
        pilot.prepare("sys", snap, (), "t", now=i * 10.0)
    applied = [d for d in pilot.state("t").decisions if d.apply]
    waited = [d for d in pilot.state("t").decisions if not d.apply]
    assert applied and waited
    assert all(d.saving_usd > d.cost_usd for d in applied if d.reason == "cost-model")
    assert all(d.saving_usd <= d.cost_usd for d in waited if "re-miss" in d.reason)


def test_fold_is_the_last_resort_past_the_trigger() -> None:
    steps = [(2, [3_000, 3_000, 0], False) for _ in range(30)]
    # Pruning and eviction are off, so only a fold can bring the context back down.
    maintenance = MaintenanceConfig(
        context_window=40_000,
        fold_trigger=0.5,
        fold_protect_tokens=4_000,
        prune=False,
        evict=False,
    )
    pilot = CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())
    snapshots = _build(steps)
    views = [
        pilot.prepare("sys", snap, (), "t", now=i * 10.0)[1] for i, snap in enumerate(snapshots)
    ]
    state = pilot.state("t")
    folds = [e for epoch in state.plan.epochs for e in epoch.edits if e.kind == "fold"]
    assert folds, "the context passed the trigger but nothing was folded"
    final = views[-1]
    assert pairing_issues(final) == []
    assert final[0].text == "Fix the failing tests, please."  # the task statement is kept
    summary = next(m for m in final if m.text.startswith("[earlier conversation folded"))
    ref = summary.text.split('recall(ref="')[1][:12]
    archived = pilot.store.get("t", ref)
    assert archived is not None and "output" in archived.text
    counter = TokenCounter(CharEncoding())
    assert counter.count_messages(final) < counter.count_messages(snapshots[-1]) / 3


def test_emergency_fold_after_a_context_length_error() -> None:
    snapshot = _build([(1, [5_000, 0, 0], False) for _ in range(12)])[-1]
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    before = pilot.prepare("sys", snapshot, (), "t", now=0.0)[1]
    assert pilot.emergency_fold("sys", snapshot, "t") is True
    after = pilot.prepare("sys", snapshot, (), "t", now=10.0)[1]
    assert len(after) < len(before) / 2
    assert pairing_issues(after) == []
    assert pilot.state("t").plan.epochs[-1].reason == "context-length-error"


def test_no_fold_when_pruning_is_enough() -> None:
    maintenance = MaintenanceConfig(
        prune=True,
        context_window=40_000,
        fold_trigger=0.5,
        fold_protect_tokens=4_000,
        protect_tool_tokens=4_000,
        fold_by_cost=False,  # the trigger's rule: a fold the cost model wants is another one
    )
    pilot = CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())
    for i, snap in enumerate(_build([(2, [3_000, 3_000, 0], False) for _ in range(30)])):
        pilot.prepare("sys", snap, (), "t", now=i * 10.0)
    kinds = {e.kind for epoch in pilot.state("t").plan.epochs for e in epoch.edits}
    assert "stub" in kinds and "fold" not in kinds


def test_cost_model_leaves_old_candidates_when_only_a_later_cut_pays() -> None:
    counter = TokenCounter(CharEncoding())
    old = Message(role="tool", content="o" * 996, tool_call_id="a")
    filler = Message(role="user", content="f" * 49_996)
    recent = Message(role="tool", content="r" * 19_996, tool_call_id="b")
    tail = Message(role="user", content="t" * 996)
    messages = [old, filler, recent, tail]
    cands = [
        Candidate(index=0, key="a", kind="stub", tokens=1_000, reason="old"),
        Candidate(index=2, key="b", kind="stub", tokens=20_000, reason="old"),
    ]
    record, chosen = decide(
        call=20,
        messages=messages,
        candidates=cands,
        counter=counter,
        config=MaintenanceConfig(min_prune_tokens=0, horizon=1.0),
        price=PRICE,
        ttl_seconds=300,
        idle_seconds=1.0,
        context_tokens=72_000,
        context_window=1_000_000,
        stub_tokens=lambda c: 0,
    )
    # All of it: saves 21,000 × 0.1e-6 × 20 = $0.042 but re-misses 72,000 × 0.9e-6 = $0.0648.
    # From the recent one on: saves $0.040 and re-misses only 21,000 tokens ($0.0189).
    assert record.apply and record.reason == "cost-model"
    assert [c.key for c in chosen] == ["b"]
    assert record.remiss_tokens == 21_000 and record.removed_tokens == 20_000


def test_cost_model_folds_a_long_history_only_when_it_pays() -> None:
    only_fold = MaintenanceConfig(prune=False, evict=False)
    long_pilot = CachePilot(Config(maintenance=only_fold), store=InMemoryArtifactStore())
    for i, snap in enumerate(_build([(1, [6_000, 0, 0], False) for _ in range(80)])):
        long_pilot.prepare("sys", snap, (), "t", now=i * 10.0)
    decisions = [d for d in long_pilot.state("t").decisions if d.reason == "cost-model-fold"]
    epochs = [ep for ep in long_pilot.state("t").plan.epochs if ep.reason == "cost-model-fold"]
    assert decisions and len(epochs) == len(decisions)
    # Each differential fold supersedes the one before: only the latest is kept in the plan.
    folds = [e for ep in long_pilot.state("t").plan.epochs for e in ep.edits if e.kind == "fold"]
    assert len(folds) == 1 and folds[0] in epochs[-1].edits
    # A short session never earns back the re-miss a fold causes.
    short_pilot = CachePilot(Config(maintenance=only_fold), store=InMemoryArtifactStore())
    for i, snap in enumerate(_build([(1, [6_000, 0, 0], False) for _ in range(6)])):
        short_pilot.prepare("sys", snap, (), "t", now=i * 10.0)
    assert short_pilot.state("t").plan.epochs == []


def _two_task_session(first: int, second: int) -> list[list[Message]]:
    """A long first task, then a new user turn on unrelated work (as the prepare snapshots)."""
    steps = [(1, [1_200, 0, 0], False) for _ in range(first)]
    steps += [(1, [300, 0, 0], n == 0) for n in range(second)]
    return _build(steps)


def test_a_finished_task_is_folded_whole_when_it_pays() -> None:
    snapshots = _two_task_session(14, 10)
    config = Config(maintenance=MaintenanceConfig(fold_finished_tasks=True))
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    previous: list[Message] | None = None
    epochs = 0
    for t, snapshot in enumerate(snapshots):
        _, view, _ = pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
        assert pairing_issues(view) == []
        grew = len(pilot.state("t").plan.epochs) > epochs
        epochs = len(pilot.state("t").plan.epochs)
        if previous is not None and not grew:
            assert view[: len(previous)] == previous
        previous = view
    state = pilot.state("t")
    folds = [d for d in state.decisions if d.reason == "finished-task-fold"]
    assert len(folds) == 1 and folds[0].apply
    assert folds[0].saving_usd > folds[0].cost_usd
    assert state.lifecycle.segments["task:1"].state.value == "evictable"
    last = snapshots[-1]
    second_task = next(i for i, m in enumerate(last) if m.text == "Next: part 14.")
    # The task statement stays, the finished task becomes one summary, the current task is
    # kept verbatim (the very same message objects).
    assert view[0] is last[0]
    assert view[1].role == "user" and view[1].text.startswith("[earlier conversation folded:")
    assert all(a is b for a, b in zip(view[2:], last[second_task:], strict=True))
    # The fold's archive gives the finished task back.
    ref = view[1].text.split('recall(ref="')[1][:12]
    archived = pilot.recall(ref, thread="t", max_chars=1_000_000)
    assert "line 0 of output 0/0: value=0" in archived
    assert "line 0 of output 13/0: value=13" in archived


def test_finished_task_folds_are_on_by_default_and_can_be_turned_off() -> None:
    snapshots = _two_task_session(14, 10)
    reasons = {}
    for enabled in (True, False):
        config = Config() if enabled else Config(maintenance={"fold_finished_tasks": False})
        pilot = CachePilot(config, store=InMemoryArtifactStore())
        for t, snapshot in enumerate(snapshots):
            pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
        reasons[enabled] = [d.reason for d in pilot.state("t").decisions if d.apply]
    assert "finished-task-fold" not in reasons[False]
    assert "finished-task-fold" in reasons[True]


def test_task_fold_cost_model_by_hand() -> None:
    from cachepilot.maintenance.fold_cost import task_fold_estimate

    sizes = [100, 5_000, 5_000, 200, 300]  # task statement, finished task, current task
    cfg = MaintenanceConfig(fold_summary_tokens=500)
    # removed = 10,000 - 500 = 9,500; re-miss = (10,000 + 500) - 9,500 = 1,000 tokens.
    estimate = task_fold_estimate(sizes, 1, 3, config=cfg, price=PRICE, expected_calls=2)
    assert (estimate.removed_tokens, estimate.remiss_tokens) == (9_500, 1_000)
    # saving 9,500 × 0.1e-6 × 2 = 0.0019 > cost 1,000 × 0.9e-6 = 0.0009
    assert estimate.pays
    record = estimate.decision(7, "finished-task-fold", 12_000, 2)
    assert (record.saving_usd, record.cost_usd, record.expected_calls) == (0.0019, 0.0009, 2)
    # a tiny range does not pay for its summary
    tiny = task_fold_estimate([100, 300, 200], 1, 2, config=cfg, price=PRICE, expected_calls=50)
    assert not tiny.pays


def test_a_finished_task_fold_pays_by_the_rule_of_cost_model_folds() -> None:
    from cachepilot.maintenance.fold_cost import task_fold_estimate

    sizes = [100, 2_500, 2_500, 200, 300]  # removes 4,500 tokens: below the least fold
    cfg = MaintenanceConfig(fold_summary_tokens=500)
    small = task_fold_estimate(sizes, 1, 3, config=cfg, price=PRICE, expected_calls=50)
    # The saving would pay for the re-miss many times over, but a fold this small does not
    # pay for the facts and the cache it costs: the audit found such folds losing money.
    assert small.removed_tokens == 4_500
    assert small.removed_tokens * small.rate.saving_per_token > (
        small.remiss_tokens * small.rate.remiss_per_token
    )
    assert not small.pays
    allowed = MaintenanceConfig(fold_summary_tokens=500, fold_min_tokens=4_000)
    assert task_fold_estimate(sizes, 1, 3, config=allowed, price=PRICE, expected_calls=50).pays


def test_a_fold_pays_only_past_the_margin() -> None:
    from cachepilot.maintenance.fold_cost import task_fold_estimate

    sizes = [100, 5_000, 5_000, 200, 300]
    # saving 9,500 × 0.1e-6 × 2 = 0.0019 against a re-miss of 1,000 × 0.9e-6 = 0.0009:
    # it pays by 2.1 times.
    below = MaintenanceConfig(fold_summary_tokens=500, fold_margin=1.0)
    above = MaintenanceConfig(fold_summary_tokens=500, fold_margin=1.2)
    assert task_fold_estimate(sizes, 1, 3, config=below, price=PRICE, expected_calls=2).pays
    estimate = task_fold_estimate(sizes, 1, 3, config=above, price=PRICE, expected_calls=2)
    assert not estimate.pays
    # The record still states the plain saving and re-miss (the margin is a threshold).
    assert (estimate.removed_tokens, estimate.remiss_tokens) == (9_500, 1_000)


@pytest.mark.parametrize("margin", [-0.1, 10.5])
def test_fold_margin_is_validated(margin: float) -> None:
    with pytest.raises(ValueError, match="fold_margin"):
        MaintenanceConfig(fold_margin=margin)


def _write_session(steps: int, writes: set[int]) -> list[list[Message]]:
    """A long session of shell outputs, with a whole file written at the steps in `writes`."""
    history: list[Message] = [Message(role="user", content="Fix the failing tests, please.")]
    snapshots: list[list[Message]] = []
    for n in range(steps):
        snapshots.append(list(history))
        if n in writes:
            content = "\n".join(f"def f{i}_{n}(): return {i}" for i in range(1_500))
            call = ToolCall(f"c{n}", "write", json.dumps({"path": f"m{n}.py", "content": content}))
            body = "ok"
        else:
            call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"run {n}"}))
            body = "\n".join(f"line {i} of output {n}: value={i * 7 + n}" for i in range(60))
        history.append(Message(role="assistant", content=f"thinking {n}", tool_calls=(call,)))
        history.append(Message(role="tool", content=body, tool_call_id=f"c{n}", name=call.name))
    snapshots.append(list(history))
    return snapshots


def test_an_argument_reduction_after_regular_folds_is_priced_by_their_pace() -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    for t, snapshot in enumerate(_write_session(90, {30, 55, 70})):
        pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
    decisions = pilot.state("t").decisions
    folds = [d.call for d in decisions if d.apply and d.reason == "cost-model-fold"]
    reductions = [d for d in decisions if d.apply and d.reason == "cost-model"]
    assert reductions, "the file written at step 70 is reduced"
    for record in reductions:
        before = [c for c in folds if c < record.call]
        assert before, "the reduction comes after the thread has folded"
        # The mean gap from call 0, less the calls since the last fold.
        pace = max(1, round(before[-1] / len(before)) - (record.call - before[-1]))
        horizon = round(record.call * 0.5)
        assert pace < horizon
        # Its whole size until the next fold, the summary's 0.4 of it for the rest.
        assert record.expected_calls == round(pace + 0.4 * (horizon - pace))
        assert record.saving_usd > record.cost_usd
    # Without folds by cost no fold is coming: the horizon's guess alone.
    no_cost_folds = CachePilot(
        Config(maintenance=MaintenanceConfig(fold_by_cost=False)), store=InMemoryArtifactStore()
    )
    for t, snapshot in enumerate(_write_session(90, {30, 55, 70})):
        no_cost_folds.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
    plain = [d for d in no_cost_folds.state("t").decisions if d.reason == "cost-model"]
    assert plain and all(d.expected_calls == round(d.call * 0.5) for d in plain)


def test_the_next_cost_model_fold_is_predicted_by_its_own_rule() -> None:
    from cachepilot.maintenance.next_fold import NextFold, calls_until_cost_fold

    cfg = MaintenanceConfig()  # least fold 6,000; summary 0.4 of the range, at least 800
    # 10,000 tokens fold into a 4,000-token summary: 6,000 removed, re-miss 4,000 + 2,100
    # tail. At call 20 (10 calls expected) 6,000 × 0.1e-6 × 10 > 6,100 × 0.9e-6: now.
    now = calls_until_cost_fold(10_000, 2_100, growth=0, call=20, config=cfg, price=PRICE, limit=50)
    assert now == NextFold(0, 10_000)
    # At call 10 (5 calls expected) it waits for a horizon of 10 calls (9 do not pay):
    # call 19, half of which rounds to 10.
    later = calls_until_cost_fold(
        10_000, 2_100, growth=0, call=10, config=cfg, price=PRICE, limit=50
    )
    assert later == NextFold(9, 10_000)
    # 8,000 tokens remove 4,800, under the least fold: two calls of 1,000 tokens more.
    grown = calls_until_cost_fold(
        8_000, 2_000, growth=1_000, call=100, config=cfg, price=PRICE, limit=50
    )
    assert grown == NextFold(2, 10_000)
    assert (
        calls_until_cost_fold(
            8_000, 2_000, growth=1_000, call=100, config=cfg, price=PRICE, limit=1
        )
        is None
    )


def test_a_finished_task_fold_counts_the_re_miss_the_next_fold_would_pay_anyway() -> None:
    from cachepilot.maintenance.fold_cost import task_fold_estimate
    from cachepilot.maintenance.next_fold import prepaid_remiss

    sizes = [100, 5_000, 5_000, 200, 3_000]  # task statement, finished task, current task
    cfg = MaintenanceConfig(fold_summary_tokens=500, fold_summary_share=0.2)
    # removed 9,500; re-miss 500 + 3,200 = 3,700 tokens: 0.00333 $ against a saving of
    # 9,500 × 0.1e-6 × 2 = 0.0019 $ over two calls.
    alone = task_fold_estimate(sizes, 1, 3, config=cfg, price=PRICE, expected_calls=2)
    assert (alone.removed_tokens, alone.remiss_tokens, alone.prepaid_tokens) == (9_500, 3_700, 0)
    assert not alone.pays
    # The cost-model fold due in two calls would take 12,000 tokens into a 2,400-token
    # summary; after this fold its range is this summary and 2,000 tokens (a 500-token
    # summary): 1,900 tokens of its re-miss are paid once either way.
    prepaid = prepaid_remiss(10_000, 12_000, cfg)
    assert prepaid == 2_400 - 500
    before = task_fold_estimate(
        sizes, 1, 3, config=cfg, price=PRICE, expected_calls=2, prepaid=prepaid
    )
    assert (before.remiss_tokens, before.prepaid_tokens) == (3_700, 1_900)
    assert before.pays
    record = before.decision(9, "finished-task-fold", 14_000, 2)
    assert (record.saving_usd, record.cost_usd, record.remiss_tokens) == (0.0019, 0.00162, 3_700)


def _simulated(snapshots: list[list[Message]]) -> tuple[float, list[str]]:
    """Input cost of a session through the default pilot and the cache simulator, and the
    reasons of the folds it took."""
    from cachepilot.pricing import cost
    from cachepilot.sim import CacheSimulator, Request, get_profile

    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    profile = get_profile("openai-gpt-5.4-mini")
    sim = CacheSimulator(profile, hidden_prefix_tokens=0)
    total = 0.0
    for t, snapshot in enumerate(snapshots):
        system, view, tools = pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
        usage = sim.submit(Request(system=system, messages=view, tools=tools))
        total += cost(usage, profile.price).input_usd
    return total, [d.reason for d in pilot.state("t").decisions if d.apply]


@pytest.mark.parametrize(
    "tasks",
    [
        # (steps, output tokens) per task: each later task starts with a new user turn.
        ((14, 1_200), (12, 2_500)),
        ((14, 1_200), (6, 3_000)),
        ((24, 2_000), (6, 3_000)),
        ((24, 600), (12, 3_000), (15, 3_000)),
        ((40, 1_200), (6, 1_800), (15, 1_800)),
        ((14, 2_000), (30, 1_800), (15, 1_800)),
    ],
)
def test_no_finished_task_fold_just_before_the_cost_model_folds_the_same_messages(
    tasks: tuple[tuple[int, int], ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Later tasks with large outputs bring the cost-model fold (which takes the finished
    # tasks too) a few calls after a finished task becomes evictable.
    steps = [
        (1, [size, 0, 0], n == 0 and k > 0)
        for k, (count, size) in enumerate(tasks)
        for n in range(count)
    ]
    snapshots = _build(steps)
    cost, reasons = _simulated(snapshots)
    # Priced over the current task's expected length alone, a finished-task fold comes just
    # before the cost-model fold that would take its messages: two re-misses where one did.
    from cachepilot.pilot import maintain

    monkeypatch.setattr(maintain, "_next_cost_fold", lambda *args, **kwargs: None)
    horizon_cost, horizon_reasons = _simulated(snapshots)
    task_folds = reasons.count("finished-task-fold")
    assert task_folds < horizon_reasons.count("finished-task-fold")
    assert cost < horizon_cost


def test_a_finished_task_fold_well_before_the_next_cost_model_fold_stays() -> None:
    # The second task's small outputs leave the cost-model fold far off.
    _, reasons = _simulated(_two_task_session_sized(14, 1_200, 10, 300))
    assert reasons == ["finished-task-fold"]


def _two_task_session_sized(
    first: int, first_size: int, second: int, second_size: int
) -> list[list[Message]]:
    """Two tasks of `first` and `second` steps, each step one output of the given size."""
    steps = [(1, [first_size, 0, 0], False) for _ in range(first)]
    steps += [(1, [second_size, 0, 0], n == 0) for n in range(second)]
    return _build(steps)


def test_the_next_cost_model_fold_is_looked_for_only_within_the_priced_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long current task (a large horizon, long finished tasks) is priced over at most
    `max_expected_calls`; a cost-model fold later than that changes nothing, so the search
    for it stops there: its work per request stays bounded whatever the session's length."""
    from cachepilot.maintenance import next_fold
    from cachepilot.pilot import maintain

    limits: list[int] = []
    unbounded = False

    def recording(*args: object, limit: int, **kwargs: Any) -> next_fold.NextFold | None:
        limits.append(limit)
        limit = 10_000 if unbounded else limit
        return next_fold.calls_until_cost_fold(*args, limit=limit, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(maintain, "calls_until_cost_fold", recording)
    cfg = MaintenanceConfig(horizon=10.0, max_expected_calls=20)
    tasks = ((40, 1_200), (6, 1_800), (15, 1_800))
    steps = [
        (1, [size, 0, 0], n == 0 and k > 0)
        for k, (count, size) in enumerate(tasks)
        for n in range(count)
    ]

    def decisions() -> list[tuple[int, str]]:
        pilot = CachePilot(Config(maintenance=cfg), store=InMemoryArtifactStore())
        for t, snapshot in enumerate(_build(steps)):
            pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
        return [(d.call, d.reason) for d in pilot.state("t").decisions if d.apply]

    bounded = decisions()
    assert limits
    assert max(limits) <= cfg.max_expected_calls - 1
    unbounded = True
    assert decisions() == bounded  # a fold beyond the priced calls decides nothing

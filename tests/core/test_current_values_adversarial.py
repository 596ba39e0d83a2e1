"""Adversarial cases for current values (DESIGN §2.7) with an append-only prefix (§2.1):
values that change back, change together, change on a maintenance point, live in tool
descriptions, move every call, and clients that retry or edit their last message."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from test_current_values import EXACT, START, budget_prompt, extends, grow, model_reads

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical import CanonicalConfig, Canonicalizer, CanonicalState
from cachepilot.canonical.notes import MAX_NOTES
from cachepilot.config import MaintenanceConfig
from cachepilot.messages import Message, ToolCall


def two_values(budget: int, branch: str) -> str:
    return (
        "You are the payments agent.\n"
        f"Remaining budget: {budget} tokens\n"
        f"Branch: feat/PAY-{branch}-refund\n"
        "Answer briefly.\n"
    )


def test_a_value_that_changes_and_changes_back_reads_current() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    budgets = [1200, 1150, 1200, 1150, 1150, 1200]
    previous = None
    for i, budget in enumerate(budgets):
        history = grow(history, i) if i else history
        request = canon.apply(budget_prompt(budget), history, [], state)
        assert model_reads(*request[:2])[0] == budget_prompt(budget), f"call {i}"
        if i >= 2 and previous is not None:
            assert extends(previous, request), f"call {i}: the prefix broke"
        previous = request


def test_two_values_changing_in_one_call_are_both_current() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    steps = [(1200, "1423"), (1150, "1424"), (1100, "1425"), (1100, "1423"), (900, "77")]
    for i, (budget, branch) in enumerate(steps):
        history = grow(history, i) if i else history
        system = two_values(budget, branch)
        request = canon.apply(system, history, [], state)
        assert model_reads(*request[:2])[0] == system, f"call {i}"


def test_a_change_on_a_maintenance_point_is_in_the_block() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    for i, budget in enumerate([1200, 1150, 1100, 1050, 1000]):
        history = grow(history, i) if i else history
        request = canon.apply(budget_prompt(budget), history, [], state, maintenance=i == 3)
        assert model_reads(*request[:2])[0] == budget_prompt(budget), f"call {i}"
        if i == 3:
            assert state.notes == []


def test_a_learned_value_in_a_tool_description_is_current() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    sent = []
    for i, branch in enumerate(["feat/PAY-1423-refund", "feat/PAY-1424-refund", "feat/PAY-99-x"]):
        history = grow(history, i) if i else history
        description = f"Push to the current branch ({branch}) of the payments repo."
        tools = [{"name": "push", "description": description, "parameters": {}}]
        request = canon.apply("You push code.", history, tools, state)
        assert model_reads(*request)[1] == [description], f"call {i}"
        sent.append(request)
    assert extends(sent[1], sent[2])


def test_a_retry_of_the_last_request_with_a_new_value_reads_current() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = grow(START, 1)
    canon.apply(budget_prompt(1200), START, [], state)
    canon.apply(budget_prompt(1150), history, [], state)
    for budget in (1100, 1100, 1200):  # the same messages sent again, the value moving
        request = canon.apply(budget_prompt(budget), history, [], state)
        assert model_reads(*request[:2])[0] == budget_prompt(budget)


def test_an_edited_last_user_message_reads_current() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    first = [Message("user", "Refund order 4471.")]
    canon.apply(budget_prompt(1200), first, [], state)
    asked = [*first, Message("assistant", "Done."), Message("user", "And order 4472?")]
    canon.apply(budget_prompt(1150), asked, [], state)  # the note goes on "And order 4472?"
    edited = [*first, Message("assistant", "Done."), Message("user", "And order 4473?")]
    for budget in (1150, 1100):
        request = canon.apply(budget_prompt(budget), edited, [], state)
        assert model_reads(*request[:2])[0] == budget_prompt(budget)


def test_a_clock_moving_every_call_keeps_the_notes_bounded_and_current() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    start = dt.datetime(2026, 11, 28, 9, 0, 0)
    for i in range(MAX_NOTES + 12):
        history = grow(history, i) if i else history
        system = f"You watch the queue.\nNow: {start + dt.timedelta(minutes=i):%Y-%m-%dT%H:%M:%S}\n"
        request = canon.apply(system, history, [], state)
        assert model_reads(*request[:2])[0] == system, f"call {i}"
        assert len(state.notes) <= MAX_NOTES


def test_prepare_keeps_values_current_with_duplicate_and_large_tool_outputs() -> None:
    """Notes on tool results that the pilot reduces or points at an earlier copy."""
    pilot = CachePilot(Config(canonical=EXACT), store=InMemoryArtifactStore())
    big = "\n".join(f"2026-11-28 line {n} INFO worker ok payload={n * 7}" for n in range(3000))
    history: list[Any] = list(START)
    for i in range(10):
        if i:
            call = ToolCall(f"c{i}", "bash", json.dumps({"command": "cat big.log"}))
            output = big if i % 3 else "the same small output\n" * 3
            history = [
                *history,
                Message("assistant", f"Step {i}.", tool_calls=(call,)),
                Message("tool", output, tool_call_id=f"c{i}", name="bash"),
            ]
        budget = 1200 if i < 4 else 1000  # one change, then the value stays
        request = pilot.prepare(budget_prompt(budget), history, [], thread="t-dup")
        assert model_reads(*request[:2])[0] == budget_prompt(budget), f"call {i}"


def test_a_coarse_clock_config_still_notes_a_new_day() -> None:
    config = CanonicalConfig()
    canon, state = Canonicalizer(config), CanonicalState()
    history = START
    for i, day in enumerate(["2026-11-28", "2026-11-28", "2026-11-29"]):
        history = grow(history, i) if i else history
        system = f"You plan the day.\nToday is {day}.\n"
        request = canon.apply(system, history, [], state)
        assert model_reads(*request[:2], config=config)[0] == system, f"call {i}"


def test_one_value_in_the_system_prompt_and_a_tool_description_is_current_in_both() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    previous = None
    for i, branch in enumerate(["PAY-1423", "PAY-1424", "PAY-1425", "PAY-1423"]):
        history = grow(history, i) if i else history
        system = f"You push code.\nBranch: feat/{branch}-refund\nBe brief.\n"
        description = f"Push commits to feat/{branch}-refund only."
        tools = [{"name": "push", "description": description, "parameters": {}}]
        request = canon.apply(system, history, tools, state)
        assert model_reads(*request) == (system, [description]), f"call {i}"
        if i >= 2 and previous is not None:
            assert extends(previous, request), f"call {i}: the prefix broke"
        previous = request


def test_values_stay_current_across_folds_and_prunes() -> None:
    """History rewritten every other call (folds, pruned results) while the budget moves:
    a note on a result that is later pruned or folded must not take the value with it."""
    config = Config(
        canonical=EXACT,
        maintenance=MaintenanceConfig(
            schedule="fixed",
            every=2,
            protect_tool_tokens=200,
            protect_results=1,
            min_prune_tokens=100,
            min_result_tokens=40,
            fold_protect_tokens=200,
            fold_min_tokens=300,
            fold_summary_tokens=80,
            fold_finished_tasks=True,
            context_window=2_000,
        ),
    )
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    log = "\n".join(f"step {n:04d} {'ok' if n % 7 else 'FAILED'} in {n} ms" for n in range(300))
    history: list[Any] = list(START)
    for i in range(14):
        if i:
            call = ToolCall(f"c{i}", "bash", json.dumps({"command": f"make {i}"}))
            history = [
                *history,
                Message("assistant", f"Step {i}.", tool_calls=(call,)),
                Message("tool", f"run {i}\n{log}", tool_call_id=f"c{i}", name="bash"),
            ]
            if i % 4 == 0:
                history = [
                    *history,
                    Message("assistant", f"Task {i} done."),
                    Message("user", f"Next task {i}."),
                ]
        budget = 1200 - 50 * (i // 3)  # moves every third call, stays in between
        request = pilot.prepare(budget_prompt(budget), history, [], thread="t-fold")
        assert model_reads(*request[:2])[0] == budget_prompt(budget), f"call {i}"
    assert pilot.state("t-fold").plan.epochs  # history was rewritten

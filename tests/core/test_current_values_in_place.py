"""Values stay in place until one changes: the prompt goes as the client wrote it, and the
call where a value first changes moves them into the dynamic-context block (DESIGN §2.7)."""

from __future__ import annotations

import datetime as dt
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_current_values import EXACT, START, dicts, extends, grow, model_reads

from cachepilot.canonical import CanonicalConfig, Canonicalizer, CanonicalState
from cachepilot.messages import Message


def tau_prompt(now: str = "2024-05-15 15:00:00 EST") -> str:
    return (
        "# Airline Agent Policy\n"
        f"The current time is {now}.\n"
        "As an airline agent, you can help users book, modify, or cancel flight reservations.\n"
    )


def test_a_prompt_whose_values_never_change_is_sent_as_written() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    tools = [{"name": "book", "description": "Book a flight.", "parameters": {}}]
    history = START
    for i in range(12):
        history = grow(history, i) if i else history
        system, messages, out_tools = canon.apply(
            tau_prompt(), history, tools, state, maintenance=i == 6
        )
        assert system == tau_prompt()  # byte-identical, no placeholder, no block
        assert dicts(messages) == dicts(history)
        assert out_tools == tools
    assert state.in_place and state.epoch == 0 and state.notes == []
    assert state.values  # the values were seen (a change is recognised against them)


def test_the_first_change_moves_the_values_out_once_and_later_changes_are_noted() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    start = dt.datetime(2024, 5, 15, 15, 0, 0)
    requests = []
    for i in range(10):
        history = grow(history, i) if i else history
        minutes = 0 if i < 4 else 7 * (i - 3)  # the clock first moves at call 4
        system = tau_prompt(f"{start + dt.timedelta(minutes=minutes):%Y-%m-%d %H:%M:%S} EST")
        requests.append(canon.apply(system, history, [], state))
        assert model_reads(*requests[-1][:2])[0] == system, f"call {i}: a stale value"
        if i < 4:
            assert requests[-1][0] == system and state.in_place
    assert not state.in_place and "{{" in requests[4][0]
    breaks = [i for i, (a, b) in enumerate(itertools.pairwise(requests), 1) if not extends(a, b)]
    assert breaks == [4]  # one prefix break, where the value first changed
    assert len(state.notes) == 5  # every later change reaches the model after the prefix


def test_a_value_changing_at_the_first_maintenance_point_is_current() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    canon.apply(tau_prompt(), history, [], state)
    history = grow(history, 1)
    canon.apply(tau_prompt(), history, [], state)
    history = grow(history, 2)
    moved = tau_prompt("2024-05-15 16:30:00 EST")
    request = canon.apply(moved, history, [], state, maintenance=True)
    assert model_reads(*request[:2])[0] == moved and not state.in_place
    assert state.notes == []  # the block itself holds the new value
    after = canon.apply(moved, grow(history, 3), [], state)
    assert extends(request, after)


@pytest.mark.parametrize("refresh", ["maintenance", "never", "always"])
def test_the_move_writes_the_current_values_whatever_the_refresh(refresh: str) -> None:
    config = CanonicalConfig(clock_resolution_seconds=0, refresh=refresh)  # type: ignore[arg-type]
    canon, state = Canonicalizer(config), CanonicalState()
    canon.apply(tau_prompt(), START, [], state)
    moved = tau_prompt("2024-05-15 15:04:00 EST")
    system, messages, _ = canon.apply(moved, grow(START, 1), [], state)
    assert "{{" in system and state.notes == []  # the block itself is current, no note
    assert "15:00:00" not in json.dumps([system, dicts(messages)])
    assert model_reads(system, messages, config=config)[0] == moved


def test_retries_keep_the_conversation_and_read_current_values() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = grow(START, 1)
    first = canon.apply(tau_prompt(), history, [], state)
    assert canon.apply(tau_prompt(), history, [], state) == first  # a plain retry
    assert state.in_place
    moved = tau_prompt("2024-05-15 15:09:00 EST")
    retry = canon.apply(moved, history, [], state)  # the retry's clock moved
    assert model_reads(*retry[:2])[0] == moved and not state.in_place
    again = canon.apply(moved, history, [], state)
    assert again == retry  # the moved form is stable from then on
    later = canon.apply(moved, grow(history, 2), [], state)
    assert extends(retry, later)


def test_an_instruction_change_without_a_value_change_stays_in_place() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    canon.apply(tau_prompt() + "Never run more than 1000 commands.\n", history, [], state)
    changed = tau_prompt() + "Never run more than 2000 commands.\n"
    system, messages, _ = canon.apply(changed, grow(history, 1), [], state)
    assert system == changed and state.in_place
    assert dicts(messages) == dicts(grow(history, 1))


def test_another_conversation_under_the_thread_reads_its_own_values_in_place() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    alice = "You assist one user.\nUser: alice-7731\nToday is 2026-11-28.\n"
    bob = "You assist one user.\nUser: bob-2209\nToday is 2026-11-29.\n"
    canon.apply(alice, START, [], state)
    canon.apply(alice, grow(START, 1), [], state)
    other = [Message("user", "Find the search ranking bug.")]
    system, messages, _ = canon.apply(bob, other, [], state)
    assert system == bob and state.in_place
    assert "alice" not in json.dumps([system, dicts(messages)])
    # Bob's own value then changes: it moves out, and he reads his current date.
    bob2 = bob.replace("2026-11-29", "2026-11-30")
    system, messages, _ = canon.apply(bob2, grow(other, 1), [], state)
    assert model_reads(system, messages)[0] == bob2 and not state.in_place


def test_a_stored_state_with_a_block_keeps_its_block() -> None:
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, clock_resolution_seconds=0))
    state = CanonicalState()
    first = canon.apply(tau_prompt(), START, [], state)
    stored = json.loads(state.model_dump_json())
    del stored["in_place"]  # written before the field existed
    restored = CanonicalState.model_validate(stored)
    assert not restored.in_place
    second = Canonicalizer(EXACT).apply(tau_prompt(), grow(START, 1), [], restored)
    assert extends(first, second)  # the restored thread keeps its block and its prefix
    fresh = CanonicalState.model_validate({})
    assert fresh.in_place


def test_move_when_changed_off_puts_the_block_in_the_first_call() -> None:
    config = CanonicalConfig(move_when_changed=False, clock_resolution_seconds=0)
    system, messages, _ = Canonicalizer(config).apply(tau_prompt(), START, [], CanonicalState())
    assert "{{datetime_1}}" in system and messages[0].text.startswith("<context>")
    assert model_reads(system, messages, config=config)[0] == tau_prompt()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changes=st.lists(st.booleans(), min_size=2, max_size=12),
    maintenance=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_in_place_until_the_first_change_then_at_most_one_break(
    changes: list[bool], maintenance: list[bool]
) -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    minute = 0
    requests = []
    first_change = None
    for i, change in enumerate(changes):
        if i and change:
            minute += 3
            first_change = i if first_change is None else first_change
        history = grow(history, i) if i else history
        system = tau_prompt(f"2024-05-15 15:{minute:02d}:00 EST")
        request = canon.apply(system, history, [], state, maintenance=maintenance[i])
        assert model_reads(*request[:2])[0] == system  # current at every call
        if first_change is None:
            assert request[0] == system and dicts(request[1]) == dicts(history)
        requests.append(request)
    breaks = [i for i, (a, b) in enumerate(itertools.pairwise(requests), 1) if not extends(a, b)]
    moved = [first_change] if first_change is not None else []
    # Between maintenance points the only break is the move; a maintenance point may refresh.
    assert [i for i in breaks if not maintenance[i]] == [i for i in moved if not maintenance[i]]

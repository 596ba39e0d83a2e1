"""What the model reads is current (DESIGN §2.7) while the prefix stays append-only (§2.1):
realistic system prompts and tool descriptions whose values change between calls, through
the canonicalizer and `CachePilot.prepare`.

The check used throughout: the system prompt (and each tool description) as sent, with every
placeholder replaced by the value the request last assigns it (the block, then the update
notes, in reading order), must equal the prompt the agent gave for that call.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical import CanonicalConfig, Canonicalizer, CanonicalState
from cachepilot.canonical.notes import read_placeholders, resolve_placeholders
from cachepilot.messages import Message, ToolCall

EXACT = CanonicalConfig(clock_resolution_seconds=0)


def model_reads(
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] = (),
    config: CanonicalConfig = EXACT,
) -> tuple[str, list[str]]:
    """The system prompt and tool descriptions as the model reads them (placeholders
    resolved by the request's own block and notes)."""
    values = read_placeholders([system or "", *(m.text for m in messages)], config)
    descriptions = [
        resolve_placeholders(str(t.get("description", "")), values, config) for t in tools
    ]
    return resolve_placeholders(system or "", values, config), descriptions


def dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]


def extends(before: tuple[Any, ...], after: tuple[Any, ...]) -> bool:
    """`after` starts with `before`: the same system and tools, its messages first."""
    (s1, m1, t1), (s2, m2, t2) = before, after
    return s1 == s2 and t1 == t2 and dicts(m2[: len(m1)]) == dicts(m1)


def grow(history: list[Message], i: int) -> list[Message]:
    """The transcript after one more agent step (a tool call and its result)."""
    call = ToolCall(f"c{i}", "bash", json.dumps({"command": f"step {i}"}))
    return [
        *history,
        Message("assistant", f"Step {i}.", tool_calls=(call,)),
        Message("tool", f"ok {i}", tool_call_id=f"c{i}", name="bash"),
    ]


START = [Message("user", "Refund order 4471 and tell me when it is done.")]


def budget_prompt(budget: int) -> str:
    return (
        "You are the payments agent of the support team.\n"
        "Permission tier: admin\n"
        f"Remaining budget: {budget} tokens\n"
        "Branch: feat/PAY-1423-refund\n"
        "Answer briefly and cite the ledger rows you used.\n"
    )


def test_a_budget_counting_down_is_current_in_every_call() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    out = []
    for i in range(20):
        history = grow(history, i) if i else history
        system = budget_prompt(1200 - 50 * i)
        out.append(canon.apply(system, history, [], state))
        read, _ = model_reads(*out[-1][:2])
        assert read == system, f"call {i}: the model reads a stale value"
        if i >= 2:
            assert extends(out[-2], out[-1]), f"call {i}: the prefix broke"
    assert "1200 tokens" not in out[-1][0] and "{{" in out[-1][0]
    # The notes coalesce into the block at a maintenance point.
    last = canon.apply(budget_prompt(250), grow(history, 20), [], state, maintenance=True)
    assert state.notes == [] and "<context-update>" not in "".join(m.text for m in last[1])
    assert model_reads(*last[:2])[0] == budget_prompt(250)


def test_values_the_issue_lists_are_current_after_each_change() -> None:
    def prompt(i: int) -> str:
        return (
            "You are a coding agent.\n"
            f"Mode: {['plan', 'build', 'review'][i % 3]}-mode{i}\n"
            f"Locale: {['en-US', 'de-DE', 'fr-FR'][i % 3]}\n"
            f"Model: gpt-5.{i}-mini\n"
            f"User: dev-{7731 + i}\n"
            f"Files in repo: {1200 + i}\n"
            f"Current todo: T-{40 + i}\n"
            f"Session 9f{i}c2e41-77aa\n"
            f"Build #{4711 + i}\n"
            f"Request id r-{9000 + 13 * i}\n"
            "Keep answers short.\n"
        )

    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    for i in range(6):
        history = grow(history, i) if i else history
        system, messages, _ = canon.apply(prompt(i), history, [], state)
        assert model_reads(system, messages)[0] == prompt(i)


def test_numbers_inside_instructions_are_instruction_changes() -> None:
    def prompt(limit: int, python: str, days: int) -> str:
        return (
            "You are a release agent.\n"
            f"Never run more than {limit} commands in one turn.\n"
            f"Target Python {python}.\n"
        ), f"Delete artifacts older than {days} days."

    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    steps = [(1000, "3.10", 1000), (5000, "3.12", 7), (2000, "3.13", 3650)]
    for i, (limit, python, days) in enumerate(steps):
        history = grow(history, i) if i else history
        system, description = prompt(limit, python, days)
        tools = [{"name": "cleanup", "description": description, "parameters": {}}]
        sent, messages, sent_tools = canon.apply(system, history, tools, state)
        assert sent == system  # sent as it is: the instruction itself changed
        assert sent_tools[0]["description"] == description
        assert model_reads(sent, messages, sent_tools)[0] == system
    assert state.learned == []


def test_a_repeated_context_is_not_learned() -> None:
    """A table whose rows share their context: a changed row is a change, not a value (the
    rows would all become placeholders, and the next real change invisible)."""
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    for i in range(4):
        history = grow(history, i) if i else history
        rows = [f"| queued | job-{1000 + r} |" for r in range(2000)]
        rows[5] = f"| queued | job-{1005 + 7000 * i} |"
        system = "Jobs of the queue:\n" + "\n".join(rows) + "\nPick the next one."
        sent, messages, _ = canon.apply(system, history, [], state)
        assert sent == system and model_reads(sent, messages)[0] == system
    assert state.learned == []


def test_an_iso_timestamp_in_a_tool_description_is_frozen() -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    history = START
    sent_tools = []
    for i in range(3):
        history = grow(history, i) if i else history
        stamp = f"2025-11-25T09:{31 + i}:{47 - i}Z"
        tools = [{"name": "status", "description": f"Server time: {stamp}.", "parameters": {}}]
        system, messages, out_tools = canon.apply("You watch the servers.", history, tools, state)
        sent_tools.append(out_tools)
        assert model_reads(system, messages, out_tools)[1] == [f"Server time: {stamp}."]
    # Sent as written until the stamp first changes; from then on frozen (never again changed).
    assert sent_tools[0] == [{**tools[0], "description": "Server time: 2025-11-25T09:31:47Z."}]
    assert sent_tools[1] == sent_tools[2] != sent_tools[0]


def test_a_clock_is_shown_as_of_its_reading() -> None:
    config = CanonicalConfig()  # 300 s resolution
    canon, state = Canonicalizer(config), CanonicalState()
    history = START
    start = dt.datetime(2026, 11, 28, 9, 0, 0)
    reads = []
    for i in range(8):
        history = grow(history, i) if i else history
        now = start + dt.timedelta(seconds=90 * i)
        system = f"You are a scheduler.\nCurrent time: {now:%Y-%m-%dT%H:%M:%S}\nBe brief."
        sent, messages, _ = canon.apply(system, history, [], state)
        if i == 0:  # as written until the clock first moves
            assert sent == system and messages == history
            continue
        text = "\n".join(m.text for m in messages)
        assert "(as of when this was written)" in text
        shown = read_placeholders([sent, *(m.text for m in messages)], config)["datetime_1"]
        reads.append(shown)
        age = now - dt.datetime.fromisoformat(shown)
        assert dt.timedelta(0) <= age < dt.timedelta(seconds=300)  # never older than that
    assert len(set(reads)) < len(reads)  # not re-sent on every call


@pytest.mark.parametrize("refresh", ["maintenance", "never"])
def test_another_conversation_under_one_thread_learns_nothing_and_reads_its_own(
    refresh: str,
) -> None:
    config = CanonicalConfig(clock_resolution_seconds=0, refresh=refresh)  # type: ignore[arg-type]
    canon, state = Canonicalizer(config), CanonicalState()
    alice = (
        "You assist one user.\nUser: alice-7731\nWorkspace: /home/alice/payments-v2\n"
        "Today is 2026-11-28.\nBe brief.\n"
    )
    bob = (
        "You assist one user.\nUser: bob-2209\nWorkspace: /home/bob/search-v3\n"
        "Today is 2026-11-29.\nBe brief.\n"
    )
    first = canon.apply(alice, START, [], state)
    second = canon.apply(alice, grow(START, 1), [], state)
    assert extends(first, second)
    other = [Message("user", "Find the search ranking bug.")]
    system, messages, _ = canon.apply(bob, other, [], state)
    assert state.learned == []  # nothing learned across conversations
    text = json.dumps([system, dicts(messages)])
    assert "alice" not in text and "payments-v2" not in text and "2026-11-28" not in text
    assert model_reads(system, messages, config=config)[0] == bob


def test_prepare_gives_the_current_values_through_the_pilot() -> None:
    pilot = CachePilot(Config(canonical=EXACT, recall_tool=False), store=InMemoryArtifactStore())
    history = START
    requests = []
    for i in range(10):
        history = grow(history, i) if i else history
        system = budget_prompt(1200 - 50 * i)
        requests.append(pilot.prepare(system, history, [], thread="t-budget"))
        assert model_reads(*requests[-1][:2])[0] == system
    epochs = len(pilot.state("t-budget").plan.epochs)
    if epochs == 0:
        assert all(extends(a, b) for a, b in itertools.pairwise(requests[2:]))


# --------------------------------------------------------------------------------------------
# The property: values changing between calls, maintenance points anywhere

_SLOT_VALUES = {
    "budget": st.integers(min_value=100, max_value=99_999).map(str),
    "branch": st.sampled_from(
        ["feat/PAY-1423-refund", "feat/PAY-88-refund", "feat/PAY-20417-refund"]
    ),
    "session": st.text("0123456789abcdef", min_size=8, max_size=12),
    "date": st.dates(min_value=dt.date(2024, 1, 1), max_value=dt.date(2027, 1, 1)).map(str),
    "model": st.sampled_from(["gpt-5.4-mini", "gpt-5.5", "claude-sonnet-4-5", "o4-mini"]),
}


def slot_prompt(values: dict[str, str]) -> str:
    return (
        "You are an agent of the platform team.\n"
        f"Remaining budget: {values['budget']} tokens\n"
        f"Branch: {values['branch']}\n"
        f"Session {values['session']}\n"
        f"Today is {values['date']}.\n"
        f"Model: {values['model']}\n"
        "Never run more than 1000 commands; keep answers short.\n"
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.fixed_dictionaries(_SLOT_VALUES),
    calls=st.lists(
        st.tuples(
            st.fixed_dictionaries({k: st.none() | v for k, v in _SLOT_VALUES.items()}),
            st.integers(min_value=0, max_value=9),
        ),
        min_size=2,
        max_size=14,
    ),
)
def test_values_are_current_and_prefixes_append_only(
    initial: dict[str, str], calls: list[tuple[dict[str, str | None], int]]
) -> None:
    canon, state = Canonicalizer(EXACT), CanonicalState()
    values = dict(initial)
    history = START
    previous = None
    stable_changes = 0
    for i, (changes, dice) in enumerate(calls):
        values.update({k: v for k, v in changes.items() if v is not None})
        history = grow(history, i) if i else history
        maintenance = dice == 0  # about one call in ten is a maintenance point
        system = slot_prompt(values)
        request = canon.apply(system, history, [], state, maintenance=maintenance)
        assert model_reads(*request[:2])[0] == system  # nothing stale shown as current
        if previous is not None and not maintenance:
            if request[0] == previous[0]:
                assert extends(previous, request)  # §2.1 between maintenance points
            else:
                stable_changes += 1  # learning a span: the client's own prompt changed
        previous = request
    # Learned once per slot (again at most once when a value outgrows the learned shape),
    # not on every call.
    assert stable_changes <= 2 * len(_SLOT_VALUES)

"""Memoised steps of a fold (ranked values, call labels) give what the unmemoised step gives
and keep no large input alive: a memo's keys are held until evicted, so what a memo may hold
is bounded per entry, whatever a tool output or a model's tool call carries."""

from __future__ import annotations

from cachepilot.fold import facts_in_use
from cachepilot.memory import values
from cachepilot.messages import ToolCall


def _ranked_unmemoised(scores: dict[str, float]) -> list[str]:
    return list(values._ranked.__wrapped__(tuple(scores), tuple(scores.values())))


def test_the_ranking_of_a_source_many_outputs_fed_is_not_kept_by_the_memo() -> None:
    # A command run again and again gathers the values of every run on one source: the
    # ranking of that merged set must not be kept (1,024 entries of it would be unbounded).
    merged = {f"handler_{i:05d}.value_{i % 13}": float(i % 17) for i in range(6_000)}
    values._ranked.cache_clear()
    got = values.ranked(merged)
    assert values._ranked.cache_info().currsize == 0
    assert got == _ranked_unmemoised(merged)


def test_a_small_ranking_is_memoised_and_a_caller_cannot_change_the_kept_one() -> None:
    scores = {"alpha_value": 2.0, "beta": 1.0, "alpha": 1.5, "gamma_9": 2.0}
    values._ranked.cache_clear()
    first = values.ranked(scores)
    assert values._ranked.cache_info().currsize == 1
    first.append("injected")
    first.reverse()
    again = values.ranked(dict(reversed(scores.items())))  # the same values, another order
    assert again == _ranked_unmemoised(scores)
    assert "injected" not in again


def test_a_call_with_a_huge_tool_name_is_labelled_without_being_kept() -> None:
    # The name is the model's (untrusted) as much as the arguments are.
    name = "tool_" + "x" * 200_000
    call = ToolCall(id="c1", name=name, arguments='{"path": "src/app.py"}')
    facts_in_use._labelled.cache_clear()
    label = facts_in_use._call_label(call)
    assert facts_in_use._labelled.cache_info().currsize == 0
    assert label == facts_in_use._label(name, call.parsed_arguments())


def test_a_short_call_is_labelled_as_unmemoised() -> None:
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "./src//app.py"}')
    facts_in_use._labelled.cache_clear()
    assert facts_in_use._call_label(call) == facts_in_use._label(call.name, call.parsed_arguments())
    assert facts_in_use._labelled.cache_info().currsize == 1

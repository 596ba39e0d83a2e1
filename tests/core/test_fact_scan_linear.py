"""The fact-shaped value scan (`memory.facts.count_candidates`): the patterns' own matches on
ordinary text, and bounded pieces of a run too long to scan with them in linear time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.memory import facts
from cachepilot.memory.facts import count_candidates

_ALPHABET = "aAbZz019_./()-x \n\"'éß:"


def _reference(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in facts._CANDIDATE.finditer(text):
        value = m.group(0).strip()
        if len(value) >= 4:
            counts[value] = counts.get(value, 0) + 1
    for m in facts._QUOTE.finditer(text):
        value = (m.group(1) or m.group(2)).strip()
        if len(value) >= 4:
            counts[value] = counts.get(value, 0) + 1
    return counts


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=300))
def test_ordinary_text_gets_the_patterns_own_matches(text: str) -> None:
    assert count_candidates(text) == _reference(text)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(alphabet=_ALPHABET, max_size=120), max_size=6),
    st.lists(st.text(alphabet="ab_Z09./-", min_size=300, max_size=600), max_size=3),
)
def test_text_around_a_long_run_is_read_as_without_it(pieces: list[str], runs: list[str]) -> None:
    """Ordinary text on either side of a long run gets exactly the matches it gets alone; what
    the run gives is made of its own characters, each piece bounded."""
    ordinary = " ! ".join(pieces)
    long_runs = [r for r in runs if len(r) > facts._LONG_RUN]
    text = ordinary + "".join(f" {r} " for r in long_runs)
    got = count_candidates(text)
    alone = _reference(ordinary)
    from_runs: dict[str, int] = {}
    for run in long_runs:
        for value, count in count_candidates(run).items():
            assert value in run
            from_runs[value] = from_runs.get(value, 0) + count
    expected = dict(alone)
    for value, count in from_runs.items():
        expected[value] = expected.get(value, 0) + count
    assert got == expected


def test_a_run_without_separators_is_not_read_quadratically() -> None:
    # 200,000 characters: quadratic backtracking would take hours; bounded, it finds nothing
    # fact-shaped in them, and the values around it as always.
    text = "see src/app/main.py and handler_name " + "x" * 200_000 + " then 1234.5"
    found = count_candidates(text)
    assert found == {"src/app/main.py": 1, "handler_name": 1, "1234.5": 1}

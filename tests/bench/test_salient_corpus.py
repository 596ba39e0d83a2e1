"""The salient-preview corpus and its metric, and the bar the salient preview must clear."""

from __future__ import annotations

import pytest

from cachepilot.reduce import STUB_OVERHEAD, ReduceConfig
from cachepilot_bench.salient_corpus import (
    GENERATORS,
    Sample,
    build_corpus,
    marked_in_view,
    marked_share,
)
from cachepilot_bench.salient_corpus.evaluate import evaluate, head_tail_viewer, salient_viewer


@pytest.fixture(scope="module")
def corpus() -> list[Sample]:
    return build_corpus(seed=0)


def test_the_corpus_is_deterministic_and_covers_the_tools(corpus: list[Sample]) -> None:
    again = build_corpus(seed=0, variants=1)
    assert [s.text for s in again] == [s.text for s in corpus[::3]]
    assert build_corpus(seed=1, variants=1)[0].text != again[0].text
    assert len(GENERATORS) >= 20 and {s.name for s in corpus} == set(GENERATORS)
    for sample in corpus:
        assert 70_000 <= len(sample.text) <= 200_000, sample.name
        assert sample.marked, sample.name
        rows = sample.text.split("\n")
        for line in sample.marked:
            assert line in rows, (sample.name, line)  # marks name lines, kept out of the text
        assert len(set(rows)) > len(rows) // 4, sample.name  # lines vary
    middles = [s for s in corpus if 0.4 <= s.position <= 0.6]
    assert len(middles) >= len(GENERATORS)
    assert any("\r" in s.text for s in corpus)  # progress bars


def test_the_metric_counts_marked_lines(corpus: list[Sample]) -> None:
    sample = corpus[0]
    assert marked_share(sample.text, sample) == 1.0
    assert marked_share("", sample) == 0.0
    first = sample.marked[0]
    assert marked_in_view("x\n" + first.replace(" ", "   ") + "\n", sample)[0]


def test_marked_lines_stay_in_view_within_todays_size_plus_1500(corpus: list[Sample]) -> None:
    config = ReduceConfig()
    # The size gate's note on the values of the omitted lines comes on top, within its budget.
    values_note = config.values_chars + len("[values in the omitted lines: ]\n")
    bound = config.head_chars + config.tail_chars + 1_500 + 2 * STUB_OVERHEAD + values_note
    [salient, today] = evaluate(
        corpus, {("salient", 1_500): salient_viewer(1_500), ("head/tail", 0): head_tail_viewer(0)}
    )
    assert salient.max_chars <= bound
    assert salient.max_chars <= today.max_chars + 1_500 + 100  # longer markers, a JSON note
    assert salient.share >= 0.95, salient
    assert today.share < 0.5  # the corpus is one head/tail previews fail on

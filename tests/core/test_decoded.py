"""JSON carrying text, read as text (`cachepilot.reduce.decoded`), and recall's long-line grep."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.artifacts.memory import InMemoryArtifactStore
from cachepilot.recall.tool import recall
from cachepilot.reduce.decoded import DECODE_MIN_CHARS, decoded_text

LOG = "".join(f"step {i}: built target_{i} (ok)\n" for i in range(40))


def test_a_json_document_lays_its_long_strings_out_as_lines() -> None:
    text = json.dumps({"returncode": 1, "output": LOG, "note": "short\nstring"})
    decoded = decoded_text(text)
    assert decoded is not None
    assert decoded.startswith('{"returncode": 1, "output": "step 0: built target_0 (ok)\nstep 1')
    assert decoded.endswith('step 39: built target_39 (ok)\n", "note": "short\\nstring"}')
    assert len(decoded.splitlines()) == 41  # short strings stay escaped


def test_json_lines_and_json_inside_other_text() -> None:
    record = json.dumps({"output": LOG})
    text = f"Observation:\n{record}\n{record}\ntrailer"
    decoded = decoded_text(text)
    assert decoded is not None
    rows = decoded.splitlines()
    assert rows[0] == "Observation:" and rows[-1] == "trailer"
    assert rows.count("step 7: built target_7 (ok)") == 2


def test_what_is_not_json_or_not_long_is_left_alone() -> None:
    assert decoded_text("plain text with a \\n in it" * 20) is None
    assert decoded_text(json.dumps({"a": "x\ny"})) is None  # shorter than DECODE_MIN_CHARS
    assert decoded_text(json.dumps({"a": "x" * 500})) is None  # no line breaks
    broken = '{"output": "' + "a\\n" * 200 + '"'  # not valid JSON: one line as it is
    assert decoded_text(broken) is None


def test_escapes_are_decoded_whole() -> None:
    value = 'é → 😀 "q" \\ tab\there\n' * 20
    text = json.dumps({"output": value})  # ASCII escapes, surrogate pairs for the emoji
    decoded = decoded_text(text)
    assert decoded == '{"output": "' + value + '"}'
    lone = '{"output": "' + "x\\n" * 120 + '\\ud800"}'  # a lone surrogate: kept as written
    assert decoded_text(lone) is None


@settings(max_examples=80, deadline=None)
@given(
    value=st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.text(max_size=400), st.integers(), st.lists(st.text(max_size=300))),
        max_size=4,
    ),
    ascii_only=st.booleans(),
)
def test_decoding_keeps_every_value(value: dict[str, object], ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    decoded = decoded_text(text)
    if decoded is None:
        return
    assert len(decoded.splitlines()) > len(text.splitlines())
    for item in value.values():
        strings = item if isinstance(item, list) else [item]
        for string in strings:
            if (
                isinstance(string, str)
                and len(json.dumps(string)) >= DECODE_MIN_CHARS
                and json.dumps(string).count("\\n") >= 2
                and ascii_only
            ):
                assert string in decoded


def test_grep_shows_a_long_line_around_its_match() -> None:
    store = InMemoryArtifactStore()
    line = "x" * 50_000 + "NEEDLE here" + "y" * 50_000
    ref = store.put("t", "first\n" + line + "\nlast\n")
    got = recall(store, "t", ref, grep="NEEDLE")
    assert got.matches == 1
    assert "NEEDLE here" in got.content and len(got.content) < 2_000
    assert got.content.startswith("2: [chars 49,601-50,800 of 100,011] …")
    assert 'lines="2") returns line 2 whole' in got.render()

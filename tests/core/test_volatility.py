"""Volatile spans learned per thread (`cachepilot.canonical.volatility`) and their freezing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical import CanonicalConfig, Canonicalizer, CanonicalState
from cachepilot.canonical.volatility import (
    MAX_LEARNED,
    LearnedSpan,
    find_learned,
    learn,
    merge_learned,
    replace_learned,
)
from cachepilot.messages import Message

BIG = 10**7
PROMPT = (
    "You are a coding agent working in a sandbox.\n"
    "Session {sid}\n"
    "Always run the tests before you answer, and keep answers short.\n"
)


def learned(old: str, new: str, **kwargs: Any) -> list[LearnedSpan] | None:
    return learn(old, new, "system", max_chars=kwargs.pop("max_chars", BIG), **kwargs)


# --------------------------------------------------------------------------------------------
# The rule


def test_a_changed_session_id_is_learned_and_found_with_a_third_value() -> None:
    a, b = PROMPT.format(sid="9f0c2e41-77aa"), PROMPT.format(sid="9f1c2e41-77aa")
    spans = learned(a, b)
    assert spans is not None and len(spans) == 1
    assert spans[0].left == "Session " and spans[0].digit
    third = PROMPT.format(sid="9f2c2e41-77aa")
    assert replace_learned(third, spans, "<v>") == PROMPT.format(sid="<v>")
    # The shape is learned, not the values: a value of another length still matches.
    assert replace_learned(PROMPT.format(sid="a1b2c3d4e5-1"), spans, "<v>") == PROMPT.format(
        sid="<v>"
    )
    # Without a digit the value is a word, not the id.
    assert replace_learned(PROMPT.format(sid="expired"), spans, "<v>") == PROMPT.format(
        sid="expired"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # a new paragraph
        (PROMPT.format(sid="s1234"), PROMPT.format(sid="s1234") + "\nNever push to main.\n"),
        # a different task: a word swapped for a word
        ("You are a Python expert. Review the code.", "You are a Rust expert. Review the code."),
        # a small number in an instruction
        ("Indent with 4 spaces in every file.", "Indent with 2 spaces in every file."),
        # whitespace changed next to the value
        ("Session abc12345 is open today.", "Session abc12346  is open today."),
        # an edit longer than a token
        ("Build: 1234 ok, now start.", "Build: 1234 failed badly, now start."),
        # no identical text left of the value (a placeholder right before it)
        ("At {{date_1}}ab12cd34 then the rest", "At {{date_1}}ab12cd35 then the rest"),
        # touching a placeholder
        ("Now {{date_1}} then more text", "Now {{date_2}} then more text"),
    ],
)
def test_genuine_changes_are_not_learned(old: str, new: str) -> None:
    assert learned(old, new) is None


def test_equal_texts_learn_nothing_and_long_ones_are_a_change() -> None:
    assert learned("same", "same") == []
    a = "x" * 2000 + " id 1234abcd end"
    b = "x" * 2000 + " id 1234abce end"
    assert learned(a, b, max_chars=1000) is None
    assert learned(a, b) is not None


def test_two_neighbouring_values_are_two_spans() -> None:
    spans = learned(
        "Build 1234 (abc123) is ready for the tests.", "Build 1299 (abd124) is ready for the tests."
    )
    assert spans is not None and len(spans) == 2
    text = "Build 7 (zz99) is ready for the tests."
    assert [text[s:e] for s, e in find_learned(text, spans)] == ["zz99"]  # "7": too short
    text = "Build 4400 (zz99) is ready for the tests."
    assert [text[s:e] for s, e in find_learned(text, spans)] == ["4400", "zz99"]


def test_sentence_punctuation_stays_context() -> None:
    spans = learned("The run id is r-2041.\nGo on.", "The run id is r-2042.\nGo on.")
    assert spans is not None
    text = "The run id is r-2047.\nGo on."
    assert [text[s:e] for s, e in find_learned(text, spans)] == ["r-2047"]


def test_large_prompts_with_changes_at_both_ends_are_learned() -> None:
    middle = "".join(f"Rule {i}: keep the build green and the logs short.\n" for i in range(4000))
    assert len(middle) > 200_000
    a = f"Session 9f0c2e41-77aa\n{middle}Build 20251 today\n"
    b = f"Session 9f1c2e41-77ab\n{middle}Build 20252 today\n"
    spans = learned(a, b, max_chars=400_000)
    assert spans is not None and len(spans) == 2
    # A paragraph inserted in the middle of the large prompt is a change.
    c = b.replace("Rule 2000:", "Never deploy on Fridays.\nRule 2000:")
    assert learned(b, c, max_chars=400_000) is None


def test_merge_widens_a_known_span_and_keeps_the_newest() -> None:
    one = LearnedSpan(group="system", left="id ", right="\n", min_len=4, max_len=10, digit=True)
    wider = one.model_copy(update={"min_len": 2, "max_len": 30, "punct": "-"})
    merged = merge_learned([one], [wider])
    assert len(merged) == 1 and merged[0].min_len == 2 and merged[0].max_len == 30
    many = [one.model_copy(update={"left": f"k{i} "}) for i in range(MAX_LEARNED + 5)]
    kept = merge_learned([], many)
    assert len(kept) == MAX_LEARNED and kept[-1].left == f"k{MAX_LEARNED + 4} "


# --------------------------------------------------------------------------------------------
# The canonicalizer


def call(canon: Canonicalizer, state: CanonicalState, system: str, tools: Any = ()) -> Any:
    return canon.apply(system, [Message(role="user", content="Fix the build.")], tools, state)


def test_the_canonicalizer_freezes_a_learned_span_from_the_second_call() -> None:
    canon, state = Canonicalizer(), CanonicalState()
    sids = ["9f0c2e41-77aa", "9f1c2e41-77aa", "9f2c2e41-77aa", "9f3c2e41-77ab"]
    out = [call(canon, state, PROMPT.format(sid=s)) for s in sids]
    assert out[0][0] == PROMPT.format(sid=sids[0])  # the first call cannot know
    assert out[1][0] == out[2][0] == out[3][0] == PROMPT.format(sid="{{learned_1}}")
    # The value reaches the model in the block, frozen like a built-in value; each later
    # value in a note after it (the same request again here: appended to its message).
    assert "{{learned_1}} = 9f1c2e41-77aa" in out[3][1][0].text
    assert out[3][1][0].text.startswith(out[2][1][0].text)
    assert out[2][1][0].text.startswith(out[1][1][0].text)
    assert out[3][1][0].text.endswith("{{learned_1}} = 9f3c2e41-77ab\n</context-update>")
    assert len(state.learned) == 1
    # The state survives a restart (JSON round trip, a new canonicalizer).
    restored = CanonicalState.model_validate(json.loads(state.model_dump_json()))
    again = call(Canonicalizer(), restored, PROMPT.format(sid="0000aaaa-1111"))
    assert again[0] == out[3][0] and again[1][0].text.startswith(out[3][1][0].text)
    assert again[1][0].text.endswith("{{learned_1}} = 0000aaaa-1111\n</context-update>")


def test_tool_description_jitter_is_frozen() -> None:
    canon, state = Canonicalizer(), CanonicalState()

    def tools(build: int) -> list[dict[str, Any]]:
        return [
            {
                "name": "bash",
                "description": f"Run a command in sandbox r{build}x, then report.",
                "input_schema": {"type": "object", "properties": {}},
            }
        ]

    out = [call(canon, state, "You are terse.", tools(b)) for b in (101, 102, 103)]
    assert out[1][2] == out[2][2]
    assert out[1][2][0]["description"] == "Run a command in sandbox {{learned_1}}, then report."
    assert "{{learned_1}} = r102x" in out[2][1][0].text
    # An unchanged tool list comes back as the same objects (identity memos keep hitting).
    assert call(canon, state, "You are terse.", tools(104))[2][0] is out[2][2][0]


def test_learning_is_off_when_disabled_and_over_the_bound() -> None:
    off = Canonicalizer(CanonicalConfig(learn_volatile=False))
    state = CanonicalState()
    out = [call(off, state, PROMPT.format(sid=s)) for s in ("a1b2c3d4", "a1b2c3d5")]
    assert out[1][0] == PROMPT.format(sid="a1b2c3d5") and not state.learned
    bounded = Canonicalizer(CanonicalConfig(learn_max_chars=1_000))
    state = CanonicalState()
    long = PROMPT + "Keep the logs short. " * 100
    out = [call(bounded, state, long.format(sid=s)) for s in ("a1b2c3d4", "a1b2c3d5")]
    assert "a1b2c3d5" in out[1][0] and not state.learned and not state.baselines


def test_a_genuine_change_passes_through_and_learning_resumes() -> None:
    canon, state = Canonicalizer(), CanonicalState()
    call(canon, state, PROMPT.format(sid="a1b2c3d4"))
    changed = PROMPT.format(sid="a1b2c3d5") + "New rule: never push to main.\n"
    out = call(canon, state, changed)
    assert out[0] == changed and not state.learned  # two changes at once: a change
    out = call(canon, state, changed.replace("a1b2c3d5", "a1b2c3d6"))
    assert "{{learned_1}}" in out[0] and "never push to main" in out[0]


def test_the_library_prepare_path_learns_per_thread() -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    messages = [Message(role="user", content="Fix the build.")]
    systems = [
        pilot.prepare(PROMPT.format(sid=s), messages, thread="t")[0]
        for s in ("77aa-0001", "77aa-0002", "77aa-0003")
    ]
    assert systems[1] == systems[2] != systems[0]
    other = pilot.prepare(PROMPT.format(sid="77aa-0004"), messages, thread="u")[0]
    assert other == PROMPT.format(sid="77aa-0004")  # another thread learns on its own
    exported = pilot.export_state("t")
    fresh = CachePilot(Config(), store=InMemoryArtifactStore())
    fresh.load_state("t", exported)
    assert fresh.prepare(PROMPT.format(sid="77aa-0005"), messages, thread="t")[0] == systems[2]


# --------------------------------------------------------------------------------------------
# Properties

_VOCABULARY = "the agent must keep every build green and read logs before it edits files answer"
_WORDS = st.sampled_from(_VOCABULARY.split(" "))
_SENTENCE = st.lists(_WORDS, min_size=4, max_size=12).map(lambda w: " ".join(w).capitalize() + ".")
_PARAGRAPHS = st.lists(_SENTENCE, min_size=2, max_size=8)
_TOKEN = st.text("0123456789abcdefghijklmnopqrstuvwxyz", min_size=5, max_size=11).filter(
    lambda t: any(c.isdigit() for c in t)
)
_LABELS = st.sampled_from(["Session", "Build", "Sandbox run", "Trace", "Worker"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    paragraphs=_PARAGRAPHS,
    where=st.integers(min_value=0, max_value=8),
    label=_LABELS,
    tokens=st.lists(_TOKEN, min_size=4, max_size=4, unique=True),
)
def test_a_changing_token_is_frozen_from_the_second_call(
    paragraphs: list[str], where: int, label: str, tokens: list[str]
) -> None:
    at = min(where, len(paragraphs))

    def prompt(token: str) -> str:
        lines = [*paragraphs[:at], f"{label} {token} is active.", *paragraphs[at:]]
        return "\n\n".join(lines)

    canon, state = Canonicalizer(), CanonicalState()
    out = [call(canon, state, prompt(t)) for t in tokens]
    assert out[1][0] == out[2][0] == out[3][0]  # byte-identical from the second call on
    assert tokens[2] not in out[2][0] and tokens[3] not in out[3][0]
    assert f"= {tokens[1]}" in out[3][1][0].text  # the frozen value reaches the model


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    paragraphs=_PARAGRAPHS,
    inserted=st.lists(_SENTENCE, min_size=1, max_size=3),
    where=st.integers(min_value=0, max_value=8),
)
def test_an_inserted_paragraph_is_never_frozen(
    paragraphs: list[str], inserted: list[str], where: int
) -> None:
    at = min(where, len(paragraphs))
    before = "\n\n".join(paragraphs)
    paragraph = " ".join(inserted)
    after = "\n\n".join([*paragraphs[:at], paragraph, *paragraphs[at:]])
    canon, state = Canonicalizer(), CanonicalState()
    call(canon, state, before)
    out = call(canon, state, after)
    assert out[0] == after and not state.learned


def test_a_value_beyond_the_learned_shape_widens_the_span() -> None:
    canon, state = Canonicalizer(), CanonicalState()
    sids = ["a1b2-0001", "a1b2-0002", "a1b2-0003-extended-build-with-a-much-longer-tail-99"]
    out = [call(canon, state, PROMPT.format(sid=s)) for s in sids]
    assert out[2][0] == out[1][0] == PROMPT.format(sid="{{learned_1}}")
    assert len(state.learned) == 1 and state.learned[0].max_len >= len(sids[2])

"""The size gate's values note: the exact values of the lines a preview leaves out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.reduce import REDUCED_STUB_RE, ReduceConfig, default_pipeline, normalize_output
from cachepilot.reduce.preview import salient_preview

NOTE = "[values in the omitted lines: "
_VALUE = r"[a-z]{3,8}(_[a-z]{3,8}){0,2}|[a-z]{2,6}/[a-z]{2,6}\.py|\d{4,6}"


def doc_page(field: str, lines: int = 1_200) -> str:
    """A long documentation page whose middle defines `field` (twice) among prose."""
    words = ("hooks", "matcher", "timeout", "settings", "events", "plugins", "commands",
             "scripts", "prompts", "agents", "servers", "policies", "sessions")  # fmt: skip
    out = [
        " ".join(words[(i * k + k * k) % len(words)] for k in range(1, 9)).capitalize() + "."
        for i in range(lines)
    ]
    at = lines // 2
    out[at] = f'| `{field}` | string | The field "{field}" names the event. |'
    out[at + 40] = f"Set {field} in .claude/settings.json to change it."
    return "\n".join(out) + "\n"


def note_of(text: str) -> str | None:
    return next((row for row in text.split("\n") if row.startswith(NOTE)), None)


def test_a_field_defined_in_the_omitted_middle_is_named() -> None:
    page = doc_page("hook_event_name")
    reduction = default_pipeline().run("web_fetch", {"url": "https://x.test/h"}, "c",
                                       normalize_output(page))  # fmt: skip
    assert reduction.lossy
    note = note_of(reduction.text)
    assert note is not None
    assert "hook_event_name" in note
    assert ".claude/settings.json" in note
    # The stub's size claim counts the note.
    match = REDUCED_STUB_RE.search(reduction.text)
    assert match is not None
    assert f"→ {len(reduction.text):,} chars" in match.group(0)
    assert len(reduction.text) < ReduceConfig().default_limit


def test_values_the_preview_shows_are_not_repeated() -> None:
    page = doc_page("hook_event_name")
    lines = page.split("\n")
    lines[0] = "hook_event_name is the first thing this page names."
    reduction = default_pipeline().run("web_fetch", {}, "c", normalize_output("\n".join(lines)))
    note = note_of(reduction.text)
    assert note is None or "hook_event_name" not in note
    assert reduction.text.count("hook_event_name") == 1


def test_a_run_of_numbers_names_two_and_leaves_room() -> None:
    text = "\n".join(f"row {i}" for i in range(100))
    values = [str(4000 + i) for i in range(30)] + ["src/net/socket_pool.c", "PoolTimeout"]
    preview = salient_preview(text, 50, 50, 0, None, original_chars=len(text), values=values,
                              values_chars=400)  # fmt: skip
    note = note_of(preview)
    assert note == f"{NOTE}4000, 4001, src/net/socket_pool.c, PoolTimeout]"
    # The stub's size claim counts the note.
    assert f"→ {len(preview):,} chars" in preview


def test_the_note_names_what_fits_its_budget_best_first() -> None:
    text = "\n".join(f"row {i}" for i in range(100))
    values = ["first_value", "x" * 60, "second_value"]
    budget = len(NOTE) + 1 + len("first_value, second_value")
    preview = salient_preview(text, 50, 50, 0, None, original_chars=len(text), values=values,
                              values_chars=budget)  # fmt: skip
    assert note_of(preview) == f"{NOTE}first_value, second_value]"
    none = salient_preview(text, 50, 50, 0, None, original_chars=len(text), values=values,
                           values_chars=10)  # fmt: skip
    assert note_of(none) is None


def test_no_budget_no_note() -> None:
    config = ReduceConfig(values_chars=0)
    reduction = default_pipeline(config).run("web_fetch", {}, "c",
                                             normalize_output(doc_page("agent_type")))  # fmt: skip
    assert reduction.lossy
    assert note_of(reduction.text) is None


def test_values_chars_is_validated() -> None:
    with pytest.raises(ValueError, match="values_chars"):
        ReduceConfig(values_chars=-1)


def test_a_credential_in_the_middle_is_never_named() -> None:
    page = doc_page("hook_event_name").split("\n")
    page[700] = "export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    reduction = default_pipeline().run("web_fetch", {}, "c", normalize_output("\n".join(page)))
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in reduction.text


@settings(max_examples=25, deadline=None)
@given(
    words=st.lists(
        st.from_regex(_VALUE, fullmatch=True),
        min_size=1,
        max_size=40,
    ),
    budget=st.integers(min_value=0, max_value=2_000),
)
def test_the_note_stays_in_its_budget_and_names_only_output_values(
    words: list[str], budget: int
) -> None:
    rows = [f"line {i}: {words[i % len(words)]} and more text here" for i in range(2_000)]
    text = "\n".join(rows)
    config = ReduceConfig(values_chars=budget)
    reduction = default_pipeline(config).run("bash", {"command": "run"}, "c",
                                             normalize_output(text))  # fmt: skip
    note = note_of(reduction.text)
    if note is None:
        return
    assert len(note) <= budget
    for value in note[len(NOTE) : -1].split(", "):
        assert value in text

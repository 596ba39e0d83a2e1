from __future__ import annotations

import asyncio
import builtins
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import (
    Artifact,
    ArtifactInfo,
    BaseArtifactStore,
    InMemoryArtifactStore,
    SQLiteArtifactStore,
)
from cachepilot.canonical import canonical_json
from cachepilot.recall.tool import (
    DEFAULT_MAX_CHARS,
    RECALL_TOOL_NAME,
    RECALL_TOOL_SCHEMA,
    RecallResult,
    arecall,
    recall,
)
from cachepilot.tokens import get_counter

_TOKENS = ["\n", "\r", "\r\n", "\x0b", "\x1c", "\x85", "\u2028", "\ud800", "\x00", "  "]
awkward_text = st.lists(
    st.one_of(st.characters(), st.sampled_from(_TOKENS), st.text(min_size=30, max_size=80)),
    max_size=60,
).map("".join)
texts = st.one_of(st.text(), awkward_text)


def follow(
    store: BaseArtifactStore, thread: str, ref: str, max_chars: int, lines: str | None = None
) -> tuple[str, int]:
    """Concatenate a recall and all its continuations; returns (text, number of calls)."""
    result = recall(store, thread, ref, lines=lines, max_chars=max_chars)
    parts = [result.content]
    calls = 1
    while result.truncated:
        assert result.next_lines is not None
        result = recall(store, thread, ref, lines=result.next_lines, max_chars=max_chars)
        assert result.found and result.error is None, result.render()
        parts.append(result.content)
        calls += 1
        assert calls < 10_000
    return "".join(parts), calls


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    s: BaseArtifactStore
    if request.param == "memory":
        s = InMemoryArtifactStore()
    else:
        s = SQLiteArtifactStore(tmp_path / "recall.sqlite")
    yield s
    s.close()


_store = InMemoryArtifactStore()


# --- properties ----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(text=texts)
def test_full_recall_is_identical(text: str) -> None:
    ref = _store.put("p", text)
    result = recall(_store, "p", ref, max_chars=max(len(text), 1))
    assert result.found and not result.truncated
    assert result.content == text
    assert result.content.encode("utf-8", "surrogatepass") == text.encode("utf-8", "surrogatepass")
    assert result.total_chars == len(text)
    assert result.total_lines == len(text.splitlines())


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=400))
def test_binary_content_round_trips(data: bytes) -> None:
    ref = _store.put("p-bin", data)  # own thread: b"x" and "x" share one artifact
    result = recall(_store, "p-bin", ref, max_chars=max(len(data), 1))
    assert result.found and not result.is_text
    assert result.content.encode("utf-8", "surrogateescape") == data
    rendered = result.render()
    rendered.encode("utf-8")  # always sendable: no surrogates
    assert f"binary {len(data):,} bytes" in rendered


@settings(max_examples=200, deadline=None)
@given(text=texts, data=st.data())
def test_line_ranges_are_exact_slices(text: str, data: st.DataObject) -> None:
    lines = text.splitlines(keepends=True)
    assume(lines)
    start = data.draw(st.integers(1, len(lines)), label="start")
    end = data.draw(st.integers(start, len(lines) + 3), label="end")
    ref = _store.put("p", text)
    result = recall(_store, "p", ref, lines=f"{start}-{end}", max_chars=len(text) + 1)
    assert result.error is None
    assert result.content == "".join(lines[start - 1 : end])
    assert (result.start_line, result.end_line) == (start, min(end, len(lines)))
    for spec, expected in [
        (f"{start}-", lines[start - 1 :]),
        (f"-{start}", lines[:start]),
        (str(start), lines[start - 1 : start]),
    ]:
        sliced = recall(_store, "p", ref, lines=spec, max_chars=len(text) + 1)
        assert sliced.content == "".join(expected), spec


@settings(max_examples=200, deadline=None)
@given(text=texts, max_chars=st.integers(1, 120))
def test_following_continuations_reconstructs_the_original(text: str, max_chars: int) -> None:
    ref = _store.put("p", text)
    rebuilt, calls = follow(_store, "p", ref, max_chars)
    assert rebuilt == text
    if len(text) <= max_chars:
        assert calls == 1


@settings(max_examples=100, deadline=None)
@given(text=texts, max_chars=st.integers(1, 60), data=st.data())
def test_continuations_within_a_range(text: str, max_chars: int, data: st.DataObject) -> None:
    lines = text.splitlines(keepends=True)
    assume(lines)
    start = data.draw(st.integers(1, len(lines)))
    end = data.draw(st.integers(start, len(lines)))
    ref = _store.put("p", text)
    rebuilt, _ = follow(_store, "p", ref, max_chars, lines=f"{start}-{end}")
    assert rebuilt == "".join(lines[start - 1 : end])


@settings(max_examples=100, deadline=None)
@given(
    lines=st.lists(st.text(st.characters(exclude_characters="\n\r"), max_size=20), max_size=40),
    pattern=st.sampled_from(["a", "[0-9]", "^$", "x|y", "(", "."]),
    max_chars=st.integers(1, 100),
)
def test_grep_continuations_list_every_match_once(
    lines: list[str], pattern: str, max_chars: int
) -> None:
    text = "\n".join(lines)
    ref = _store.put("p", text)
    physical = text.splitlines()
    try:
        rx = re.compile(pattern)
    except re.error:
        rx = re.compile(re.escape(pattern))
    expected = [i + 1 for i, line in enumerate(physical) if rx.search(line)]
    seen: list[int] = []
    result = recall(_store, "p", ref, grep=pattern, max_chars=max_chars)
    assert result.matches == len(expected)
    while True:
        seen += [int(line.split(":", 1)[0]) for line in result.content.splitlines()]
        if not result.truncated:
            break
        assert result.next_lines is not None
        result = recall(
            _store, "p", ref, lines=result.next_lines, grep=pattern, max_chars=max_chars
        )
    assert seen == expected


# --- rendering ---------------------------------------------------------------------------------


def _numbered(n: int) -> str:
    return "".join(f"line {i:04d} of the build log\n" for i in range(1, n + 1))


def test_render_header_range_and_continuation(store: BaseArtifactStore) -> None:
    text = _numbered(2345)
    ref = store.put("t", text)
    width = len("line 0001 of the build log\n")
    result = recall(store, "t", ref, lines="120-180", max_chars=width * 30 + 5)
    assert result.truncated
    assert result.content == "".join(text.splitlines(keepends=True)[119:149])
    assert result.next_lines == "150-180"
    rendered = result.render()
    first, *_, last = rendered.splitlines()
    assert first == f"[recall {ref} · lines 120-149 of 2,345 · {len(text):,} chars]"
    assert last == (
        f'[continues: recall(ref="{ref}", lines="150-180", max_chars={width * 30 + 5})]'
    )
    assert "line 0120 of the build log\n" in rendered

    whole = recall(store, "t", ref, lines="120-180")
    assert not whole.truncated and whole.next_lines is None
    assert whole.render().splitlines()[0] == (
        f"[recall {ref} · lines 120-180 of 2,345 · {len(text):,} chars]"
    )
    assert "continues" not in whole.render()


def test_default_recall_caps_at_20000_chars(store: BaseArtifactStore) -> None:
    text = _numbered(5000)
    ref = store.put("t", text)
    result = recall(store, "t", ref)
    assert result.max_chars == DEFAULT_MAX_CHARS
    assert len(result.content) <= 20_000
    assert result.content.endswith("\n")
    assert text.startswith(result.content)
    assert result.render().endswith(
        f'[continues: recall(ref="{ref}", lines="{result.end_line + 1}-5000")]'
    )


def test_long_single_line_continues_inside_the_line(store: BaseArtifactStore) -> None:
    text = '{"k": "' + "v" * 50 + '"}'
    ref = store.put("t", text)
    result = recall(store, "t", ref, max_chars=20)
    assert result.content == text[:20]
    assert result.next_lines == "1:21-1"
    nxt = recall(store, "t", ref, lines=result.next_lines, max_chars=20)
    assert nxt.content == text[20:40]
    assert nxt.render().startswith(f"[recall {ref} · lines 1:21-1 of 1")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("3-5", [3, 4, 5]),
        (" 3 - 5 ", [3, 4, 5]),
        ("3..5", [3, 4, 5]),
        ("3–5", [3, 4, 5]),
        ("8-", [8, 9, 10]),
        ("-2", [1, 2]),
        ("4", [4]),
        (4, [4]),
        ((2, 3), [2, 3]),
        ("0-2", [1, 2]),
        ("9-99", [9, 10]),
        ("", list(range(1, 11))),
        ("all", list(range(1, 11))),
        (None, list(range(1, 11))),
    ],
)
def test_line_spec_forms(store: BaseArtifactStore, spec: object, expected: list[int]) -> None:
    text = "".join(f"{i}\n" for i in range(1, 11))
    ref = store.put("t", text)
    result = recall(store, "t", ref, lines=spec)
    assert result.error is None
    assert [int(x) for x in result.content.split()] == expected


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("abc", "Could not read the line range"),
        ("5-3", "ends before it starts"),
        ("50", "past the end"),
        ("1-2-3", "Could not read"),
        (True, "Could not read"),
        (3.5, "Could not read"),
    ],
)
def test_malformed_ranges_explain_instead_of_raising(
    store: BaseArtifactStore, spec: object, needle: str
) -> None:
    ref = store.put("t", "a\nb\nc\n")
    result = recall(store, "t", ref, lines=spec)
    assert result.found and result.content == "" and result.error is not None
    rendered = result.render()
    assert needle in rendered
    assert rendered.startswith(f"[recall {ref} · 3 lines · 6 chars]")


def test_grep_numbers_lines_and_counts(store: BaseArtifactStore) -> None:
    text = "ok\nERROR one\nok\r\nerror two\nERROR three"
    ref = store.put("t", text)
    result = recall(store, "t", ref, grep="ERROR")
    assert result.content == "2: ERROR one\n5: ERROR three\n"
    assert result.matches == 2 and not result.truncated
    assert result.render().splitlines()[0] == (
        f'[recall {ref} · grep "ERROR" · 2 matching lines in lines 1-5 of 5 · {len(text)} chars]'
    )
    insensitive = recall(store, "t", ref, grep="(?i)error", lines="3-")
    assert insensitive.content == "4: error two\n5: ERROR three\n"
    none = recall(store, "t", ref, grep="nothing")
    assert none.matches == 0 and "No lines match." in none.render()


def test_invalid_regex_falls_back_to_literal(store: BaseArtifactStore) -> None:
    ref = store.put("t", "call f(x\nother\n")
    result = recall(store, "t", ref, grep="f(x")
    assert result.content == "1: call f(x\n"
    assert "not a valid regular expression" in result.render()


def test_grep_truncates_and_continues(store: BaseArtifactStore) -> None:
    text = _numbered(100)
    ref = store.put("t", text)
    result = recall(store, "t", ref, grep="line 00[0-9][05]", max_chars=100)
    assert result.truncated and result.matches == 19  # 0005, 0010, ..., 0095
    assert result.shown_matches == 100 // len("5: line 0005 of the build log\n")
    assert result.render().endswith(
        f'[continues: recall(ref="{ref}", lines="{result.end_line + 1}-100", '
        f'grep="line 00[0-9][05]", max_chars=100)]'
    )


def test_grep_cuts_a_single_huge_line(store: BaseArtifactStore) -> None:
    ref = store.put("t", "x" * 500 + "\nshort x\n")
    result = recall(store, "t", ref, grep="x", max_chars=50)
    assert result.content.startswith("1: xxx") and len(result.content) <= 51
    assert result.shown_matches == 1 and result.next_lines == "2-2"
    assert 'lines="1") returns all of it' in result.render()


def test_max_chars_is_lenient(store: BaseArtifactStore) -> None:
    ref = store.put("t", _numbered(10))
    assert recall(store, "t", ref, max_chars="60").max_chars == 60
    assert recall(store, "t", ref, max_chars=60.0).max_chars == 60
    for bad in (0, -5, "lots", True):
        result = recall(store, "t", ref, max_chars=bad)
        assert result.max_chars == DEFAULT_MAX_CHARS
        assert "max_chars must be a positive integer" in result.render()
    capped = recall(store, "t", ref, max_chars=10_000, max_chars_cap=60)
    assert capped.max_chars == 60 and capped.truncated


def test_empty_output(store: BaseArtifactStore) -> None:
    ref = store.put("t", "")
    result = recall(store, "t", ref)
    assert result.found and result.content == "" and not result.truncated
    assert result.render() == f"[recall {ref} · empty output (0 chars)]"


def test_render_replaces_surrogates_but_content_keeps_them(store: BaseArtifactStore) -> None:
    text = "bad \ud800 char\n"
    ref = store.put("t", text)
    result = recall(store, "t", ref)
    assert result.content == text
    assert "bad \ufffd char" in result.render()
    result.render().encode("utf-8")


def test_binary_artifacts(store: BaseArtifactStore) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    ref = store.put("t", png)
    result = recall(store, "t", ref)
    rendered = result.render()
    assert rendered.startswith(f"[recall {ref} · binary 1,032 bytes · image/png · sha256 ")
    assert "cannot be shown as text" in rendered
    assert result.content.encode("utf-8", "surrogateescape") == png

    mostly_text = b"build ok\nwarning: caf\xe9 latin-1\n"
    ref2 = store.put("t", mostly_text)
    result2 = recall(store, "t", ref2)
    assert result2.content.encode("utf-8", "surrogateescape") == mostly_text
    assert "warning: caf\ufffd latin-1" in result2.render()
    assert "invalid bytes replaced" in result2.render()


# --- not found ---------------------------------------------------------------------------------


def test_unknown_ref_lists_recent_refs(store: BaseArtifactStore) -> None:
    refs = [store.put("t", f"output {i}", meta={"tool": f"tool{i}"}) for i in range(7)]
    result = recall(store, "t", "0123456789ab")
    assert not result.found
    rendered = result.render()
    assert '"0123456789ab" was not found in this conversation' in rendered
    assert "12 hex characters" in rendered
    for i in range(2, 7):
        assert f"- {refs[i]} (tool{i})" in rendered
    assert refs[0] not in rendered and refs[1] not in rendered
    assert rendered.index(refs[6]) < rendered.index(refs[2])  # newest first


@pytest.mark.parametrize("bad", ["", "xyz", "recall me", None, 42, "0123456789abc"])
def test_malformed_ref_is_explained(store: BaseArtifactStore, bad: object) -> None:
    result = recall(store, "t", bad)
    assert not result.found
    rendered = result.render()
    assert "is not a valid ref" in rendered and "12 hex characters" in rendered
    assert "No tool outputs have been archived in this conversation." in rendered


def test_foreign_ref_is_not_found(store: BaseArtifactStore) -> None:
    ref = store.put("thread-a", "secret", meta={"tool": "bash"})
    mine = store.put("thread-b", "mine", meta={"tool": "grep"})
    result = recall(store, "thread-b", ref)
    assert not result.found and result.content == ""
    rendered = result.render()
    assert "not found in this conversation" in rendered
    assert "secret" not in rendered
    assert f"- {mine} (grep)" in rendered
    artifact = store.get("thread-a", ref)
    assert artifact is not None and artifact.access_count == 0


def test_ref_is_normalized(store: BaseArtifactStore) -> None:
    ref = store.put("t", "x")
    result = recall(store, "t", f' "{ref.upper()}" ')
    assert result.found and result.ref == ref


def test_bad_thread_is_caller_misuse(store: BaseArtifactStore) -> None:
    with pytest.raises(ValueError, match="thread"):
        recall(store, "", "0123456789ab")


# --- access counting ---------------------------------------------------------------------------


def test_access_is_recorded_and_reported(store: BaseArtifactStore) -> None:
    ref = store.put("t", "payload", meta={"tool": "bash", "source": "bash:ls"})
    seen: list[Artifact] = []
    recall(store, "t", ref, on_access=seen.append)
    recall(store, "t", ref, lines="1", on_access=seen.append)
    recall(store, "t", "0" * 12, on_access=seen.append)
    recall(store, "u", ref, on_access=seen.append)
    assert [a.meta["source"] for a in seen] == ["bash:ls", "bash:ls"]
    artifact = store.get("t", ref)
    assert artifact is not None and artifact.access_count == 2


def test_failing_callback_does_not_break_recall(store: BaseArtifactStore) -> None:
    ref = store.put("t", "payload")

    def boom(_: Artifact) -> None:
        raise RuntimeError("callback bug")

    result = recall(store, "t", ref, on_access=boom)
    assert result.found and result.content == "payload"


class BrokenStore(InMemoryArtifactStore):
    def get(self, thread: str, ref: str) -> Artifact | None:
        raise OSError("disk on fire")

    def list(self, thread: str) -> builtins.list[ArtifactInfo]:
        raise OSError("disk on fire")


def test_store_failure_becomes_a_message() -> None:
    result = recall(BrokenStore(), "t", "0123456789ab")
    assert not result.found
    assert "could not be read" in result.render()
    assert "not found" not in result.render()
    assert not recall(BrokenStore(), "t", "nope").found


# --- async -------------------------------------------------------------------------------------


def test_arecall_matches_recall(store: BaseArtifactStore) -> None:
    text = _numbered(300)
    ref = store.put("t", text)
    seen: list[str] = []

    async def on_access(artifact: Artifact) -> None:
        await asyncio.sleep(0)
        seen.append(artifact.ref)

    async def scenario() -> tuple[RecallResult, RecallResult, RecallResult]:
        return (
            await arecall(store, "t", ref, lines="10-20", on_access=on_access),
            await arecall(store, "t", ref, grep="00[0-9]5", max_chars=100),
            await arecall(store, "other", ref),
        )

    ranged, grepped, missing = asyncio.run(scenario())
    assert ranged == recall(store, "t", ref, lines="10-20")
    assert grepped == recall(store, "t", ref, grep="00[0-9]5", max_chars=100)
    assert not missing.found
    assert seen == [ref]


def test_arecall_large_artifact(store: BaseArtifactStore) -> None:
    text = "y" * 2_000_000
    ref = store.put("t", text)
    result = asyncio.run(arecall(store, "t", ref, max_chars=len(text)))
    assert result.content == text


# --- the tool schema ---------------------------------------------------------------------------


def test_tool_schema_shape_and_stability() -> None:
    function = RECALL_TOOL_SCHEMA["function"]
    assert RECALL_TOOL_SCHEMA["type"] == "function"
    assert function["name"] == RECALL_TOOL_NAME == "recall"
    params = function["parameters"]
    assert params["required"] == ["ref"]
    assert set(params["properties"]) == {"ref", "lines", "grep", "max_chars"}
    assert params["properties"]["max_chars"]["type"] == "integer"
    assert "shortened" in function["description"]
    # Sent with every request: kept small (the outputs name their own recall calls).
    assert get_counter("o200k_base").count(canonical_json(RECALL_TOOL_SCHEMA)) <= 100
    dumped = json.dumps(RECALL_TOOL_SCHEMA, sort_keys=True)
    assert json.loads(dumped) == RECALL_TOOL_SCHEMA
    # nothing volatile in the cached prefix (no hex ids, dates, paths)
    assert not re.search(r"[0-9a-f]{8,}|\d{4}-\d{2}-\d{2}|/tmp|/home", dumped)

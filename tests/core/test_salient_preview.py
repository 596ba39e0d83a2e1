"""The size gate's salient preview: what it keeps, how it numbers, what it costs."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot
from cachepilot.artifacts.memory import InMemoryArtifactStore
from cachepilot.recall.tool import recall
from cachepilot.reduce import (
    REDUCED_STUB_RE,
    STUB_OVERHEAD,
    ReduceConfig,
    ToolProfile,
    default_pipeline,
    normalize_output,
)
from cachepilot.reduce.decoded import decoded_text
from cachepilot.reduce.passes.size import head_tail_preview
from cachepilot.reduce.preview import DECODED_NOTE, salient_preview
from cachepilot.reduce.salience import LineScorer, call_terms, clean_line
from cachepilot.refs import make_ref

MARKER = re.compile(
    r"^\[… (?P<count>[\d,]+) (?:overwritten )?lines? (?:omitted )?\((?:lines? )?"
    r"(?P<first>\d+)(?:-(?P<last>\d+))?\)(?:; recall\(ref=\"(?P<ref>[0-9a-f]{12})\", "
    r"lines=\"(?P<span>[\d-]+)\"\))? …\]$"
)


def build_log(lines: int = 3_000, error_at: float = 0.5) -> tuple[str, str]:
    """A varied build log with one error line; returns (log, error line)."""
    words = ("net", "core", "orders", "billing", "parser", "cache", "auth", "io", "vault")
    out = []
    for i in range(lines):
        a, b, c = words[i % 9], words[(i * 7) % 9], words[(i * 5 + 3) % 9]
        out.append(f"cc -O2 -Wall -c src/{a}/{b}_{c}.c -o obj/{a}/{b}_{c}.o  # unit {i}")
    error = "src/net/socket_pool.c:412:17: error: 'sock_fd' undeclared (first use)"
    out.insert(int(lines * error_at), error)
    out.append("make: *** [Makefile:41: all] Error 2")
    return "\n".join(out) + "\n", error


def check_numbering(view: str, original: str) -> int:
    """Every line of `original` is either shown at its place or named by a marker; returns
    the number of lines the view shows."""
    lines = [clean_line(line) for line in original.splitlines()]
    expected = 1
    shown = 0
    for row in view.split("\n"):
        if row.startswith(("[output reduced ", "[values in the omitted lines: ")):
            continue
        if row == DECODED_NOTE:
            continue
        marker = MARKER.match(row)
        if marker is not None:
            first = int(marker["first"])
            last = int(marker["last"] or first)
            assert first == expected, (row, expected)
            assert int(marker["count"].replace(",", "")) == last - first + 1
            if marker["span"] is not None:
                assert marker["span"] == (f"{first}" if first == last else f"{first}-{last}")
            expected = last + 1
            continue
        target = lines[expected - 1]
        if row.endswith("…") and row != target:
            assert target.startswith(row[:-1]), (row, target)
        elif row.startswith("…") and row != target:
            assert target.endswith(row[1:]), (row, target)
        else:
            assert row == target, (row, target, expected)
        expected += 1
        shown += 1
    assert expected == len(lines) + 1
    return shown


def test_error_in_the_middle_stays_in_view_and_recall_fetches_each_gap() -> None:
    log, error = build_log()
    reduction = default_pipeline().run(
        "bash", {"command": "make -C src all"}, "c1", normalize_output(log)
    )
    assert "size_gate" in (reduction.reason or "")
    assert error in reduction.text
    assert "make: *** [Makefile:41: all] Error 2" in reduction.text
    config = ReduceConfig()
    assert len(reduction.text) <= (
        config.head_chars + config.tail_chars + config.salient_chars + 2 * STUB_OVERHEAD
    )
    check_numbering(reduction.text, log)
    store = InMemoryArtifactStore()
    ref = store.put("t", log)
    assert reduction.ref == ref
    physical = log.splitlines()
    spans = [m["span"] for m in map(MARKER.match, reduction.text.split("\n")) if m]
    assert spans
    for span in spans:
        first, _, last = span.partition("-")
        got = recall(store, "t", ref, lines=span, max_chars=1_000_000)
        assert got.content.splitlines() == physical[int(first) - 1 : int(last or first)]


def test_head_tail_preview_misses_what_the_salient_one_keeps() -> None:
    log, error = build_log(error_at=0.45)
    old = head_tail_preview(log, 1_500, 1_000, make_ref(log), original_chars=len(log))
    assert error not in old
    new = salient_preview(log, 1_500, 1_000, 1_500, make_ref(log), original_chars=len(log))
    assert error in new
    assert len(new) <= len(old) + 1_500 + STUB_OVERHEAD


def test_no_salient_budget_is_head_and_tail_only() -> None:
    log, error = build_log()
    config = ReduceConfig(profiles={"bash": ToolProfile(kind="shell", salient_chars=0)})
    reduction = default_pipeline(config).run("bash", {}, "c", normalize_output(log))
    assert error not in reduction.text
    check_numbering(reduction.text, log)
    with pytest.raises(ValueError, match="salient_chars"):
        ReduceConfig(salient_chars=-1)


def test_near_identical_errors_count_once() -> None:
    rows = [f"worker {i} processed job {i * 7} for tenant-{i % 13} in {i % 90} ms" for i in
            range(2_000)]  # fmt: skip
    for i in range(300, 1_700, 3):
        rows[i] = f"ERROR retrying upstream call {i}: connection reset (attempt {i % 5})"
    unique = "FATAL: migration 0042_orders failed: column orders.total_cents does not exist"
    rows[1_000] = unique
    text = "\n".join(rows)
    view = salient_preview(text, 1_500, 1_000, 1_500, "0123456789ab", original_chars=len(text))
    assert unique in view
    assert view.count("ERROR retrying upstream call") <= 3
    check_numbering(view, text)


def test_lines_naming_the_call_are_kept() -> None:
    rows = [f"tests/unit/test_mod_{i}.py::test_case_{i} PASSED [{i % 100:3d}%]" for i in
            range(3_000)]  # fmt: skip
    rows[1_500] = "tests/api/test_orders.py::test_refund_rounding SKIPPED (flaky upstream)"
    text = "\n".join(rows)
    terms = call_terms({"command": "pytest tests/api/test_orders.py::test_refund_rounding -v"})
    assert "test_refund_rounding" in terms and "tests/api/test_orders.py" in terms
    assert "pytest" not in terms and "-v" not in terms
    view = salient_preview(
        text, 1_500, 1_000, 1_500, None, original_chars=len(text), scorer=LineScorer(terms)
    )
    assert rows[1_500] in view
    assert "recall(" not in view  # no ref: no call the model cannot make
    check_numbering(view, text)


def test_a_term_on_every_line_singles_none_out() -> None:
    rows = [f"/repo/build/step {i}: compiled unit_{i}.o" for i in range(3_000)]
    text = "\n".join(rows)
    view = salient_preview(
        text, 1_500, 1_000, 1_500, "0123456789ab", original_chars=len(text),
        scorer=LineScorer(("/repo/build",)),
    )  # fmt: skip
    assert len(view) < 1_500 + 1_000 + 400  # nothing in the middle stood out


def test_progress_states_are_counted_not_shown() -> None:
    bar = "\r".join(f"Downloading [{'#' * k:<20}] {k * 5}%" for k in range(21))
    rows = []
    for i in range(1_500):
        rows.append(f"Collecting package-{i}")
        rows.append(bar)
    rows.insert(1_400, "ERROR: No matching distribution found for package-nope==9.9")
    text = "\n".join(rows)
    reduction = default_pipeline().run("bash", {"command": "pip install -r r.txt"}, "c",
                                       normalize_output(text))  # fmt: skip
    assert "ERROR: No matching distribution found for package-nope==9.9" in reduction.text
    assert "overwritten lines" in reduction.text
    assert "] 5%" not in reduction.text  # an overwritten state
    check_numbering(reduction.text, text)


def test_json_carrying_a_log_is_previewed_and_recalled_as_lines() -> None:
    log, error = build_log(lines=4_000)
    log = log.replace(error, "NEEDLE é → 😀 " + error + ' "quoted" \\ backslash')
    wrapped = json.dumps({"returncode": 2, "output": log})  # ASCII: every é is an escape
    assert len(wrapped) > 150_000
    reduction = default_pipeline().run("bash", {"command": "make"}, "c", normalize_output(wrapped))
    assert reduction.text.startswith(DECODED_NOTE)
    assert "NEEDLE é → 😀 " + error in reduction.text  # decoded: no escape left to split
    assert "\\u00e9" not in reduction.text and "\\n" not in reduction.text
    store = InMemoryArtifactStore()
    ref = store.put("t", wrapped)
    got = recall(store, "t", ref, grep="NEEDLE")
    assert got.matches == 1
    number, _, line = got.content.rstrip("\n").partition(": ")
    assert line.startswith("NEEDLE é → 😀 ") and '"quoted" \\ backslash' in line
    decoded = decoded_text(wrapped)
    assert decoded is not None and decoded.splitlines()[int(number) - 1] == line
    check_numbering(reduction.text, decoded)  # the preview numbers the lines recall serves
    again = recall(store, "t", ref, lines=number)
    assert again.content.rstrip("\n") == line
    whole = recall(store, "t", ref, max_chars=10_000_000)
    assert whole.content == wrapped  # a recall that fits returns the original exactly


def test_an_html_page_is_previewed_as_text_without_line_numbers() -> None:
    words = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta")
    items = "".join(
        f"<li><a href='/d/{i}'>{words[i % 9]} {words[i * 4 % 7]} {words[i * 5 % 8]}</a></li>"
        for i in range(3_000)
    )
    page = f"<html><body><h1>Docs</h1><ul>{items}</ul><p>Error: quota exceeded</p></body></html>"
    reduction = default_pipeline().run("web_fetch", {"url": "https://x.test/docs"}, "c",
                                       normalize_output(page))  # fmt: skip
    assert "<li>" not in reduction.text
    assert "lines omitted …]" in reduction.text and 'lines="' not in reduction.text
    assert REDUCED_STUB_RE.search(reduction.text) is not None


LINE = st.one_of(
    st.sampled_from([
        "", "   ", "ok", "error: boom", "Traceback (most recent call last):",
        "    at Foo.bar(Foo.java:12)", "  File \"a.py\", line 3", "ValueError: x", "42 passed",
        "\x1b[31mFAILED\x1b[0m t.py::t", "warning: unused", "é→😀", "--- FAIL: TestX (0.1s)",
    ]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="[]"), max_size=60),
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(LINE, min_size=1, max_size=300),
    seps=st.lists(st.sampled_from(["\n", "\n", "\n", "\r\n", "\r"]), min_size=1, max_size=300),
    head=st.integers(0, 400),
    tail=st.integers(0, 300),
    extra=st.integers(0, 600),
)
def test_every_line_is_shown_in_place_or_counted(
    rows: list[str], seps: list[str], head: int, tail: int, extra: int
) -> None:
    text = "".join(row + seps[i % len(seps)] for i, row in enumerate(rows))
    view = salient_preview(text, head, tail, extra, "0123456789ab", original_chars=len(text))
    shown = check_numbering(view, text)
    assert shown <= len(text.splitlines())
    stub = REDUCED_STUB_RE.search(view)
    assert stub is not None and int(stub["after"].replace(",", "")) == len(view)


def test_a_mini_swe_agent_json_observation_through_the_pilot() -> None:
    """mini-swe-agent 2.x sends `{"returncode": …, "output": …}`: the error deep inside the
    escaped log is in the view, and recall's grep and line range reach it."""
    log, error = build_log(lines=5_000, error_at=0.5)
    observation = json.dumps({"returncode": 2, "output": log, "exception_info": ""})
    assert observation.index("sock_fd") > 80_000
    pilot = CachePilot()
    view = pilot.ingest("bash", {"command": "make -C src"}, observation, "call_1", thread="t1")
    assert error in view
    match = REDUCED_STUB_RE.search(view)
    assert match is not None
    found = pilot.recall(match["ref"], grep="sock_fd", thread="t1")
    assert "1 matching lines" in found and error in found
    number = found.split("\n")[-1].split(":", 1)[0]
    again = pilot.recall(match["ref"], lines=number, thread="t1")
    assert again.rstrip().endswith(error)

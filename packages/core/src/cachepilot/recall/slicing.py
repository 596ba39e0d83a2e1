"""Slicing an archived original for recall: exact substrings of the text (a line range,
or the grep's matching lines), capped by `max_chars`, with the hint that continues.

An original that is JSON carrying text (`cachepilot.reduce.decoded`) is sliced and grepped on its
decoded text, the lines the size gate's preview numbered: a line range, a grep, or a recall
too long for one answer read those lines (the header says so); a recall of the whole original
that fits in `max_chars` returns it exactly as archived."""

from __future__ import annotations

import bisect
import re
from dataclasses import replace

from cachepilot.artifacts.base import Artifact
from cachepilot.recall.args import LineRange, char_budget, line_starts, parse_range
from cachepilot.recall.grep import MAX_GREP_CHARS, Matcher, compile_pattern, grep_lines
from cachepilot.recall.result import RecallResult, join_notes
from cachepilot.reduce.decoded import decoded_text

__all__ = [
    "slice_artifact",
]


_TEXT_SAMPLE_CHARS = 1 << 20

_NOT_TEXT_RATIO = 0.05

_NON_TEXT = re.compile("[\x00-\x08\x0e-\x1a\x7f\udc80-\udcff]")  # ESC is fine: ANSI logs

DECODED_NOTE = (
    "This output is JSON carrying text: lines are those of its decoded string values "
    "(as its preview numbered them)."
)


def slice_artifact(
    artifact: Artifact,
    lines: object,
    grep: object,
    max_chars: object,
    max_chars_cap: int | None,
) -> RecallResult:
    text = artifact.text
    budget, budget_note = char_budget(max_chars, max_chars_cap)
    if artifact.is_text and (
        (lines is not None and lines != "")
        or (grep is not None and grep != "")
        or len(text) > budget
    ):
        decoded = decoded_text(text)
        if decoded is not None:
            text = decoded
            budget_note = join_notes(DECODED_NOTE, budget_note)
    starts = line_starts(text)
    total_lines = len(starts) - 1
    base = RecallResult(
        ref=artifact.ref,
        found=True,
        total_lines=total_lines,
        total_chars=len(text),
        max_chars=budget,
        is_text=artifact.is_text,
        media_type=artifact.media_type,
        size=artifact.size,
        sha256=artifact.sha256,
        tool=artifact.tool,
        message=budget_note,
        printable=artifact.is_text or _looks_like_text(text),
    )
    rng = parse_range(lines, starts)
    if isinstance(rng, str):
        return replace(base, error=rng)
    matcher: Matcher | None = None
    pattern_text: str | None = None
    if grep is not None and grep != "":
        pattern_text = grep if isinstance(grep, str) else str(grep)
        if len(pattern_text) > MAX_GREP_CHARS:
            return replace(
                base,
                error=(
                    f"The grep pattern has {len(pattern_text):,} characters; at most "
                    f"{MAX_GREP_CHARS} are accepted. Use a shorter pattern, or lines=... ."
                ),
            )
        matcher = compile_pattern(pattern_text)
        if matcher.note is not None:
            base = replace(base, message=join_notes(base.message, matcher.note))
    if total_lines == 0:
        return replace(base, grep=pattern_text, matches=0 if matcher is not None else None)
    if matcher is not None and pattern_text is not None:
        return grep_lines(base, text, starts, rng, matcher, pattern_text, budget)
    return _lines(base, text, starts, rng, budget)


def _lines(
    base: RecallResult, text: str, starts: list[int], rng: LineRange, budget: int
) -> RecallResult:
    begin = starts[rng.start - 1] + rng.col - 1
    stop = starts[rng.end]
    if stop - begin <= budget:
        return replace(
            base,
            content=text[begin:stop],
            start_line=rng.start,
            start_col=rng.col,
            end_line=rng.end,
        )
    limit = begin + budget
    k = bisect.bisect_right(starts, limit) - 1  # the last line boundary within the budget
    if k >= rng.start and starts[k] > begin:
        cut, next_start, next_col, last = starts[k], k + 1, 1, k
    else:  # the first line alone exceeds the budget: cut inside it
        cut, next_start, last = limit, rng.start, rng.start
        next_col = cut - starts[rng.start - 1] + 1
    nxt = f"{next_start}-{rng.end}" if next_col == 1 else f"{next_start}:{next_col}-{rng.end}"
    return replace(
        base,
        content=text[begin:cut],
        start_line=rng.start,
        start_col=rng.col,
        end_line=last,
        truncated=True,
        next_lines=nxt,
    )


def _looks_like_text(text: str) -> bool:
    sample = text[:_TEXT_SAMPLE_CHARS]
    if not sample:
        return True
    return len(_NON_TEXT.findall(sample)) <= _NOT_TEXT_RATIO * len(sample)

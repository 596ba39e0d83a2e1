"""Line-structure passes: line-number prefixes, repeated lines, near-identical runs."""

from __future__ import annotations

import re

from cachepilot.reduce.passes.base import PassContext, ReductionPass
from cachepilot.reduce.stubs import line_numbers_marker, repeat_marker, similar_marker

__all__ = ["LineNumbersPass", "RepeatsPass", "SimilarLinesPass"]

_NUMBERED = re.compile(r" *(\d{1,9})(\t|→|:)")
_MAX_EDGE_LINES = 2
_MIN_NUMBERED = 3
_MAX_PERIOD = 8
_DIGITS = re.compile(r"\d+")
_LETTERS = re.compile(r"[A-Za-z]")
_MIN_SIMILAR_LETTERS = 3
_MAX_SIMILAR_LINE = 2_000


def _split(text: str) -> tuple[list[str], bool]:
    lines = text.split("\n")
    trailing = len(lines) > 1 and lines[-1] == ""
    if trailing:
        lines.pop()
    return lines, trailing


def _join(lines: list[str], trailing: bool) -> str:
    return "\n".join(lines) + ("\n" if trailing else "")


class LineNumbersPass(ReductionPass):
    """Strip `cat -n` style prefixes (`     12\\t`, `    12→`, `12:`) when every line has one.

    Fires only when the numbers are consecutive and use one separator, on every line except
    at most two header and two footer lines (e.g. `[File: x.py (300 lines total)]`). A marker
    states the line range, so no information is lost.
    """

    name = "line_numbers"
    lossless = True

    def apply(self, text: str, ctx: PassContext) -> str | None:
        lines, trailing = _split(text)
        start = 0
        while start < len(lines) and start <= _MAX_EDGE_LINES and not _NUMBERED.match(lines[start]):
            start += 1
        if start >= len(lines) or start > _MAX_EDGE_LINES:
            return None
        first = _NUMBERED.match(lines[start])
        if first is None:
            return None
        number = int(first.group(1))
        separator = first.group(2)
        body: list[str] = []
        index = start
        while index < len(lines):
            match = _NUMBERED.match(lines[index])
            if match is None or match.group(2) != separator or int(match.group(1)) != number:
                break
            body.append(lines[index][match.end() :])
            number += 1
            index += 1
        footer = lines[index:]
        if len(body) < _MIN_NUMBERED or len(footer) > _MAX_EDGE_LINES:
            return None
        if any(_NUMBERED.match(line) for line in footer):
            return None
        last = number - 1
        out = [*lines[:start], line_numbers_marker(last - len(body) + 1, last), *body, *footer]
        result = _join(out, trailing)
        return result if len(result) < len(text) else None


class RepeatsPass(ReductionPass):
    """Fold runs of identical consecutive lines (or blocks of up to 8 lines) with an exact count.

    The line (block) is kept once, followed by `[… line repeated 56 more times]`.
    """

    name = "repeats"
    lossless = True

    def apply(self, text: str, ctx: PassContext) -> str | None:
        minimum = ctx.config.min_repeat
        lines, trailing = _split(text)
        out: list[str] = []
        changed = False
        index = 0
        count = len(lines)
        while index < count:
            best_period, best_reps, best_saving = 0, 0, 0
            for period in range(1, _MAX_PERIOD + 1):
                if index + period * minimum > count:
                    break
                block = lines[index : index + period]
                if period > 1 and all(line == block[0] for line in block):
                    continue  # a run of one line: period 1 folds it better
                reps = 1
                while lines[index + reps * period : index + (reps + 1) * period] == block:
                    reps += 1
                if reps < minimum:
                    continue
                block_chars = sum(len(line) + 1 for line in block)
                saving = (reps - 1) * block_chars - len(repeat_marker(reps - 1, period)) - 1
                if saving > best_saving:
                    best_period, best_reps, best_saving = period, reps, saving
            if best_period:
                out.extend(lines[index : index + best_period])
                out.append(repeat_marker(best_reps - 1, best_period))
                index += best_period * best_reps
                changed = True
            else:
                out.append(lines[index])
                index += 1
        return _join(out, trailing) if changed else None


def _shape(line: str) -> str | None:
    if len(line) > _MAX_SIMILAR_LINE or not line.strip():
        return None
    masked = _DIGITS.sub("#", line)
    if len(_LETTERS.findall(masked)) < _MIN_SIMILAR_LETTERS:
        return None
    return masked


class SimilarLinesPass(ReductionPass):
    """Fold runs of near-identical lines (equal once digit runs are masked).

    Keeps the first and last line of a run of at least `min_similar` lines (progress lines,
    per-item logs). Lossy (the middle lines' numbers are dropped: `FAILED test_1 … test_29`
    would lose which tests failed), so it only fires on output over the tool's size limit,
    where it is a content-aware alternative to the size gate's blind head/tail cut.
    """

    name = "similar_lines"
    lossless = False

    def apply(self, text: str, ctx: PassContext) -> str | None:
        if len(text) <= ctx.profile.limit or ctx.first_read:
            return None
        minimum = ctx.config.min_similar
        lines, trailing = _split(text)
        if len(lines) < minimum:
            return None
        shapes = [_shape(line) for line in lines]
        out: list[str] = []
        changed = False
        index = 0
        while index < len(lines):
            shape = shapes[index]
            end = index + 1
            if shape is not None:
                while end < len(lines) and shapes[end] == shape:
                    end += 1
            run = end - index
            if run >= minimum:
                out.extend((lines[index], similar_marker(run - 2), lines[end - 1]))
                changed = True
            else:
                out.extend(lines[index:end])
            index = end
        if not changed:
            return None
        result = _join(out, trailing)
        return result if len(result) < len(text) else None

"""Recall's bounded grep: the model's pattern compiled with the `regex` engine (a literal
search when it is invalid or repeats too much), matched line by line under a total time
budget with the interpreter lock released."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any, Final

import regex

from cachepilot.recall.args import LineRange, strip_eol
from cachepilot.recall.result import ECHO_CHARS, RecallResult, clip_echo, join_notes, quote

__all__ = [
    "GREP_TIME_LIMIT",
    "MAX_GREP_CHARS",
    "Matcher",
    "compile_pattern",
    "grep_lines",
    "matching_lines",
]


MAX_GREP_CHARS: Final = 500
"""Longest grep pattern accepted (a longer one is refused with a message)."""


GREP_TIME_LIMIT: Final = 1.0
"""Seconds of regular-expression matching one recall may spend; then the pattern is searched
for as literal text instead (linear time)."""


LONG_LINE_CHARS: Final = 2_000
"""A matching line longer than this is shown around its first match, not from its start."""

_WINDOW_BEFORE = 400
_WINDOW_AFTER = 800

_MAX_EXPANSION = 10_000  # `regex` unrolls counted repeats when compiling: a{4294967294} is GBs

_REPEAT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")


@dataclass(frozen=True, slots=True)
class Matcher:
    """A compiled grep: a regex (with a time budget) or, when `pattern` is None, a literal."""

    pattern: Any
    literal: str
    note: str | None = None


def compile_pattern(pattern: str) -> Matcher:
    if _expanded_size(pattern) > _MAX_EXPANSION:
        note = (
            f"grep {quote(clip_echo(pattern))} repeats too much to run as a regular expression "
            f"(over {_MAX_EXPANSION:,} repeated items); searched for it as literal text."
        )
        return Matcher(None, pattern, note)
    try:
        return Matcher(regex.compile(pattern, regex.VERSION0), pattern)
    except (regex.error, re.error, RecursionError, OverflowError, ValueError, MemoryError) as exc:
        reason = str(exc)[:ECHO_CHARS]
        note = f"grep {quote(clip_echo(pattern))} is not a valid regular expression ({reason}); "
        return Matcher(None, pattern, note + "searched for it as literal text.")


def _expanded_size(pattern: str) -> int:
    """An upper bound of the items a pattern unrolls to (counted repeats multiplied through
    nested groups), saturated just above `_MAX_EXPANSION`. Linear in the pattern."""
    cap = _MAX_EXPANSION + 1
    stack: list[list[int]] = [[0, 0]]  # per open group: [size so far, size of the last item]
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        item = 1
        if char == "\\":
            i += 2
            if i < n and pattern[i] == "{" and pattern[i - 1] in "pPNxuUgk":
                close = pattern.find("}", i)
                i = n if close < 0 else close + 1  # \p{L}, \x{41}, \g{name}: one item
        elif char == "[":
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
        elif char == "(":
            stack.append([0, 0])
            i += 1
            continue
        elif char == ")":
            i += 1
            if len(stack) == 1:
                continue
            item = max(stack.pop()[0], 1)
        elif char == "|":
            stack[-1][1] = 0
            i += 1
            continue
        elif char == "{" and (repeat := _REPEAT.match(pattern, i)) and repeat.group(0) != "{}":
            low, comma, high = repeat.groups()
            count = _count(high if comma and high else low, cap)
            top = stack[-1]
            top[0] = min(top[0] + top[1] * (max(count, 1) - 1), cap)
            top[1] = min(top[1] * max(count, 1), cap)
            i = repeat.end()
            continue
        else:
            i += 1
        top = stack[-1]
        top[0] = min(top[0] + item, cap)
        top[1] = item
    return max(group[0] for group in stack)


def _count(digits: str, cap: int) -> int:
    """A repeat count, saturated at `cap` (no int() of thousands of digits)."""
    digits = digits.lstrip("0")
    return cap if len(digits) > len(str(cap)) else min(int(digits or 0), cap)


def matching_lines(
    text: str, starts: list[int], rng: LineRange, matcher: Matcher
) -> list[tuple[int, str, int]] | None:
    """(number, line, offset of the first match) of the lines of `rng` that match; None when
    the regex ran out of time."""
    hits: list[tuple[int, str, int]] = []
    compiled = matcher.pattern
    literal = matcher.literal
    deadline = time.monotonic() + GREP_TIME_LIMIT
    for number in range(rng.start, rng.end + 1):
        begin = starts[number - 1] + (rng.col - 1 if number == rng.start else 0)
        line = strip_eol(text[begin : starts[number]])
        if compiled is None:
            at = line.find(literal)
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                # `concurrent`: the interpreter lock is released while matching.
                match = compiled.search(line, timeout=left, concurrent=True)
            except TimeoutError:
                return None
            at = -1 if match is None else match.start()
        if at >= 0:
            hits.append((number, line, at))
    return hits


def _around(line: str, at: int) -> tuple[str, bool]:
    """A long line cut to a window around offset `at` (and whether it was cut)."""
    if len(line) <= LONG_LINE_CHARS:
        return line, False
    begin = max(at - _WINDOW_BEFORE, 0)
    end = min(at + _WINDOW_AFTER, len(line))
    head = f"[chars {begin + 1:,}-{end:,} of {len(line):,}] " + ("…" if begin else "")
    return head + line[begin:end] + ("…" if end < len(line) else ""), True


def grep_lines(  # noqa: PLR0917 - private helper, called in one place
    base: RecallResult,
    text: str,
    starts: list[int],
    rng: LineRange,
    matcher: Matcher,
    pattern_text: str,
    budget: int,
) -> RecallResult:
    hits = matching_lines(text, starts, rng, matcher)
    if hits is None:  # the regex ran out of time: search for the pattern as literal text
        matcher = Matcher(
            None,
            pattern_text,
            f"grep {quote(clip_echo(pattern_text))} took longer than {GREP_TIME_LIMIT:g} s as a "
            "regular expression; searched for it as literal text.",
        )
        base = replace(base, message=join_notes(base.message, matcher.note))
        hits = matching_lines(text, starts, rng, matcher)
        assert hits is not None  # a literal search has no time limit to run out of
    entries: list[str] = []
    used = 0
    note: str | None = None
    windowed: int | None = None
    for number, whole, at in hits:
        line, cut = _around(whole, at)
        if cut and windowed is None:
            windowed = number
        entry = f"{number}: {line}\n"
        if used + len(entry) > budget:
            if not entries:  # a single huge matching line: show its start (number kept whole)
                prefix = f"{number}: "
                entries.append(prefix + line[: max(budget - len(prefix) - 1, 0)] + "\n")
                note = (
                    f"Line {number} is longer than max_chars and was cut; "
                    f'recall(ref="{base.ref}", lines="{number}") returns all of it.'
                )
            break
        entries.append(entry)
        used += len(entry)
    shown = len(entries)
    if windowed is not None and note is None:
        note = (
            f"Lines over {LONG_LINE_CHARS:,} characters are shown around their first match; "
            f'recall(ref="{base.ref}", lines="{windowed}") returns line {windowed} whole.'
        )
    truncated = shown < len(hits)
    last = hits[shown - 1][0] if truncated else rng.end
    return replace(
        base,
        content="".join(entries),
        start_line=rng.start,
        start_col=rng.col,
        end_line=last,
        truncated=truncated,
        next_lines=f"{last + 1}-{rng.end}" if truncated else None,
        grep=pattern_text,
        matches=len(hits),
        shown_matches=shown,
        range_end=rng.end,
        message=join_notes(base.message, note),
    )

"""The recall tool's line range and `max_chars` as the model wrote them: parsed, clamped to
the text, bounded (a malformed value becomes a message, never an exception)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cachepilot.recall.result import DEFAULT_MAX_CHARS, clip_echo, quote

__all__ = [
    "LineRange",
    "char_budget",
    "line_starts",
    "parse_range",
    "strip_eol",
]


_SPEC = re.compile(
    r"^\s*(?:(?P<start>\d+)\s*(?::\s*(?P<col>\d+))?)?\s*"
    r"(?:(?P<sep>-|–|—|\.\.)\s*(?P<end>\d+)?)?\s*$"
)


_MAX_SPEC_CHARS = 64  # a longer line range is not a range (and int() of it is not cheap)


@dataclass(frozen=True, slots=True)
class LineRange:
    start: int
    col: int
    end: int


def line_starts(text: str) -> list[int]:
    """Offsets where each line starts, plus `len(text)` (``str.splitlines`` line breaks)."""
    starts = [0]
    position = 0
    for line in text.splitlines(keepends=True):
        position += len(line)
        starts.append(position)
    return starts


def strip_eol(line: str) -> str:
    parts = line.splitlines()
    return parts[0] if parts else ""


def parse_range(lines: object, starts: list[int]) -> LineRange | str:
    """The requested range clamped to the text, or a message explaining what is wrong."""
    total = len(starts) - 1
    spec: str
    if lines is None:
        spec = ""
    elif isinstance(lines, bool):
        return _range_help(repr(lines), total)
    elif isinstance(lines, int):
        spec = str(lines)
    elif isinstance(lines, str):
        spec = lines
    elif (
        isinstance(lines, Sequence)
        and len(lines) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in lines)
    ):
        spec = f"{lines[0]}-{lines[1]}"
    else:
        return _range_help(repr(lines), total)
    if spec.strip().lower() in ("", "all", "*"):
        return LineRange(1, 1, total)
    if len(spec) > _MAX_SPEC_CHARS:
        return _range_help(spec, total)
    match = _SPEC.fullmatch(spec)
    if match is None:
        return _range_help(spec, total)
    start = int(match["start"]) if match["start"] else 1
    col = int(match["col"]) if match["col"] else 1
    end = start if match["sep"] is None else int(match["end"]) if match["end"] else total
    start, col = max(start, 1), max(col, 1)
    if end < start:
        return (
            f"The line range {quote(spec)} ends before it starts; "
            f'use "first-last", e.g. "{start}-{start + 49}".'
        )
    if start > total:
        return (
            f"Line {start} is past the end: the output has {total:,} lines. "
            f'Try lines="{max(total - 49, 1)}-{total}".'
            if total
            else "The output has no lines."
        )
    end = min(end, total)
    # A start character past the end of its line moves to the next line.
    if starts[start - 1] + col - 1 >= starts[start]:
        if start == end:
            return LineRange(start, starts[start] - starts[start - 1] + 1, end)
        start, col = start + 1, 1
    return LineRange(start, col, end)


def _range_help(spec: str, total: int) -> str:
    return (
        f"Could not read the line range {quote(clip_echo(spec))}. Use 1-based inclusive lines: "
        f'"120-180", "120-" (to the end), "-50" (lines 1-50) or "42". '
        f"The output has {total:,} lines."
    )


def char_budget(max_chars: object, cap: int | None) -> tuple[int, str | None]:
    value: int | None = None
    if max_chars is None:
        value = DEFAULT_MAX_CHARS
    elif isinstance(max_chars, bool):
        value = None
    elif isinstance(max_chars, int):
        value = max_chars
    elif isinstance(max_chars, float) and max_chars.is_integer():
        value = int(max_chars)
    elif (
        isinstance(max_chars, str)
        and max_chars.strip().isdigit()
        and len(max_chars.strip()) <= _MAX_SPEC_CHARS
    ):
        value = int(max_chars.strip())
    note = None
    if value is None or value < 1:
        value = DEFAULT_MAX_CHARS
        note = f"max_chars must be a positive integer; used {DEFAULT_MAX_CHARS}."
    if cap is not None and value > cap:
        value = max(cap, 1)
        note = f"max_chars is capped at {value:,} here."
    return value, note

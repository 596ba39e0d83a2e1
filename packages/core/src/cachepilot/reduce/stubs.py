"""Every text the pipeline writes into a transcript: stubs, markers and notes.

Stubs are deterministic (no time, randomness or machine paths), short (each fits in
`STUB_OVERHEAD`), and name the ref plus the `recall(ref="…")` call that returns the original.
When the model is offered no recall tool, the stubs get `ref=None` and say what was elided
instead (sizes, call ids and previews stay): a model never reads a call it cannot make.
The size-gate stub is a contract other modules parse (`REDUCED_STUB_RE`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "NO_OUTPUT",
    "REDUCED_STUB_RE",
    "binary_stub",
    "blank_stub",
    "clean_label",
    "compressed_note",
    "duplicate_stub",
    "image_stub",
    "invalid_utf8_note",
    "line_numbers_marker",
    "loop_note",
    "loop_stub",
    "omitted_lines_marker",
    "omitted_stretch_marker",
    "omitted_values_note",
    "pointed_call",
    "pointer",
    "recall_call",
    "reduced_stub",
    "repeat_marker",
    "similar_marker",
    "unarchived_stub",
    "unchanged_read_stub",
]

NO_OUTPUT = "[no output]"
"""What the model sees for an empty result (nothing is archived: there is nothing to lose)."""

REDUCED_STUB_RE = re.compile(
    r"\[output reduced (?P<before>[\d,]+) → (?P<after>[\d,]+) chars; "
    r'full text: recall\(ref="(?P<ref>[0-9a-f]{12})"\)\]'
)
"""Matches `reduced_stub` (the size gate and hard cap stub)."""

_LABEL_BAD = re.compile(r"[^\w.:\-/@+]", re.ASCII)
_LABEL_MAX = 40


def clean_label(value: str) -> str:
    """A call id or tool name made safe and short for a stub (ASCII word chars, ≤ 40 chars)."""
    cleaned = _LABEL_BAD.sub("_", str(value))
    if len(cleaned) > _LABEL_MAX:
        cleaned = cleaned[: _LABEL_MAX - 1] + "…"
    return cleaned or "?"


def recall_call(ref: str) -> str:
    """The recall call the model makes to get the original back."""
    return f'recall(ref="{ref}")'


def pointer(ref: str | None, what: str = "full text") -> str:
    """Where the original went: `full text: recall(ref="…")`, or `full text elided` when no
    recall tool is offered (`ref` None)."""
    return f"{what}: {recall_call(ref)}" if ref is not None else f"{what} elided"


def reduced_stub(before: int, after: int, ref: str | None) -> str:
    """`[output reduced 48,213 → 1,020 chars; full text: recall(ref="9f2c41d07a1b")]`."""
    return f"[output reduced {before:,} → {after:,} chars; {pointer(ref)}]"


def unarchived_stub(before: int, after: int) -> str:
    """The size gate's stub when the original could not be archived (nothing to recall)."""
    return (
        f"[output cut {before:,} → {after:,} chars; the archive is unavailable, so the omitted "
        "part was not kept]"
    )


def compressed_note(before: int, after: int, ref: str | None) -> str:
    """Line after a model-compressed output: sizes and the recall call of the original."""
    return f"[output compressed by a model {before:,} → {after:,} chars; {pointer(ref)}]"


def omitted_values_note(values: Sequence[str]) -> str:
    """`[values in the omitted lines: hook_event_name, .claude/settings.json]`: exact values
    of the part of an output a preview leaves out, named so the agent can use them without a
    recall."""
    return f"[values in the omitted lines: {', '.join(values)}]"


def omitted_lines_marker(first: int, last: int, total: int) -> str:
    """Which lines of the original a head/tail preview leaves out (1-based, inclusive)."""
    return f"[… lines {first}-{last} of {total} omitted …]"


def omitted_stretch_marker(
    count: int, first: int, last: int, ref: str | None, *, numbered: bool = True
) -> str:
    """A stretch of lines a salient preview leaves out, with the recall call that returns it:
    `[… 1,204 lines omitted (lines 31-1234); recall(ref="…", lines="31-1234") …]`.

    Without `ref` no call is named; unless `numbered`, only the count is (the lines are not
    those of the original)."""
    what = f"{count:,} line{'' if count == 1 else 's'} omitted"
    if not numbered:
        return f"[… {what} …]"
    span = f"{first}" if first == last else f"{first}-{last}"
    where = f"line {span}" if first == last else f"lines {span}"
    if ref is None:
        return f"[… {what} ({where}) …]"
    return f'[… {what} ({where}); recall(ref="{ref}", lines="{span}") …]'


_POINTED_RE = re.compile(
    r"\[(?:same output as call (?P<dup>[^\s;\]]{1,40})(?: above)?; "
    r"|file unchanged since call (?P<read>[^\s;:\]]{1,40}): "
    r"|identical call #\d{1,9} in a row, same output as call (?P<loop>[^\s;\]]{1,40}); )"
)


def pointed_call(text: str) -> str | None:
    """The call a pointer stub (`duplicate_stub`, `unchanged_read_stub`, `loop_stub`) says
    holds the same content, as the stub names it (`clean_label`); None for any other text.
    Only the head of `text` is read: a stub is the whole output."""
    found = _POINTED_RE.match(text[:200])
    if found is None:
        return None
    return found.group("dup") or found.group("read") or found.group("loop")


def duplicate_stub(call_id: str, ref: str | None) -> str:
    """Pointer to an earlier result with the same content. It says where the content is, not
    that it is in view: the earlier result may already be folded when the pointer is written
    (stubs written before said "above", which `pointed_call` still reads)."""
    return f"[same output as call {clean_label(call_id)}; {pointer(ref)}]"


def unchanged_read_stub(call_id: str, ref: str | None) -> str:
    """Pointer to the earlier read of a file whose content did not change."""
    return (
        f"[file unchanged since call {clean_label(call_id)}: same content as that read; "
        f"{pointer(ref)}]"
    )


def loop_stub(run: int, call_id: str, ref: str | None) -> str:
    """Stub for the n-th identical call in a row returning the same output again."""
    return (
        f"[identical call #{run} in a row, same output as call {clean_label(call_id)}; "
        f"try a different approach; {pointer(ref)}]"
    )


def loop_note(run: int, tool_name: str, same_output: bool) -> str:
    """Note appended to the n-th identical call in a row."""
    outcome = "same output as before" if same_output else "the output changed"
    return f"[note: identical {clean_label(tool_name)} call #{run} in a row; {outcome}]"


def binary_stub(size: int, media_type: str, ref: str | None) -> str:
    """Stub replacing a binary payload."""
    return (
        f"[binary output not shown: {size:,} bytes, {clean_label(media_type)}; "
        f"{pointer(ref, 'full payload')}]"
    )


def image_stub(size: int, media_type: str, limit: int, ref: str | None) -> str:
    """Stub replacing an image over the size limit that could not be downsampled."""
    return (
        f"[image not shown: {clean_label(media_type)}, {size:,} bytes (limit {limit:,}); "
        f"{pointer(ref, 'full image')}]"
    )


def invalid_utf8_note(ref: str | None) -> str:
    """Note appended to output that was not valid UTF-8."""
    return f"[note: output was not valid UTF-8 (shown with �); {pointer(ref, 'original bytes')}]"


def blank_stub(ref: str | None) -> str:
    """What the model sees when the output was whitespace or control characters only."""
    where = recall_call(ref) if ref is not None else "original elided"
    return f"[output was blank (whitespace or control characters only); {where}]"


def line_numbers_marker(first: int, last: int) -> str:
    """Header stating the line range whose number prefixes were stripped."""
    return f"[lines {first}-{last}; line-number prefixes removed]"


def repeat_marker(more: int, lines: int = 1) -> str:
    """Marker after a line (or block of `lines` lines) repeated `more` more times in a row."""
    what = "line" if lines == 1 else f"{lines} lines"
    return f"[… {what} repeated {more:,} more times]"


def similar_marker(count: int) -> str:
    """Marker replacing a run of near-identical lines (first and last kept)."""
    return f"[… {count:,} similar lines omitted]"

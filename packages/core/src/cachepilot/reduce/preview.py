"""The size gate's salient preview: head, tail, and the lines an agent acts on in between.

A head/tail preview drops the middle of a long output, which is where a build's one error,
a server log's one exception or a test run's one failure usually sits. This preview keeps the
head and the tail as before, and spends a fixed extra budget (`salient_chars`, independent of
the output's size) on the middle lines that score highest (`reduce.salience`): errors and
exceptions with the lines around them that belong to them (frames, carets, locations), run
summaries, lines naming what the call asked for. Near-identical lines count once (the first
of a kind wins). Each omitted stretch is replaced by a marker naming how many lines it held
and which (`[… 1,204 lines omitted (lines 31-1234); recall(ref="…", lines="31-1234") …]`), so
the model fetches exactly that stretch.

Line numbers are those `recall` uses: lines as `str.splitlines` cuts them, of the output as
archived, or of its decoded text when the output is JSON carrying text
(`cachepilot.reduce.decoded`). Lines overwritten by a carriage return (progress bars) are never
shown, only counted.

Two linear passes over the text, memory bounded by the budget: the first scores every line
and keeps the best `_MAX_CANDIDATES`; the second fetches the few lines around the chosen ones.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from cachepilot.reduce.salience import (
    TERM_BONUS,
    LineScorer,
    clean_line,
    is_continuation,
    line_shape,
)
from cachepilot.reduce.stubs import omitted_stretch_marker, omitted_values_note, reduced_stub

__all__ = ["DECODED_NOTE", "salient_preview"]

_DIGITS = re.compile(r"[0-9a-f]{6,}|\d+")
_SAME_SHAPE = 2
"""Values of one shape (the same but for digits) the values note names at most."""

DECODED_NOTE: Final = "[JSON output: its long string values are shown decoded, line by line]"
"""First line of a preview of a JSON output whose strings were laid out as lines."""

# splitlines() line boundaries (recall numbers lines the same way).
_EOL = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_MAX_CANDIDATES = 400
_FETCHED = 48  # candidates whose surroundings the second pass fetches
_MAX_SHAPES = 8_192
_TAIL_LINES = 256
_ISLAND_LINE_CHARS = 400
_BEFORE = 2
_AFTER = 4
_MIN_USEFUL = 24
_MAX_TERM_LINES = 8
_NEIGHBOUR = 5  # a line scoring this much brings its neighbours along
_OLD_MARKER = "[… lines 12-1993 of 2000 omitted …]"


@dataclass(slots=True)
class _Line:
    number: int
    text: str
    overwritten: bool
    part: str = "middle"
    """`head`, `middle` or `tail` (gaps inside the head or the tail are overwritten lines)."""


def _lines(text: str) -> Iterator[tuple[int, int, int, bool]]:
    """(number, start, end, overwritten) of each line, as `str.splitlines` cuts them."""
    number = 0
    position = 0
    for match in _EOL.finditer(text):
        number += 1
        yield number, position, match.start(), match.group() == "\r"
        position = match.end()
    if position < len(text):
        yield number + 1, position, len(text), False


def _shown(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def salient_preview(
    text: str,
    head_chars: int,
    tail_chars: int,
    salient_chars: int,
    ref: str | None,
    *,
    original_chars: int,
    scorer: LineScorer | None = None,
    decoded: bool = False,
    numbered: bool = True,
    values: Sequence[str] = (),
    values_chars: int = 0,
) -> str:
    """`text` cut to a head, the salient lines of its middle and a tail, with markers.

    Args:
        text: the text whose lines are numbered (the output, or its decoded text).
        head_chars, tail_chars: budgets of the head and the tail (whole lines when possible).
        salient_chars: the extra budget for middle lines and their markers (0: none).
        ref: the ref the markers and the stub name (None: no recall call is named).
        original_chars: the size of the original output (stated in the stub).
        scorer: scores lines (default: no call terms).
        decoded: `text` is the decoded text of a JSON output (a note says so).
        numbered: the lines of `text` are those `recall` numbers (else markers count the
            omitted lines without naming them).
        values: exact values of `text`, best first (`memory.values.output_values`): the
            ones the kept lines do not show are named in a note above the stub, as many as
            fit in `values_chars`.
        values_chars: the note's budget (0: no note).
    """
    scorer = scorer if scorer is not None else LineScorer()
    head: list[_Line] = []
    head_used = 0
    head_open = True
    tail: deque[tuple[int, int, int, bool]] = deque(maxlen=_TAIL_LINES)
    shapes: dict[str, int] = {}
    heap: list[tuple[int, int]] = []  # (score, -number): the best candidates
    with_terms: dict[int, frozenset[str]] = {}  # candidates naming terms of the call
    term_lines: dict[str, int] = {}  # lines naming each term (at most `_MAX_TERMS` keys)
    total = 0
    lower = text.lower() if salient_chars >= _MIN_USEFUL else ""
    # Lines holding none of the scorer's words are skipped unscored (when lower-casing kept
    # every offset, as it does unless rare letters expand).
    hints = scorer.hint_ends(lower) if len(lower) == len(text) else None
    scoring = salient_chars >= _MIN_USEFUL
    next_hint: int | None = -1
    for number, start, end, overwritten in _lines(text):
        total = number
        tail.append((number, start, end, overwritten))
        if overwritten:
            continue
        if head_open:
            line = clean_line(text[start : min(end, start + 4 * _ISLAND_LINE_CHARS)])
            cost = len(line) + 1
            previous = head[-1].number if head else 0
            if number > previous + 1:  # overwritten lines skipped: a marker says so
                cost += len(_overwritten_marker(number - previous - 1, previous + 1, number - 1))
            if head_used + cost <= head_chars:
                head.append(_Line(number, line, False, "head"))
                head_used += cost
                continue
            head_open = False
            if not head and head_chars > 0:  # a first line longer than the head: its start
                head.append(_Line(number, _shown(line, head_chars), False, "head"))
                head_used = head_chars
                continue
        if not scoring:
            continue
        if hints is not None:
            while next_hint is not None and next_hint < start:
                next_hint = next(hints, None)
            if next_hint is None or next_hint >= end:
                continue
        line = clean_line(text[start : min(end, start + 4 * _ISLAND_LINE_CHARS)])
        score, terms = scorer.score_terms(line)
        for term in terms:
            term_lines[term] = term_lines.get(term, 0) + 1
        if terms:
            score += TERM_BONUS
        if not score:
            continue
        shape = line_shape(line)
        seen = shapes.get(shape, 0)
        if seen or len(shapes) < _MAX_SHAPES:
            shapes[shape] = seen + 1
        if seen:  # a near-copy of a line seen before: the second matters less, later ones not
            score = score - 5 if seen == 1 else 0
            if score <= 0:
                continue
        entry = (score, -number)
        if terms:
            with_terms[number] = terms
        if len(heap) < _MAX_CANDIDATES:
            heapq.heappush(heap, entry)
        elif entry > heap[0]:
            dropped = heapq.heapreplace(heap, entry)
            with_terms.pop(-dropped[1], None)
    last_head = head[-1].number if head else 0
    tail_lines = _tail(text, tail, tail_chars, last_head)
    first_tail = tail_lines[0].number if tail_lines else total + 1
    # A term on many lines (the directory everything runs in, a common word of a prompt)
    # singles none of them out: only the rarer terms earn their lines the bonus.
    rare = {term for term, count in term_lines.items() if count <= _MAX_TERM_LINES}

    def adjusted(score: int, number: int) -> int:
        terms = with_terms.get(number)
        return score - TERM_BONUS if terms and not terms & rare else score

    candidates = sorted(
        ((adjusted(s, -n), -n) for s, n in heap if last_head < -n < first_tail),
        key=lambda c: (-c[0], c[1]),
    )
    candidates = [c for c in candidates if c[0] > 0][:_FETCHED]
    # The markers this preview writes are longer than the head/tail preview's one, and a
    # decoded output gets a note: both come out of the extra budget.
    reserve = len(omitted_stretch_marker(total, total, total, ref)) - len(_OLD_MARKER)
    reserve += len(DECODED_NOTE) + 1 if decoded else 0
    marker_ref = ref if numbered else None
    middle = _choose(
        text, candidates, salient_chars - reserve, low=last_head, high=first_tail, ref=marker_ref
    )
    kept = [*head, *middle, *tail_lines]
    note = _values_note(kept, values, values_chars)
    return _render(kept, total, ref, original_chars, decoded=decoded, numbered=numbered, note=note)


def _values_note(kept: list[_Line], values: Sequence[str], budget: int) -> str:
    """The note naming the values the kept lines do not show, within `budget` characters."""
    if budget <= 0 or not values:
        return ""
    shown = "\n".join(line.text for line in kept)
    chosen: list[str] = []
    shapes: dict[str, int] = {}
    used = len(omitted_values_note(()))
    for value in values:
        cost = len(value) + (2 if chosen else 0)
        if used + cost > budget or value in shown:
            continue
        # A run of values that differ only in their digits (line numbers, unit numbers,
        # hashes of one kind) says little past its first two: room for other names.
        shape = _DIGITS.sub("0", value)
        if shapes.get(shape, 0) >= _SAME_SHAPE:
            continue
        shapes[shape] = shapes.get(shape, 0) + 1
        chosen.append(value)
        used += cost
    return omitted_values_note(chosen) if chosen else ""


def _tail(
    text: str, ring: deque[tuple[int, int, int, bool]], budget: int, last_head: int
) -> list[_Line]:
    """The last lines within `budget` (a last line longer than the budget: its end)."""
    out: list[_Line] = []
    used = 0
    for number, start, end, overwritten in reversed(ring):
        if number <= last_head:
            break
        if overwritten:
            continue
        line = clean_line(text[max(start, end - 4 * budget - 64) : end])
        cost = len(line) + 1
        if out and out[-1].number > number + 1:
            cost += len(_overwritten_marker(out[-1].number - number - 1, number + 1,
                                            out[-1].number - 1))  # fmt: skip
        if used + cost > budget:
            if not out and budget > 1:  # a last line longer than the tail: its end
                out.append(_Line(number, "…" + line[-(budget - 1) :], False, "tail"))
            break
        out.append(_Line(number, line, False, "tail"))
        used += cost
    out.reverse()
    return out


def _choose(
    text: str,
    candidates: list[tuple[int, int]],
    budget: int,
    *,
    low: int,
    high: int,
    ref: str | None,
) -> list[_Line]:
    """The middle lines to show: the best candidates with their context, within `budget`."""
    if not candidates or budget < _MIN_USEFUL:
        return []
    wanted: set[int] = set()
    for _, number in candidates:
        wanted.update(range(max(number - _BEFORE, low + 1), min(number + _AFTER, high - 1) + 1))
    lines = _fetch(text, wanted)
    chosen: dict[int, _Line] = {}
    left = budget
    marker = len(omitted_stretch_marker(99_999, 99_999, 99_999, ref)) + 1
    for score, number in candidates:
        if number in chosen or number not in lines or lines[number].overwritten:
            continue
        window = [number, *_context(lines, number, score)]
        for attempt in (window, [number]):
            new = [n for n in attempt if n not in chosen]
            cost = sum(len(_shown(lines[n].text, _ISLAND_LINE_CHARS)) + 1 for n in new)
            islands = {n for n in new if n - 1 not in chosen and n - 1 not in new}
            cost += marker * len(islands)
            if cost <= left:
                for n in new:
                    chosen[n] = _Line(n, _shown(lines[n].text, _ISLAND_LINE_CHARS), False)
                left -= cost
                break
        if left < _MIN_USEFUL:
            break
    return [chosen[n] for n in sorted(chosen)]


def _context(lines: dict[int, _Line], number: int, score: int) -> list[int]:
    """Lines around `number` that belong to it: frames and code above an exception, the
    location, caret and notes below an error (and one line either side of a strong one)."""
    out: list[int] = []
    for step, limit in ((-1, _BEFORE), (1, _AFTER)):
        for k in range(1, limit + 1):
            n = number + step * k
            line = lines.get(n)
            if line is None or line.overwritten:
                break
            if not line.text.strip():
                if step < 0:
                    break
                out.append(n)  # a blank line inside an error report (pytest, jest) goes on
                continue
            if is_continuation(line.text) or (k == 1 and score >= _NEIGHBOUR):
                out.append(n)
            else:
                break
    while out and not lines[out[-1]].text.strip():
        out.pop()
    return out


def _fetch(text: str, wanted: set[int]) -> dict[int, _Line]:
    """The cleaned lines of `text` whose numbers are in `wanted` (one pass, stops early)."""
    out: dict[int, _Line] = {}
    if not wanted:
        return out
    last = max(wanted)
    for number, start, end, overwritten in _lines(text):
        if number in wanted:
            raw = text[start : min(end, start + 4 * _ISLAND_LINE_CHARS)]
            out[number] = _Line(number, clean_line(raw), overwritten)
        if number >= last:
            break
    return out


def _overwritten_marker(count: int, first: int, last: int) -> str:
    """Lines inside the head or the tail that a carriage return overwrote (progress states)."""
    span = f"{first}" if first == last else f"{first}-{last}"
    return f"[… {count:,} overwritten line{'' if count == 1 else 's'} ({span}) …]"


def _render(
    kept: list[_Line],
    total: int,
    ref: str | None,
    original_chars: int,
    *,
    decoded: bool,
    numbered: bool,
    note: str = "",
) -> str:
    parts: list[str] = [DECODED_NOTE] if decoded else []
    previous = 0
    tail_start = next((i for i, line in enumerate(kept) if line.part == "tail"), len(kept))
    body_end: list[str] = []
    for index, line in enumerate(kept):
        before = kept[index - 1] if index else None
        if (
            line.number > previous + 1
            and before is not None
            and before.part == line.part
            and line.part != "middle"
        ):
            parts.append(_overwritten_marker(line.number - previous - 1, previous + 1,
                                             line.number - 1))  # fmt: skip
        elif line.number > previous + 1:
            count = line.number - previous - 1
            parts.append(
                omitted_stretch_marker(count, previous + 1, line.number - 1, ref, numbered=numbered)
            )
        if index == tail_start:
            body_end = parts
            parts = []
        parts.append(line.text)
        previous = line.number
    if previous < total:
        parts.append(
            omitted_stretch_marker(total - previous, previous + 1, total, ref, numbered=numbered)
        )
    if tail_start == len(kept):
        body_end, parts = parts, []
    if note:
        body_end = [*body_end, note]
    fixed = sum(len(p) + 1 for p in body_end) + sum(len(p) + 1 for p in parts)
    after = fixed
    for _ in range(5):  # the stub states the final size, which includes the stub itself
        stub = reduced_stub(original_chars, after, ref)
        if fixed + len(stub) == after:
            break
        after = fixed + len(stub)
    out = [*body_end, stub, *parts]
    return "\n".join(out)

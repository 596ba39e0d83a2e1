"""The size gate (per-tool limit) and the hard cap.

The gate's preview is salient (`reduce.preview`): head, tail and the middle lines an agent acts
on, numbered like `recall` numbers them (of the decoded text for JSON carrying text). The hard
cap keeps a plain head and tail: it cuts gate-open sources and exempt file reads, whose text
the model asked for as it is.
"""

from __future__ import annotations

import json

from cachepilot.memory.values import output_values
from cachepilot.reduce.config import STUB_OVERHEAD
from cachepilot.reduce.decoded import decoded_text
from cachepilot.reduce.passes.base import ALL_KINDS, TEXT_KINDS, PassContext, ReductionPass
from cachepilot.reduce.passes.html import looks_like_html
from cachepilot.reduce.preview import salient_preview
from cachepilot.reduce.salience import LineScorer, call_terms
from cachepilot.reduce.stubs import omitted_lines_marker, reduced_stub, unarchived_stub

_MIN_LINES = 8  # fewer line breaks than this: a head and a tail by characters
_SCORED_SCANS = 4  # the salient preview scores outputs up to this many `max_scan_chars`
_VALUE_CANDIDATES = 3  # the note picks from this many times its budget of values

__all__ = [
    "HardCapPass",
    "SizeGatePass",
    "gate_preview",
    "head_tail_preview",
    "unarchived_preview",
]


def _cut_head(text: str, size: int) -> str:
    head = text[:size]
    cut = head.rfind("\n")
    return head[:cut] if cut >= size // 2 else head


def _cut_tail(text: str, size: int) -> str:
    if size <= 0:
        return ""
    tail = text[-size:]
    cut = tail.find("\n")
    return tail[cut + 1 :] if 0 <= cut < size // 2 else tail


def head_tail_preview(
    text: str,
    head_chars: int,
    tail_chars: int,
    ref: str | None,
    *,
    original_chars: int,
    line_numbers: bool = True,
) -> str:
    """`text` cut to a head and a tail preview around the size-gate stub.

    The head is cut back and the tail forward to line boundaries (unless that would lose more
    than half of a preview). The stub reports the original size and the final size, which
    includes the stub itself. With `line_numbers`, a marker names the omitted line range
    (only meaningful when `text` is the original, so `recall(lines=…)` can fetch it).
    """
    head = _cut_head(text, head_chars)
    tail = _cut_tail(text, min(tail_chars, len(text) - len(head)))
    parts = [head] if head else []
    head_whole_lines = not head or text[len(head) : len(head) + 1] == "\n"
    tail_whole_lines = not tail or text[-len(tail) - 1 : -len(tail)] == "\n"
    if line_numbers and head_whole_lines and tail_whole_lines:
        total = text.count("\n") + 1
        first = head.count("\n") + (2 if head else 1)
        last = total - (tail.count("\n") + 1 if tail else 0)
        if first <= last:
            parts.append(omitted_lines_marker(first, last, total))
    fixed = sum(len(p) for p in parts) + len(tail) + len(parts) + (1 if tail else 0)
    after = fixed
    for _ in range(5):  # the stub states the final size, which includes the stub itself
        stub = reduced_stub(original_chars, after, ref)
        if fixed + len(stub) == after:
            break
        after = fixed + len(stub)
    parts.append(reduced_stub(original_chars, after, ref))
    if tail:
        parts.append(tail)
    return "\n".join(parts)


def unarchived_preview(text: str, head_chars: int, tail_chars: int) -> str:
    """`text` cut to a head and a tail preview for when its original could not be archived:
    the stub says the middle is gone (there is no ref to recall it by)."""
    head = _cut_head(text, head_chars)
    tail = _cut_tail(text, min(tail_chars, len(text) - len(head)))
    fixed = len(head) + len(tail) + 2
    after = fixed
    for _ in range(5):  # the stub states the final size, which includes the stub itself
        if fixed + len(unarchived_stub(len(text), after)) == after:
            break
        after = fixed + len(unarchived_stub(len(text), after))
    return "\n".join((head, unarchived_stub(len(text), after), tail))


def gate_preview(text: str, ctx: PassContext) -> str:
    """The size gate's salient preview of `ctx.result` (see `reduce.preview`).

    The lines are those of the original output (or of its decoded text, for JSON carrying
    text), not of `text` as earlier passes left it, so the line numbers the markers name are
    the ones `recall` serves; the cleanups those passes made (escape sequences, progress
    lines) are redone line by line and the folds are redone by the preview's own choice. An
    output that a pass rewrote as a whole (an HTML page as text, JSON re-serialised) is
    previewed as rewritten, with markers that count lines but name no numbers. An output of a
    few long lines gets a head and tail by characters, one longer than four times
    `max_scan_chars` a numbered head and tail without scoring its lines. The extra budget
    stays below the tool's limit, so the preview is always the shorter.
    """
    profile = ctx.profile
    original = ctx.result.text
    decoded = decoded_text(original)
    numbered = True
    if decoded is not None:
        source = decoded
    elif text is original or text == original:
        source = original
    elif ctx.result.kind == "json" or looks_like_html(original) or _is_json(original):
        source, numbered = text, False
    else:
        source = original
    if source.count("\n") < _MIN_LINES:
        return head_tail_preview(
            text, profile.head_chars, profile.tail_chars, ctx.shown_ref,
            original_chars=len(original), line_numbers=text is original or text == original,
        )  # fmt: skip
    spare = profile.limit - profile.head_chars - profile.tail_chars - 2 * STUB_OVERHEAD
    if len(source) > _SCORED_SCANS * ctx.config.max_scan_chars:
        spare = 0  # too long to score every line: head and tail, still numbered
    salient = max(min(profile.salient_chars, spare), 0)
    values_chars = max(min(ctx.config.values_chars, spare - salient), 0)
    # More candidates than the note holds: the ones the kept lines already show drop out.
    values = (
        output_values(
            source, _VALUE_CANDIDATES * values_chars, scan_chars=ctx.config.max_scan_chars
        )
        if values_chars
        else []
    )
    return salient_preview(
        source,
        profile.head_chars,
        profile.tail_chars,
        salient,
        ctx.shown_ref,
        original_chars=len(original),
        scorer=LineScorer(call_terms(ctx.args)),
        decoded=decoded is not None,
        numbered=numbered,
        values=values,
        values_chars=values_chars,
    )


def _is_json(text: str) -> bool:
    if text.lstrip()[:1] not in ("{", "["):
        return False
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


class SizeGatePass(ReductionPass):
    """Output over the tool's limit: a salient preview (head, key middle lines, tail) and a
    stub naming the ref.

    A file read is exempt on its first read of a path (same arguments); a re-read is gated.
    """

    name = "size_gate"
    lossless = False
    scans = False
    kinds = TEXT_KINDS

    def apply(self, text: str, ctx: PassContext) -> str | None:
        profile = ctx.profile
        if len(text) <= profile.limit or ctx.first_read:
            return None
        return gate_preview(text, ctx)


class HardCapPass(ReductionPass):
    """No output exceeds `hard_cap` characters: not gate-open sources, not exempt reads."""

    name = "hard_cap"
    lossless = False
    mandatory = True
    scans = False
    kinds = ALL_KINDS

    def apply(self, text: str, ctx: PassContext) -> str | None:
        cap = ctx.config.hard_cap
        if len(text) <= cap:
            return None
        tail = ctx.profile.tail_chars
        return head_tail_preview(
            text, cap - tail - 2 * STUB_OVERHEAD, tail, ctx.shown_ref,
            original_chars=len(ctx.result.text),
            line_numbers=text is ctx.result.text or text == ctx.result.text,
        )  # fmt: skip

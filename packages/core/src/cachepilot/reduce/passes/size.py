"""The size gate (per-tool limit) and the hard cap: head/tail previews at line boundaries."""

from __future__ import annotations

from cachepilot.reduce.config import STUB_OVERHEAD
from cachepilot.reduce.passes.base import ALL_KINDS, TEXT_KINDS, PassContext, ReductionPass
from cachepilot.reduce.stubs import omitted_lines_marker, reduced_stub, unarchived_stub

__all__ = ["HardCapPass", "SizeGatePass", "head_tail_preview", "unarchived_preview"]


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


class SizeGatePass(ReductionPass):
    """Output over the tool's limit: head + tail preview and a stub naming the ref.

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
        return head_tail_preview(
            text, profile.head_chars, profile.tail_chars, ctx.shown_ref,
            original_chars=len(ctx.result.text),
            line_numbers=text is ctx.result.text or text == ctx.result.text,
        )  # fmt: skip


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

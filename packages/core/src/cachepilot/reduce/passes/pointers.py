"""Passes that point at earlier results: duplicates, unchanged re-reads, identical-call loops."""

from __future__ import annotations

from cachepilot.reduce.normalize import ResultKind
from cachepilot.reduce.passes.base import TEXT_KINDS, PassContext, ReductionPass
from cachepilot.reduce.stubs import duplicate_stub, loop_note, loop_stub, unchanged_read_stub

__all__ = ["DuplicatePass", "LoopNotePass", "LoopStubPass", "SupersededReadPass"]

_POINTER_KINDS: frozenset[ResultKind] = TEXT_KINDS | {"binary", "image"}


def _worth_it(stub: str, text: str) -> bool:
    """A pointer replaces an output only when it at least halves it."""
    return 2 * len(stub) <= len(text)


class LoopStubPass(ReductionPass):
    """The n-th identical call in a row (n ≥ `loop_stub_after`) with the same output: stub."""

    name = "loop_stub"
    lossless = False
    scans = False
    kinds = _POINTER_KINDS

    def apply(self, text: str, ctx: PassContext) -> str | None:
        if ctx.loop_run < ctx.config.loop_stub_after or not ctx.loop_same_output:
            return None
        return loop_stub(ctx.loop_run, ctx.loop_last_call or "?", ctx.shown_ref)


class SupersededReadPass(ReductionPass):
    """A file read again (same arguments) with unchanged content: pointer to the earlier read."""

    name = "superseded_read"
    lossless = False
    scans = False

    def apply(self, text: str, ctx: PassContext) -> str | None:
        if ctx.previous_read_ref != ctx.ref or ctx.previous_read_call in {None, ctx.call_id}:
            return None
        stub = unchanged_read_stub(ctx.previous_read_call or "?", ctx.shown_ref)
        return stub if _worth_it(stub, text) else None


class DuplicatePass(ReductionPass):
    """An output identical (byte for byte) to an earlier result of this thread: pointer stub."""

    name = "duplicate"
    lossless = False
    scans = False
    kinds = _POINTER_KINDS

    def apply(self, text: str, ctx: PassContext) -> str | None:
        earlier = ctx.first_seen_call
        if earlier is None or earlier == ctx.call_id:
            return None
        stub = duplicate_stub(earlier, ctx.shown_ref)
        return stub if _worth_it(stub, text) else None


class LoopNotePass(ReductionPass):
    """The n-th identical call in a row (n ≥ `loop_flag_after`): append a short note."""

    name = "loop_note"
    lossless = True
    scans = False
    kinds = _POINTER_KINDS

    def apply(self, text: str, ctx: PassContext) -> str | None:
        if ctx.loop_run < ctx.config.loop_flag_after:
            return None
        if text.startswith("[identical call #"):
            return None  # the loop stub already says it
        note = loop_note(ctx.loop_run, ctx.tool_name, ctx.loop_same_output)
        return f"{text}\n{note}" if text else note

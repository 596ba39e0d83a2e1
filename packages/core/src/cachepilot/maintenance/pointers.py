"""Pointer stubs a fold would leave without their content: the content goes back.

The ingestion gate replaces an output identical to an earlier one of the thread, an unchanged
re-read of a file, or the n-th identical call of a loop by a pointer stub: "same output as
call X" (`reduce.stubs.pointed_call` reads them; stubs written before also said "above"). The
model finds the content at call X while call X is in view. A fold that takes call X and keeps
the pointer after it leaves a model that looks for call X and finds only a summary
(DESIGN §2.7): the content is what the model works with, removed with
only a recall as the way back, which is a pruning stub the cost model never priced (pruning is
off by default: the recall round trips it causes cost more than it saves).

So a fold brings the content back: each pointer kept after the folded range whose call the
range holds is replaced by the text that call showed. The fold re-sends everything after its
start anyway (the prefix breaks there), so the rewrite adds the content's tokens and no break.
A restore is an edit of kind `stub` with no `ref` (it archives nothing: the transcript keeps
the pointer, and the text it gets is the one the folded call showed).
"""

from __future__ import annotations

from collections.abc import Sequence

from cachepilot.messages import Message
from cachepilot.plan.epochs import Edit
from cachepilot.reduce.stubs import clean_label, pointed_call

__all__ = ["MAX_POINTER_HOPS", "is_restore", "restore_pointers"]

MAX_POINTER_HOPS = 4
"""Pointers followed to reach content (a re-read points at a read that may point on)."""


def is_restore(edit: Edit) -> bool:
    """True for an edit `restore_pointers` wrote (a result shown again, not stubbed)."""
    return edit.kind == "stub" and edit.ref is None


def restore_pointers(messages: Sequence[Message], keys: Sequence[str], fold: Edit) -> list[Edit]:
    """The restores of the pointer stubs after `fold` whose call `fold` takes.

    Args:
        messages: the transcript the fold was planned on (as the plan renders it).
        keys: their stable keys.
        fold: the fold edit (its range: `fold.key` .. `fold.last_key`).

    Returns:
        One `stub` edit without a ref per pointer to restore, in transcript order; none when
        the fold's keys do not resolve. Linear in the messages.
    """
    position: dict[str, int] = {}
    for index, key in enumerate(keys):
        position.setdefault(key, index)
    first, last = position.get(fold.key), position.get(fold.last_key)
    if first is None or last is None or last < first:
        return []
    folded: dict[str, str] = {}
    for message in messages[first : last + 1]:
        if message.role == "tool" and message.tool_call_id:
            folded[clean_label(message.tool_call_id)] = message.text
    out: list[Edit] = []
    for key, message in zip(keys[last + 1 :], messages[last + 1 :], strict=True):
        if message.role != "tool":
            continue
        target = pointed_call(message.text)
        for _ in range(MAX_POINTER_HOPS):
            if target is None or target not in folded:
                break
            text = folded[target]
            target = pointed_call(text)
            if target is None:
                out.append(Edit(kind="stub", key=key, text=text))
    return out

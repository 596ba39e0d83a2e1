"""Settling: drop from a thread's state what folds and stubs made irrelevant for good.

A fold replaces a range of the transcript with one summary; the stubs and reduced arguments
(`args` edits) planned inside that range and the folds it supersedes no longer change the view,
and neither does a stub or a reduced argument text that the framework already holds in place
of the original (LangGraph writes edits into graph state), nor the lifecycle segments of folded
messages or of work whose results are all stubbed. Left in
place they grow the state with every call (and a LangGraph checkpoint rewrites the state at
every step). `settle` runs at maintenance points, right after an epoch is appended: the view is
the same before and after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cachepilot.lifecycle import LifecycleRegistry
from cachepilot.maintenance.pointers import is_restore
from cachepilot.maintenance.policy import is_stub
from cachepilot.messages import Message
from cachepilot.plan.epochs import Edit, Plan, render_plan

__all__ = ["Settled", "settle"]


@dataclass(frozen=True, slots=True)
class Settled:
    """What `settle` dropped."""

    edits: int
    """Plan edits inside folds the view applies, folds those folds supersede, and stubs the
    transcript already holds."""
    segments: int
    """Lifecycle segments whose messages are folded or stubbed for good."""


def settle(
    plan: Plan, registry: LifecycleRegistry, messages: Sequence[Message], keys: Sequence[str]
) -> Settled:
    """Drop the settled edits of `plan` (its last epoch is left whole: it is what was just
    decided) and the settled segments of `registry`, given the transcript.

    Only positive evidence counts: a key is folded when it lies inside a fold the view of
    `messages` applies now. The rendered view is unchanged by construction.
    """
    if not plan.folds() and not registry.segments:
        return Settled(0, 0)
    view = render_plan(messages, plan, keys)
    position: dict[str, int] = {}
    for index, key in enumerate(keys):
        position.setdefault(key, index)
    folded: set[str] = set()
    applied: set[int] = set()
    for edit, (first, last) in zip(view.folds, view.spans, strict=True):
        if edit is None:
            continue
        applied.add(id(edit))
        folded.update(keys[position[first] : position[last] + 1])
    # Results replaced by stubs (reduced arguments leave the results whole; a restored
    # pointer shows its content again).
    stubbed = {
        edit.key
        for epoch in plan.epochs
        for edit in epoch.edits
        if edit.kind in ("stub", "evict") and not is_restore(edit) and edit.key in position
    }
    stubbed.update(
        key
        for key, message in zip(keys, messages, strict=True)
        if message.role == "tool" and is_stub(message.text)
    )
    dropped = 0
    for epoch in plan.epochs[:-1]:
        kept = [
            e
            for e in epoch.edits
            if not _superseded(e, folded, position, applied) and not _held(e, messages, position)
        ]
        if len(kept) != len(epoch.edits):
            dropped += len(epoch.edits) - len(kept)
            epoch.edits = kept
    segments = registry.compact(folded, stubbed - folded)
    return Settled(dropped, segments)


def _held(edit: Edit, messages: Sequence[Message], position: dict[str, int]) -> bool:
    """True for a stub the transcript already holds in place of its result, or reduced
    arguments it already holds in place of its call's arguments."""
    at = position.get(edit.key)
    if edit.kind == "fold" or at is None:
        return False
    message = messages[at]
    if edit.kind == "args":
        return message.role == "assistant" and any(
            call.id == edit.call_id and call.arguments == edit.text for call in message.tool_calls
        )
    return message.role == "tool" and message.text == edit.text


def _superseded(edit: Edit, folded: set[str], position: dict[str, int], applied: set[int]) -> bool:
    """True when an edit can no longer change the view: a stub inside an applied fold, or a
    fold (not applied) whose range an applied fold covers."""
    if edit.kind != "fold":
        return edit.key in folded
    if id(edit) in applied:
        return False
    return edit.key in folded and (edit.last_key in folded or edit.last_key not in position)

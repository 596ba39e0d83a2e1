"""The maintenance plan: ordered epochs of edits, applied deterministically to a transcript.

The view a model sees is `apply_plan(transcript, plan)`. Epochs are only ever appended, so the
view's already-sent part changes only when a new epoch is added (DESIGN §2.1). Edits address
messages by their stable key (`messages.message_keys`), never by position.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, Field

from cachepilot.messages import Message, message_keys

__all__ = ["Edit", "Epoch", "Plan", "apply_plan"]

logger = logging.getLogger(__name__)


class Edit(BaseModel):
    """One edit of one message."""

    kind: Literal["stub", "evict"]
    """`stub`: a pruned tool result; `evict`: a tool result of an evicted (superseded or
    finished) work unit. Both replace the result's content with `text`; the original is
    archived first."""
    key: str
    """Stable key of the message the edit applies to."""
    text: str
    """Replacement content."""
    ref: str | None = None
    """Artifact ref of the archived original."""


class Epoch(BaseModel):
    """Edits appended together at one maintenance point."""

    index: int
    """0-based position in the plan."""
    reason: str
    """Why this maintenance point was taken (for explanations)."""
    edits: list[Edit] = Field(default_factory=list)


class Plan(BaseModel):
    """All epochs of one thread, oldest first."""

    epochs: list[Epoch] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when no edit was ever planned."""
        return not any(e.edits for e in self.epochs)

    def edited_keys(self) -> set[str]:
        """Keys of every message some epoch edited."""
        return {edit.key for epoch in self.epochs for edit in epoch.edits}


_EDIT_MEMO: OrderedDict[tuple[int, str, str], tuple[Message, Message]] = OrderedDict()
_EDIT_MEMO_MAX = 50_000
_EDIT_LOCK = threading.Lock()


def _edited(message: Message, edit: Edit) -> Message:
    """The edited message, the same object on every call (token and hash memos keep hitting)."""
    memo_key = (id(message), edit.key, edit.text)
    with _EDIT_LOCK:
        hit = _EDIT_MEMO.get(memo_key)
        if hit is not None and hit[0] is message:
            return hit[1]
    edited = replace(message, content=edit.text)
    with _EDIT_LOCK:
        _EDIT_MEMO[memo_key] = (message, edited)
        if len(_EDIT_MEMO) > _EDIT_MEMO_MAX:
            _EDIT_MEMO.popitem(last=False)
    return edited


def apply_plan(
    messages: Sequence[Message], plan: Plan, keys: Sequence[str] | None = None
) -> list[Message]:
    """Render the view: the transcript with every planned edit applied, in epoch order.

    Unedited messages are returned as the same objects. Edits whose message is not in the
    transcript (yet, or any more) are ignored; an edit that does not fit its message (a stub
    on a non-tool message) is skipped with a log line, never applied half-way.

    Args:
        messages: the transcript.
        plan: the thread's plan.
        keys: the messages' stable keys, when the caller already has them.
    """
    if plan.empty:
        return list(messages)
    edits: dict[str, Edit] = {}
    for epoch in plan.epochs:
        for planned in epoch.edits:
            edits[planned.key] = planned
    out: list[Message] = []
    keys = message_keys(messages) if keys is None else keys
    for key, message in zip(keys, messages, strict=True):
        found = edits.get(key)
        if found is None:
            out.append(message)
        elif found.kind in ("stub", "evict") and message.role == "tool":
            out.append(_edited(message, found))
        else:
            logger.warning(
                "plan edit %s does not fit message %s (%s)", found.kind, key, message.role
            )
            out.append(message)
    return out

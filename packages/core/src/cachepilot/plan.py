"""The maintenance plan: ordered epochs of edits, applied deterministically to a transcript.

The view a model sees is `apply_plan(transcript, plan)`. Epochs are only ever appended, so the
view's already-sent part changes only when a new epoch is added (DESIGN §2.1). Edits address
messages by their stable key (`messages.message_keys`), never by position.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, Field

from cachepilot.messages import Message, message_keys

__all__ = ["Edit", "Epoch", "Plan", "apply_plan"]

logger = logging.getLogger(__name__)


class Edit(BaseModel):
    """One edit of one message."""

    kind: Literal["stub"]
    """`stub`: replace a tool result's content with `text` (the original is archived)."""
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


def apply_plan(messages: Sequence[Message], plan: Plan) -> list[Message]:
    """Render the view: the transcript with every planned edit applied, in epoch order.

    Unedited messages are returned as the same objects. Edits whose message is not in the
    transcript (yet, or any more) are ignored; an edit that does not fit its message (a stub
    on a non-tool message) is skipped with a log line, never applied half-way.
    """
    if plan.empty:
        return list(messages)
    edits: dict[str, Edit] = {}
    for epoch in plan.epochs:
        for planned in epoch.edits:
            edits[planned.key] = planned
    out: list[Message] = []
    for key, message in zip(message_keys(messages), messages, strict=True):
        found = edits.get(key)
        if found is None:
            out.append(message)
        elif found.kind == "stub" and message.role == "tool":
            out.append(replace(message, content=found.text))
        else:
            logger.warning(
                "plan edit %s does not fit message %s (%s)", found.kind, key, message.role
            )
            out.append(message)
    return out

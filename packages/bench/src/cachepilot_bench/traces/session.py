"""The neutral session every trace loader produces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cachepilot.messages import Message
from cachepilot.usage import Usage

__all__ = ["RecordedCall", "Session", "split_system"]


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """What a trace recorded about one model call (one assistant message)."""

    index: int
    """Index of the assistant message in `Session.messages`."""
    timestamp: float | None = None
    """Unix time the call was made (or answered), when the trace says."""
    usage: Usage | None = None
    """The provider's usage for this call, when the trace recorded it."""
    model: str | None = None
    """Model name, when recorded."""


@dataclass(slots=True)
class Session:
    """One agent session as the model saw it, in neutral form.

    `messages` holds the conversation (system prompt first when the trace has one); each
    assistant message is one model call whose request was everything before it.
    """

    id: str
    """Stable id: source-relative path plus a suffix when one file holds several sessions."""
    source: str
    """Format name, e.g. `claude-code`, `mini-swe-agent-1`, `tau-bench`."""
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Tool JSON schemas (OpenAI function format) when the trace has them."""
    calls: list[RecordedCall] = field(default_factory=list)
    """One record per assistant message, in order (may be empty when nothing was recorded)."""
    model: str | None = None
    path: str | None = None
    """File the session came from."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Loader extras (e.g. `hidden_prefix_tokens`, `compact_summary`, task outcome)."""

    def call_for(self, index: int) -> RecordedCall | None:
        """The recorded call of the assistant message at `index`, if any."""
        for call in self.calls:
            if call.index == index:
                return call
        return None

    @property
    def assistant_indices(self) -> list[int]:
        """Indices of the assistant messages (the model calls)."""
        return [i for i, m in enumerate(self.messages) if m.role == "assistant"]


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """Leading system messages become the system prompt; the rest is the conversation."""
    head: list[str] = []
    index = 0
    while index < len(messages) and messages[index].role == "system":
        head.append(messages[index].text)
        index += 1
    return ("\n\n".join(head) if head else None), list(messages[index:])

"""`keep-last-n`: the classic sliding window over user turns.

Once a request passes `trigger_fraction` (40%) of the model's context window, only the last
`keep_turns` (5) user turns are sent; a user turn is a user message and everything after it up
to the next user message. The system prompt is always sent. Cuts fall on user-message
boundaries only, so no tool call or tool result is ever orphaned.

The window is recomputed on every call from the full transcript (nothing is persisted), as
trimming helpers such as LangChain's `trim_messages` are used. A trace with at most
`keep_turns` user messages (most agent traces have one) is therefore never trimmed: that is
this peer as specified, not a bug.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cachepilot.messages import Message
from cachepilot_bench.peers._common import (
    PairingWatch,
    is_prefix,
    request_tokens,
    user_turn_starts,
)
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext, StatefulStrategy

__all__ = ["KeepLastN"]

logger = logging.getLogger(__name__)


class KeepLastN(StatefulStrategy):
    """Keep the last N user turns once the request passes a fraction of the window.

    Args:
        keep_turns: user turns kept when trimming (default 5).
        trigger_fraction: fraction of `SessionContext.context_window` above which the
            window applies (default 0.4).
    """

    name = "keep-last-n"
    can_recall = False

    def __init__(self, *, keep_turns: int = 5, trigger_fraction: float = 0.4) -> None:
        super().__init__()
        if keep_turns < 1:
            raise ValueError(f"keep_turns must be >= 1, got {keep_turns}")
        if not 0 < trigger_fraction <= 1:
            raise ValueError(f"trigger_fraction must be in (0, 1], got {trigger_fraction}")
        self.keep_turns = keep_turns
        self.trigger_fraction = trigger_fraction
        self._previous: Sequence[Message] = ()
        self._base_tokens = 0
        self._counts: list[int] = []
        self._pairing = PairingWatch(logger, self.name)

    def start(self, session: SessionContext) -> None:
        super().start(session)
        self._previous = ()
        self._base_tokens = request_tokens(session.counter, session.system, (), session.tools)
        self._counts = []
        self._pairing = PairingWatch(logger, self.name)

    def _request_tokens(self) -> int:
        counter = self.ctx.counter
        for message in self.state[len(self._counts) :]:
            self._counts.append(counter.count_message(message))
        return self._base_tokens + sum(self._counts)

    def window(self, messages: Sequence[Message], tokens: int) -> Sequence[Message]:
        """The messages this peer sends for a full transcript of `tokens` request tokens."""
        if tokens <= self.trigger_fraction * self.ctx.context_window:
            return messages
        starts = user_turn_starts(messages)
        if len(starts) <= self.keep_turns:
            return messages
        return messages[starts[-self.keep_turns] :]

    def view(self, call: CallContext) -> PreparedCall:
        messages = list(self.window(self.state, self._request_tokens()))
        self._pairing.check(messages, call.call_number)
        maintenance = bool(self._previous) and not is_prefix(self._previous, messages)
        self._previous = messages
        return PreparedCall(
            system=self.system_for(call),
            messages=messages,
            tools=self.ctx.tools,
            maintenance=maintenance,
        )

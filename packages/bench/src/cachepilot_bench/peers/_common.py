"""Helpers shared by the peer strategies (no third-party imports)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from cachepilot.messages import Message, pairing_issues
from cachepilot.tokens import TokenCounter

__all__ = [
    "PairingWatch",
    "is_prefix",
    "request_tokens",
    "user_turn_starts",
]


def is_prefix(previous: Sequence[Message], current: Sequence[Message]) -> bool:
    """True when `current` starts with every message of `previous` (identity, then equality)."""
    if len(current) < len(previous):
        return False
    return all(a is b or a == b for a, b in zip(previous, current, strict=False))


def user_turn_starts(messages: Sequence[Message]) -> list[int]:
    """Indexes of the user messages (each starts a user turn)."""
    return [i for i, m in enumerate(messages) if m.role == "user"]


def request_tokens(
    counter: TokenCounter,
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] = (),
) -> int:
    """Tokens of a whole request: system prompt, messages and tool schemas."""
    total = counter.count(system) if system else 0
    total += counter.count_messages(messages)
    if tools:
        total += counter.count(json.dumps(list(tools), sort_keys=True, ensure_ascii=False))
    return total


class PairingWatch:
    """Checks a peer's output for pairing problems and logs them once per strategy (DEBUG).

    Peers are measured as they are: a broken output is kept, never repaired.
    """

    def __init__(self, logger: logging.Logger, name: str) -> None:
        self._logger = logger
        self._name = name
        self._logged = False
        self.broken_calls = 0
        """How many calls so far produced an output with pairing issues."""

    def check(self, messages: Sequence[Message], call_number: int) -> None:
        """Record (and log once) any pairing issue of `messages`."""
        issues = pairing_issues(messages)
        if not issues:
            return
        self.broken_calls += 1
        if not self._logged:
            self._logged = True
            shown = "; ".join(str(i) for i in issues[:3])
            self._logger.debug(
                "peer %s produced a request with broken tool pairing at call %d "
                "(kept as the peer produced it): %s",
                self._name,
                call_number,
                shown,
            )

"""What cachepilot's log lines show for a thread: a short digest, never its name.

Thread names can carry what a host named a conversation after (a user, a ticket, a session
id), and call ids tie a log line to one tool call of one conversation; log lines above DEBUG
show neither. `thread_label` is a digest of the name (`t` and 12 hex characters), the same
in every process, so an operator can follow one thread through the logs; the proxy replaces
it with its store-salted label (`cachepilot.proxy.secret.Secret.label`), so a guessed name
cannot be confirmed from its logs. DEBUG lines may name threads and calls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

__all__ = ["set_thread_labeler", "thread_label"]


def _digest(thread: str) -> str:
    data = thread.encode("utf-8", "surrogatepass")
    return "t" + hashlib.sha256(b"cachepilot-log\x00" + data).hexdigest()[:12]


_labeler: list[Callable[[str], str]] = [_digest]  # one slot: the process's labeler


def thread_label(thread: str) -> str:
    """What a log line above DEBUG shows for thread `thread`."""
    try:
        return _labeler[0](thread)
    except Exception:  # a log line must never fail the call it reports on
        return _digest(thread)


def set_thread_labeler(labeler: Callable[[str], str] | None) -> None:
    """Make `thread_label` use `labeler` (None: the default digest)."""
    _labeler[0] = _digest if labeler is None else labeler

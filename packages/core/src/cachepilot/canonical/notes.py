"""Update notes: a frozen value's current text, given after the cached prefix.

The dynamic-context block is frozen so the prefix stays byte-stable; when a value changes
between maintenance points the model must still read the current one (DESIGN §2.7). The
canonicalizer then attaches a short note to the newest message of the request where the
change was first seen (a `ValueNote` in the thread's state): later requests re-render it
byte-identically on that same message, so every request still starts with the previous one
(§2.1). A maintenance point coalesces the notes into the block.

A history mark (`HistoryMark`) records which messages the previous call had, so a request
whose history does not continue the thread's (a new conversation under a reused thread id)
is recognised: nothing is learned across it and the frozen values are refreshed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from cachepilot.canonical.config import CanonicalConfig
from cachepilot.messages import Message
from cachepilot.support.identity_memo import IdentityMemo

__all__ = [
    "CLOCK_KINDS",
    "MAX_NOTES",
    "ChainMemo",
    "HistoryMark",
    "ValueNote",
    "clock_suffix",
    "history_chain",
    "message_digest",
    "note_due",
    "read_placeholders",
    "resolve_placeholders",
    "shown_values",
]

MAX_NOTES = 64
"""Notes kept per thread between maintenance points; one more refreshes the block instead
(one prefix break) so the state and the notes shown stay bounded."""
CLOCK_KINDS = frozenset({"datetime", "time"})
"""Placeholder kinds that are clocks: shown "as of" the request that wrote them, and noted
only when they moved by at least `CanonicalConfig.clock_resolution_seconds`."""

_CLOCK_SUFFIX = " (as of when this was written)"
_DIGESTS: IdentityMemo[Message, str] = IdentityMemo(8192)
ChainMemo = tuple[tuple[Message, ...], list[str]]
"""The messages of a previous `history_chain` call and the chain through each of them (an
unchanged head, the very same objects, is not digested again)."""


class ValueNote(BaseModel):
    """One update note: values that changed, attached to one message of the transcript."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    at: int
    """Index of the message (in the request's messages) the note is attached to."""
    digest: str
    """`message_digest` of that message as the client sent it (the note is re-rendered only
    while the history still holds it)."""
    values: dict[str, str] = Field(default_factory=dict)
    """Placeholder label → the value current when the note was written."""


class HistoryMark(BaseModel):
    """Which messages the previous call of a thread had (after its leading system messages)."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    length: int
    """How many messages."""
    digest: str
    """Chained digest of those messages (`history_chain`)."""


def message_digest(message: Message) -> str:
    """A digest of a message's role, text, tool calls and tool-call id (memoised by identity)."""
    hit = _DIGESTS.get(message)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    h.update(message.role.encode())
    h.update(b"\x00" + (message.tool_call_id or "").encode("utf-8", "surrogatepass"))
    for call in message.tool_calls:
        h.update(b"\x01" + call.id.encode("utf-8", "surrogatepass"))
        h.update(b"\x02" + call.name.encode("utf-8", "surrogatepass"))
        h.update(b"\x03" + call.arguments.encode("utf-8", "surrogatepass"))
    h.update(b"\x04" + message.text.encode("utf-8", "surrogatepass"))
    return _DIGESTS.put(message, h.hexdigest()[:32])


def history_chain(
    messages: Sequence[Message],
    start: int,
    mark: HistoryMark | None,
    memo: ChainMemo | None = None,
) -> tuple[bool, HistoryMark, ChainMemo]:
    """Whether ``messages[start:]`` continues the history `mark` records, its own mark, and
    the memo for the next call.

    Linear in the number of messages; only messages that are not the very objects of the
    previous call (`memo`) are digested.
    """
    body = tuple(messages[start:])
    chains = [""]
    if memo is not None:
        before, known = memo
        same = 0
        for a, b in zip(before, body, strict=False):
            if a is not b:
                break
            same += 1
        chains = known[: same + 1]
    for message in body[len(chains) - 1 :]:
        step = f"{chains[-1]}:{message_digest(message)}".encode()
        chains.append(hashlib.sha256(step).hexdigest()[:32])
    if mark is None or mark.length == 0:
        continues = True
    else:
        continues = mark.length <= len(body) and chains[mark.length] == mark.digest
    return continues, HistoryMark(length=len(body), digest=chains[-1]), (body, chains)


def shown_values(values: Mapping[str, str], notes: Iterable[ValueNote]) -> dict[str, str]:
    """What the model was last told each placeholder stands for: the block, then the notes."""
    out = dict(values)
    for note in notes:
        out.update(note.values)
    return out


def _kind(label: str) -> str:
    kind, _, n = label.rpartition("_")
    return kind if kind and n.isdigit() else label


_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")


def _seconds(value: str) -> float | None:
    """A clock reading in seconds (ISO datetimes, ``HH:MM[:SS]`` times), None when unknown."""
    text = value.strip()
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        pass
    m = _TIME.match(text)
    if m is None:
        return None
    hours, minutes, seconds = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    return float(hours * 3600 + minutes * 60 + seconds)


def note_due(label: str, shown: str, current: str, config: CanonicalConfig) -> bool:
    """Whether a changed value needs a note: always, except a clock that moved by less than
    `CanonicalConfig.clock_resolution_seconds` (it is shown "as of" its reading)."""
    if shown == current:
        return False
    if _kind(label) not in CLOCK_KINDS:
        return True
    a, b = _seconds(shown), _seconds(current)
    if a is None or b is None:
        return True
    moved = abs(b - a)
    if moved > 12 * 3600 and ":" in shown and "T" not in shown and " " not in shown.strip():
        moved = 24 * 3600 - moved  # a bare time of day wrapped past midnight
    return moved >= config.clock_resolution_seconds


def clock_suffix(label: str) -> str:
    """What follows a clock's value in a line (clocks are read "as of" when written)."""
    return _CLOCK_SUFFIX if _kind(label) in CLOCK_KINDS else ""


def read_placeholders(texts: Iterable[str], config: CanonicalConfig) -> dict[str, str]:
    """What each placeholder stands for to a reader of `texts` (in the order read): the last
    ``{{label}} = value`` line of a block or note wins (a clock's "as of" dropped)."""
    line = re.compile(
        "^" + re.escape(config.placeholder_open) + r"([A-Za-z][A-Za-z0-9_]*)"
        + re.escape(config.placeholder_close) + r" = (.*)$",
        re.MULTILINE,
    )  # fmt: skip
    out: dict[str, str] = {}
    for text in texts:
        for m in line.finditer(text):
            value = m.group(2)
            if value.endswith(_CLOCK_SUFFIX):
                value = value[: -len(_CLOCK_SUFFIX)]
            if value.startswith('"'):
                with contextlib.suppress(ValueError):
                    value = json.loads(value)
            out[m.group(1)] = value
    return out


def resolve_placeholders(text: str, values: Mapping[str, str], config: CanonicalConfig) -> str:
    """`text` with each placeholder of `values` replaced by its value (what the model reads)."""
    if not values:
        return text
    pattern = re.compile(
        "|".join(re.escape(config.placeholder(label)) for label in sorted(values, key=len)[::-1])
    )
    return pattern.sub(
        lambda m: values[m.group(0)[len(config.placeholder_open) : -len(config.placeholder_close)]],
        text,
    )

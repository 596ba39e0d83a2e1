"""Volatile spans learned per thread: token-like spans seen to change between two calls.

The built-in detectors know dates, UUIDs, paths and id-like keys. A value no pattern knows (a
``Session 9f0c2e41-77aa`` that changes every call, a build number) is learned instead: the
canonical text of a call is compared with the previous call's (`learn`), and when the two differ
only in a few short token-like spans with identical text around them, each span is recorded
as a `LearnedSpan` (its literal context left and right and the shape of its value). From then
on `find_learned` locates the span by that context in any later text, whatever its value, and
the canonicalizer freezes it like a built-in value (a placeholder in the prefix, the value in
the dynamic-context block).

The rule (`learn`), on the two canonical texts ``old`` and ``new``:

1. Equal texts: nothing to learn. Either text longer than ``learn_max_chars``: a change.
2. The texts are walked from difference to difference: each difference must lie in a token
   (a maximal run of ``[A-Za-z0-9_.-]``) on both sides, the two tokens are skipped and the text
   after them must continue identically up to the next difference. So nothing but tokens
   changed (no whitespace, newline or punctuation change, no text added), and at most
   `MAX_CHANGES` tokens differ.
3. Each differing pair is token-like: at most `MAX_SPAN_CHARS` characters on both sides, and
   either both contain a digit and one has four characters or more, or both have at least
   `LONG_TOKEN_CHARS` characters (a random id); a word swapped for a word is a change.
4. Each span has identical context: up to `CONTEXT_CHARS` characters each side (cut at the
   line break when the line alone gives `MIN_CONTEXT_CHARS`, at a placeholder, at the
   neighbouring span and at the edge of its text), `MIN_CONTEXT_CHARS` in all (an edge of the
   text counts half), and a non-empty left side unless it starts its text.
5. A bare number (digits, with ``.``/``,``/``_`` between them: ``1000``, ``3.10``) is a value
   only where a label introduces it: its left context ends in ``:``, ``=`` or ``#`` (spaces
   and quotes after it allowed), as in ``Remaining budget: 1200 tokens``, or in a word that
   names a counter or an id (`ID_NOUNS`: ``Build 4711``, ``Session 00001``, ``request id
   42``). Anywhere else in a sentence (``Never run more than 1000 commands``, ``Target
   Python 3.10``, ``older than 1000 days``) it is part of an instruction: a change of it is
   an instruction change, sent as it is.
6. Each span's context occurs once in the new text: a context repeated (the rows of a table,
   ``| job-1005 | queued |``) does not name one value, and nothing is learned.

Anything else (a new paragraph, a reworded instruction, a different task) is a genuine
change: nothing is learned and the text is sent as it is. Every step is linear in the texts
(at most `MAX_CHANGES` + 1 common-run searches by slice compares, C speed: 0.06 ms for two
200 KB prompts changed at both ends, `benchmarks/volatility.py`); matching a learned span is
a literal search plus a bounded run per hit.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

__all__ = [
    "CONTEXT_CHARS",
    "ID_NOUNS",
    "LONG_TOKEN_CHARS",
    "MAX_CHANGES",
    "MAX_LEARNED",
    "MAX_SPAN_CHARS",
    "MIN_CONTEXT_CHARS",
    "SEPARATOR",
    "Baseline",
    "LearnedSpan",
    "find_learned",
    "learn",
    "merge_learned",
    "replace_learned",
    "text_digest",
]

MAX_CHANGES = 16
"""Most differing token runs in one change that can still be volatile."""
MAX_SPAN_CHARS = 64
"""Longest value (each side) a learned span may have been seen with."""
LONG_TOKEN_CHARS = 16
"""Token runs this long count as ids even without a digit."""
CONTEXT_CHARS = 24
"""Literal context kept each side of a learned span."""
MIN_CONTEXT_CHARS = 8
"""Least literal context (left + right) a span needs to be learned."""
MAX_LEARNED = 32
"""Learned spans kept per thread (the oldest go first)."""
SEPARATOR = "\x00"
"""Joins the texts of one group (system prompt and system messages; tool descriptions)."""

_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_TOKEN = re.compile(r"[A-Za-z0-9_.\-]+")
_EDGE_PUNCT = "._-"
_BARE_NUMBER = re.compile(r"[0-9]+(?:[.,_][0-9]+)*")
_LABEL_ENDS = (":", "=", "#")
_LAST_WORD = re.compile(r"([A-Za-z]+)[ \t]*\Z")
ID_NOUNS = frozenset(
    {
        "attempt", "build", "call", "case", "commit", "id", "incident", "invoice", "issue",
        "iteration", "job", "nr", "no", "number", "order", "pr", "release", "request", "rev",
        "revision", "run", "session", "step", "task", "ticket", "trace", "turn", "worker",
    }
)  # fmt: skip
"""Words after which a bare number is a counter or an id, not a quantity of an instruction."""
_MAX_RUN = 2 * MAX_SPAN_CHARS


class LearnedSpan(BaseModel):
    """A span learned as volatile: found by its literal context, whatever its value."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    group: str
    """Which texts it was learned in: ``system`` (system prompt and system messages) or
    ``tools`` (tool descriptions)."""
    left: str
    """The literal text just before the value."""
    right: str
    """The literal text just after the value."""
    at_start: bool = False
    """The left context starts its text."""
    at_end: bool = False
    """The right context ends its text."""
    punct: str = ""
    """Punctuation a value may contain besides letters and digits (from ``._-``)."""
    min_len: int = 1
    """Shortest value matched."""
    max_len: int = MAX_SPAN_CHARS
    """Longest value matched."""
    digit: bool = False
    """Values must contain a digit (they did when learned)."""

    @property
    def context(self) -> tuple[str, str, str, bool, bool]:
        """What identifies the span (two spans with the same context are one)."""
        return (self.group, self.left, self.right, self.at_start, self.at_end)

    def pattern(self) -> str:
        """The regular expression of the span (group 1: the value)."""
        chars = "A-Za-z0-9" + "".join(re.escape(c) for c in sorted(set(self.punct)))
        return (
            ("\\A" if self.at_start else "")
            + re.escape(self.left)
            + f"([{chars}]{{{self.min_len},{self.max_len}}})"
            + "(?="
            + re.escape(self.right)
            + ("\\Z" if self.at_end else "")
            + ")"
        )


class Baseline(BaseModel):
    """A group's canonical text of the previous call, kept compressed."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    digest: str
    """Digest of the text."""
    packed: str
    """The text, zlib-compressed and base64-encoded."""

    @classmethod
    def of(cls, text: str) -> Baseline:
        """The baseline of `text`."""
        raw = text.encode("utf-8", "surrogatepass")
        packed = base64.b64encode(zlib.compress(raw, 6)).decode("ascii")
        return cls(digest=text_digest(text), packed=packed)

    def text(self) -> str:
        """The text back."""
        return zlib.decompress(base64.b64decode(self.packed)).decode("utf-8", "surrogatepass")


def text_digest(text: str) -> str:
    """A short digest of a text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


# --------------------------------------------------------------------------------------------
# Matching


_COMPILED: dict[LearnedSpan, re.Pattern[str]] = {}


def _compiled(span: LearnedSpan) -> re.Pattern[str]:
    regex = _COMPILED.get(span)
    if regex is None:
        if len(_COMPILED) > 4096:  # bounded: patterns of threads long gone
            _COMPILED.clear()
        regex = _COMPILED[span] = re.compile(span.pattern())
    return regex


def find_learned(text: str, spans: Iterable[LearnedSpan]) -> list[tuple[int, int]]:
    """Where learned spans occur in `text`: non-overlapping ``(start, end)``, sorted.

    Earlier spans win an overlap. Linear in the text per span: the literal left context is
    searched, then a run of at most `LearnedSpan.max_len` characters is tried per hit.
    """
    found: list[tuple[int, int, int]] = []
    for rank, span in enumerate(spans):
        if not span.left and not span.at_start:
            continue  # never learned so (a bare run would be tried at every position)
        for m in _compiled(span).finditer(text):
            value = m.group(1)
            if span.digit and not any(c.isdigit() for c in value):
                continue
            found.append((m.start(1), m.end(1), rank))
    found.sort(key=lambda f: (f[0], f[2]))
    out: list[tuple[int, int]] = []
    for start, end, _ in found:
        if out and start < out[-1][1]:
            continue
        out.append((start, end))
    return out


def replace_learned(text: str, spans: Iterable[LearnedSpan], placeholder: str) -> str:
    """`text` with every learned span replaced by `placeholder` (the thread-key form)."""
    pieces: list[str] = []
    at = 0
    for start, end in find_learned(text, spans):
        pieces.append(text[at:start])
        pieces.append(placeholder)
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def merge_learned(known: Sequence[LearnedSpan], new: Iterable[LearnedSpan]) -> list[LearnedSpan]:
    """`known` plus `new` (a span with a known context widens that one's shape), at most
    `MAX_LEARNED`, the oldest dropped first."""
    out = list(known)
    index = {span.context: i for i, span in enumerate(out)}
    for span in new:
        at = index.get(span.context)
        if at is None:
            index[span.context] = len(out)
            out.append(span)
            continue
        old = out[at]
        out[at] = old.model_copy(
            update={
                "punct": "".join(sorted(set(old.punct) | set(span.punct))),
                "min_len": min(old.min_len, span.min_len),
                "max_len": max(old.max_len, span.max_len),
                "digit": old.digit and span.digit,
            }
        )
    return out[-MAX_LEARNED:]


# --------------------------------------------------------------------------------------------
# Learning


def _common_prefix(a: str, b: str, start: tuple[int, int], end: tuple[int, int]) -> int:
    """Length of the common prefix of ``a[i:a_end]`` and ``b[j:b_end]`` (``(i, j) = start``,
    ``(a_end, b_end) = end``): a binary search over slice compares, C speed, linear in the
    length compared."""
    (i, j), (a_end, b_end) = start, end
    lo, hi = 0, min(a_end - i, b_end - j)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[i + lo : i + mid] == b[j + lo : j + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid : len(a) - lo] == b[len(b) - mid : len(b) - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _token_like(a: str, b: str) -> bool:
    if not a or not b or len(a) > MAX_SPAN_CHARS or len(b) > MAX_SPAN_CHARS:
        return False
    if min(len(a), len(b)) >= LONG_TOKEN_CHARS:
        return True
    digits = any(c.isdigit() for c in a) and any(c.isdigit() for c in b)
    return digits and max(len(a), len(b)) >= 4


@dataclass(frozen=True, slots=True)
class _Change:
    start: int  # in the new text
    end: int
    old: str
    new: str


def _changes(old: str, new: str) -> list[_Change] | None:
    """The differing token runs of two texts, or None when they differ otherwise.

    Walks both texts from difference to difference: each step skips the common run (a
    binary search over slice compares) and the two differing token runs, so the work is
    linear in the texts for at most `MAX_CHANGES` steps.
    """
    p = _common_prefix(old, new, (0, 0), (len(old), len(new)))
    s = _common_suffix(old, new, min(len(old), len(new)) - p)
    while s > 0 and old[len(old) - s] in _TOKEN_CHARS:
        s -= 1
    old_end, new_end = len(old) - s, len(new) - s
    i = j = 0  # positions in old and new
    floor = 0  # how far back a token may start (after the previous change)
    changes: list[_Change] = []
    while True:
        k = _common_prefix(old, new, (i, j), (old_end, new_end))
        i, j = i + k, j + k
        if i == old_end and j == new_end:
            return changes
        # Back to the start of the token the difference is in (the text before is common).
        while i > floor and old[i - 1] in _TOKEN_CHARS:
            i, j = i - 1, j - 1
        a = _TOKEN.match(old, i, old_end)
        b = _TOKEN.match(new, j, new_end)
        if a is None or b is None or a.group() == b.group():
            return None  # whitespace, punctuation or text added
        change = _token_change(a.group(), b.group(), j)
        if change is None or len(changes) == MAX_CHANGES:
            return None
        changes.append(change)
        i, j = a.end(), b.end()
        floor = i


def _token_change(a: str, b: str, at: int) -> _Change | None:
    """The change of token `a` into `b` (at `at` in the new text), if token-like."""
    # Sentence punctuation around the value is context, not value.
    lead = 0
    while lead < min(len(a), len(b)) - 1 and a[lead] == b[lead] and a[lead] in _EDGE_PUNCT:
        lead += 1
    trail = 0
    while (
        trail < min(len(a), len(b)) - lead - 1
        and a[len(a) - 1 - trail] == b[len(b) - 1 - trail]
        and a[len(a) - 1 - trail] in _EDGE_PUNCT
    ):
        trail += 1
    va, vb = a[lead : len(a) - trail], b[lead : len(b) - trail]
    if not _token_like(va, vb):
        return None
    return _Change(at + lead, at + len(b) - trail, va, vb)


def _left(new: str, start: int, floor: int, open_: str, close: str) -> tuple[str, bool] | None:
    """The left context of a value at `start` and whether it starts its text (None: the
    value touches a placeholder)."""
    if open_ and new.endswith(open_, 0, start):
        return None
    lo = max(floor, start - CONTEXT_CHARS)
    anchored = lo == 0
    sep = new.rfind(SEPARATOR, lo, start)
    if sep != -1:
        lo, anchored = sep + 1, True
    if close:
        cut = new.rfind(close, lo, start)
        if cut != -1:
            lo, anchored = cut + len(close), False
    line = new.rfind("\n", lo, start)
    if line != -1 and start - (line + 1) >= MIN_CONTEXT_CHARS:
        lo, anchored = line + 1, False
    return new[lo:start], anchored


def _right(new: str, end: int, ceiling: int, open_: str, close: str) -> tuple[str, bool] | None:
    """The right context of a value ending at `end` and whether it ends its text."""
    if close and new.startswith(close, end):
        return None
    hi = min(ceiling, end + CONTEXT_CHARS)
    anchored = hi == len(new)
    sep = new.find(SEPARATOR, end, hi)
    if sep != -1:
        hi, anchored = sep, True
    if open_:
        cut = new.find(open_, end, hi)
        if cut != -1:
            hi, anchored = cut, False
    line = new.find("\n", end, hi)
    if line != -1 and line - end >= MIN_CONTEXT_CHARS:
        hi, anchored = line, False
    return new[end:hi], anchored


def learn(
    old: str,
    new: str,
    group: str,
    *,
    max_chars: int,
    placeholder: tuple[str, str] = ("{{", "}}"),
) -> list[LearnedSpan] | None:
    """The spans that make `new` differ from `old` if the difference is volatile.

    Args:
        old: the previous call's canonical text.
        new: this call's canonical text.
        group: the group of texts they are (recorded in the spans).
        max_chars: longer texts are not compared (a change).
        placeholder: the placeholder delimiters (spans never touch a placeholder).

    Returns:
        ``[]`` when the texts are equal, the learned spans when they differ only in volatile
        spans (see the module docstring for the rule), None for a genuine change.
    """
    if old == new:
        return []
    if len(old) > max_chars or len(new) > max_chars:
        return None
    changes = _changes(old, new)
    if not changes:
        return None
    open_, close = placeholder
    out: list[LearnedSpan] = []
    for i, change in enumerate(changes):
        floor = changes[i - 1].end if i else 0
        ceiling = changes[i + 1].start if i + 1 < len(changes) else len(new)
        left = _left(new, change.start, floor, open_, close)
        right = _right(new, change.end, ceiling, open_, close)
        if left is None or right is None:
            return None
        (ltext, at_start), (rtext, at_end) = left, right
        # One side long enough: the other stops at its line break (a later edit of the
        # neighbouring line keeps the span found).
        if len(ltext) >= MIN_CONTEXT_CHARS and "\n" in rtext:
            rtext, at_end = rtext[: rtext.index("\n") + 1], False
        elif len(rtext) >= MIN_CONTEXT_CHARS and "\n" in ltext:
            ltext, at_start = ltext[ltext.rindex("\n") :], False
        if not ltext and not at_start:
            return None
        if _bare_number(change.old, change.new) and not _labelled(ltext):
            return None  # a number inside an instruction (rule 5)
        weight = len(ltext) + len(rtext) + MIN_CONTEXT_CHARS // 2 * (at_start + at_end)
        if weight < MIN_CONTEXT_CHARS:
            return None
        values = (change.old, change.new)
        shortest = min(len(v) for v in values)
        longest = max(len(v) for v in values)
        out.append(
            LearnedSpan(
                group=group,
                left=ltext,
                right=rtext,
                at_start=at_start,
                at_end=at_end,
                punct="".join(sorted({c for v in values for c in v if c in _EDGE_PUNCT})),
                min_len=max(1, shortest // 2),
                max_len=min(_MAX_RUN, 2 * longest + 8),
                digit=all(any(c.isdigit() for c in v) for v in values),
            )
        )
    learned = merge_learned([], out)
    if any(_repeated(new, span) for span in learned):
        return None  # rule 6
    return learned


def _bare_number(*values: str) -> bool:
    return all(_BARE_NUMBER.fullmatch(v) for v in values)


def _labelled(left: str) -> bool:
    """Whether a left context ends in a label (``Budget: ``, ``build=``, ``#``, ``Build ``)."""
    if left.rstrip(" \t'\"").endswith(_LABEL_ENDS):
        return True
    m = _LAST_WORD.search(left)
    return m is not None and m.group(1).lower() in ID_NOUNS


def _repeated(text: str, span: LearnedSpan) -> bool:
    """Whether `span` is found more than once in `text` (stops at the second hit)."""
    hits = 0
    for m in _compiled(span).finditer(text):
        if span.digit and not any(c.isdigit() for c in m.group(1)):
            continue
        hits += 1
        if hits > 1:
            return True
    return False

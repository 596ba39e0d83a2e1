"""The most telling exact values of one tool output, ranked.

Names the output defines first, then the most specific and frequent values; credentials
redacted before values are cut out. A fold's "facts in use" and the size gate's note on the
lines its preview leaves out both rank values this way. Linear in the scanned window, which
is bounded.
"""

from __future__ import annotations

from functools import lru_cache

from cachepilot.memory import patterns
from cachepilot.memory.facts import count_candidates
from cachepilot.support.redact import redact

__all__ = ["SCAN_HEAD", "SCAN_TAIL", "output_scores", "output_values", "ranked"]

SCAN_HEAD = 24_000
"""Characters of an output's head that are scanned for values."""
SCAN_TAIL = 6_000
"""Characters of an output's tail that are scanned for values."""
_MAX_VALUES_PER_SOURCE = 400
_MAX_VALUE_CHARS = 100
_MEMO_CHARS = _MAX_VALUES_PER_SOURCE * _MAX_VALUE_CHARS
"""Characters of values a memoised ranking may hold (one output's worth at most)."""
_SECRET_MIN_CHARS = 16
_DEDUPE_AGAINST = 24
_DEFINED = 2.0
"""Score added to a name the output defines."""


def output_values(text: str, max_chars: int, *, scan_chars: int | None = None) -> list[str]:
    """The most telling exact values of one tool output (names it defines, then the most
    specific and frequent), as many as fit in `max_chars` joined by ", "; credentials
    redacted first. For the stub that replaces the output, and the size gate's note on
    the lines its preview leaves out.

    `scan_chars`: scan this many characters of the output (its middle included) instead of
    the usual head and tail window; the scan stays linear in it.
    """
    if max_chars <= 0 or not text:
        return []
    if scan_chars is not None and scan_chars > SCAN_HEAD + SCAN_TAIL:
        tail = min(SCAN_TAIL, scan_chars // 4)
        # Not memoised: the cache holds small windows, not whole outputs.
        scored = _score(redact(patterns.window(text, scan_chars - tail, tail)))
    else:
        scored = output_scores(text)
    out: list[str] = []
    used = 0
    for value in ranked(scored):
        if "]" in value or ";" in value:
            continue
        cost = len(value) + (2 if out else 0)
        if used + cost > max_chars:
            continue
        out.append(value)
        used += cost
    return out


def output_scores(text: str) -> dict[str, float]:
    """`_score` of one tool output's scan window (redacted first), memoised: the same output
    is scored again at every later fold of a range that holds it."""
    return dict(_scored_window(patterns.window(text, SCAN_HEAD, SCAN_TAIL)))


@lru_cache(maxsize=2_048)
def _scored_window(window: str) -> tuple[tuple[str, float], ...]:
    # Redacted before values are cut out of it: a secret stripped of its `key=` context
    # would no longer look like one.
    return tuple(_score(redact(window)).items())


def _score(text: str) -> dict[str, float]:
    definitions = set(patterns.code_definitions(text))
    scored: dict[str, float] = {}
    for value, count in count_candidates(text).items():
        if len(value) > _MAX_VALUE_CHARS or "\n" in value:
            continue
        if len(value) >= _SECRET_MIN_CHARS and value != redact(value):
            continue  # a value that still looks like a credential on its own
        score = patterns.specificity(value) + min(count, 5) * 0.2 + min(len(value), 40) / 40
        if value in definitions or value.rsplit(".", 1)[-1] in definitions:
            score += _DEFINED
        scored[value] = score
    best = sorted(scored, key=lambda v: (-scored[v], v))[:_MAX_VALUES_PER_SOURCE]
    return {v: scored[v] for v in best}


def ranked(values: dict[str, float]) -> list[str]:
    """The values best first, less those inside a better one; memoised (a fold ranks every
    output of its range again, and most are ranked as they were at the last fold). Only the
    values of about one output are memoised: a source many outputs fed (a command run again
    and again) holds more, and the memo would keep them all alive."""
    names, scores = tuple(values), tuple(values.values())
    if len(names) > _MAX_VALUES_PER_SOURCE or sum(map(len, names)) > _MEMO_CHARS:
        return list(_ranked.__wrapped__(names, scores))
    return list(_ranked(names, scores))


@lru_cache(maxsize=1_024)
def _ranked(names: tuple[str, ...], scores: tuple[float, ...]) -> tuple[str, ...]:
    values = dict(zip(names, scores, strict=True))
    ordered = sorted(values, key=lambda v: (-values[v], v))
    # A value inside a longer kept value adds nothing the longer one does not say.
    kept: list[str] = []
    for value in ordered:
        # (against the first few only: the check is quadratic, and the top matters most)
        if not any(value in other for other in kept[:_DEDUPE_AGAINST]):
            kept.append(value)
    return tuple(kept)

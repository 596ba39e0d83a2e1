"""Placeholders for volatile values and the dynamic-context block that carries them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cachepilot.canonical.config import CanonicalConfig, VolatileSpan
from cachepilot.canonical.detect import _default_config, detect_volatile
from cachepilot.canonical.notes import clock_suffix
from cachepilot.canonical.volatility import LearnedSpan, find_learned

__all__ = [
    "LEARNED_KIND",
    "CanonicalText",
    "canonicalize_text",
    "render_block",
    "render_note",
]


_CLOCK_HINT = re.compile(r"\d[T ]\d\d:\d\d")
"""What an ISO datetime contains (texts without it skip the clock detector)."""

LEARNED_KIND = "learned"
"""Placeholder kind of learned volatile spans (``{{learned_1}}``)."""


@dataclass(frozen=True, slots=True)
class CanonicalText:
    """The result of `canonicalize_text`: the canonical text and what it replaced."""

    text: str
    values: dict[str, str]
    """Label (``date_1``) → real value, in order of first appearance."""
    spans: tuple[VolatileSpan, ...]
    """The spans replaced, positions in the original text."""


class _Assigner:
    """Numbers placeholders across the texts of one request (kind + ordinal of first sight)."""

    def __init__(
        self,
        config: CanonicalConfig,
        learned: Sequence[LearnedSpan] = (),
        clocks: CanonicalConfig | None = None,
    ) -> None:
        self.config = config
        self._clocks = clocks
        """Detectors run where built-ins are off (tool descriptions): ISO datetimes."""
        self.values: dict[str, str] = {}
        self._by_value: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self.spans = 0
        self._learned: dict[str, list[LearnedSpan]] = {}
        for span in learned:
            self._learned.setdefault(span.group, []).append(span)
        self.texts: dict[str, list[str]] = {}
        """Canonical texts by group, in the order canonicalized (what learning compares)."""

    def label(self, span: VolatileSpan) -> str:
        if span.kind in self.config.named_values:
            self.values.setdefault(span.kind, span.value)
            return span.kind
        if self.config.dedupe_values and span.value in self._by_value:
            return self._by_value[span.value]
        n = self._counts.get(span.kind, 0) + 1
        self._counts[span.kind] = n
        label = f"{span.kind}_{n}"
        self.values[label] = span.value
        self._by_value.setdefault(span.value, label)
        return label

    def canonicalize(
        self, text: str, *, group: str | None = None, builtins: bool = True
    ) -> tuple[str, list[VolatileSpan]]:
        """`text` with its volatile values replaced, and the spans replaced.

        Built-in (and user) detectors run when `builtins` (else only the clock detectors the
        assigner was given: an ISO timestamp is frozen wherever it is); then the spans learned
        in `group` are replaced in the result (their positions are in that text), and the
        canonical text is recorded under `group` for learning.
        """
        if builtins:
            spans = detect_volatile(text, self.config)
        elif self._clocks is not None and _CLOCK_HINT.search(text):
            spans = detect_volatile(text, self._clocks)
        else:
            spans = []
        if spans:
            text = self._replace(text, spans)
        if group is not None:
            learned = self._learned.get(group)
            if learned:
                found = [
                    VolatileSpan(start, end, LEARNED_KIND, text[start:end])
                    for start, end in find_learned(text, learned)
                ]
                if found:
                    text = self._replace(text, found)
                    spans = [*spans, *found]
            self.texts.setdefault(group, []).append(text)
        return text, spans

    def _replace(self, text: str, spans: Sequence[VolatileSpan]) -> str:
        pieces: list[str] = []
        at = 0
        for span in spans:
            pieces.append(text[at : span.start])
            pieces.append(self.config.placeholder(self.label(span)))
            at = span.end
        pieces.append(text[at:])
        self.spans += len(spans)
        return "".join(pieces)


def canonicalize_text(text: str, config: CanonicalConfig | None = None) -> CanonicalText:
    """Replace the volatile values of one text by placeholders (fresh numbering).

    Useful for diagnostics (`explain` can compare canonical forms); `Canonicalizer.apply` does
    the same across a whole request and keeps per-thread values.
    """
    assigner = _Assigner(config or _default_config())
    canonical, spans = assigner.canonicalize(text) if isinstance(text, str) else ("", [])
    return CanonicalText(canonical, dict(assigner.values), tuple(spans))


def render_block(values: Iterable[tuple[str, str]], config: CanonicalConfig | None = None) -> str:
    """The dynamic-context block for ``(label, value)`` pairs ("" when there are none).

    A value spanning lines or with outer blanks is written as a JSON string; a clock's value
    says it is "as of" when it was written.
    """
    cfg = config or _default_config()
    lines = [
        f"{cfg.placeholder(label)} = {_show(value)}{clock_suffix(label)}" for label, value in values
    ]
    if not lines:
        return ""
    header = [cfg.block_header] if cfg.block_header else []
    return "\n".join([f"<{cfg.block_tag}>", *header, *lines, f"</{cfg.block_tag}>"])


def render_note(values: Iterable[tuple[str, str]], config: CanonicalConfig) -> str:
    """An update note for ``(label, value)`` pairs whose value changed since the block (or an
    earlier note) was written: the same lines as the block, in a ``<{block_tag}-update>``."""
    lines = [
        f"{config.placeholder(label)} = {_show(value)}{clock_suffix(label)}"
        for label, value in values
    ]
    tag = f"{config.block_tag}-update"
    header = [config.update_header] if config.update_header else []
    return "\n".join([f"<{tag}>", *header, *lines, f"</{tag}>"])


def _show(value: str) -> str:
    if value != value.strip() or any(c in value for c in "\n\r\t\x0b\x0c\x85\u2028\u2029"):
        return json.dumps(value, ensure_ascii=False)
    return value


# --------------------------------------------------------------------------------------------
# Tools

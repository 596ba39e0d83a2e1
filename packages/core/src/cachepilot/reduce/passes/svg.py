"""SVG documents: an image written as markup, summarised instead of cut as text.

A head/tail cut of a large SVG leaves broken markup and path coordinates the model cannot
use. Over the tool's size-gate limit, an SVG document becomes a one-block summary: its size
and dimensions, its element counts, its title and the first labels it draws, and the recall
call of the full markup. Smaller SVGs (icons, diagrams the model may edit) pass unchanged.
Every scan is a linear regular-expression pass over the text.
"""

from __future__ import annotations

import re
from collections import Counter

from cachepilot.reduce.passes.base import PassContext, ReductionPass
from cachepilot.reduce.stubs import pointer

__all__ = ["SvgPass", "is_svg", "svg_summary"]

_HEAD = 2_000
_PROLOG = re.compile(
    r"\s*(?:<\?xml[^>]{0,500}\?>\s*|<!--.{0,2000}?-->\s*|<!DOCTYPE[^>]{0,500}>\s*)*", re.S
)
_ROOT = re.compile(r"<svg\b([^>]{0,4000})>", re.I)
_ATTR = re.compile(r'\b(width|height|viewBox)\s*=\s*"([^"]{0,80})"', re.I)
_ELEMENT = re.compile(r"<([A-Za-z][\w:.-]{0,40})")
_TITLE = re.compile(r"<title\b[^>]{0,200}>([^<]{0,200})", re.I)
_TEXT = re.compile(r"<(?:text|tspan)\b[^>]{0,300}>([^<]{1,200})", re.I)
_MAX_LABELS = 20
_LABELS_CHARS = 300
_SCAN = 200_000
"""Title and labels are looked for in the first this many characters only."""


def is_svg(text: str) -> bool:
    """True when `text` is an SVG document (optional XML prolog, comments, doctype first)."""
    head = text[:_HEAD]
    prolog = _PROLOG.match(head)
    start = prolog.end() if prolog is not None else 0
    return head[start : start + 4].lower() == "<svg"


def svg_summary(text: str, ref: str | None) -> str:
    """The one-block summary of an SVG document naming `recall(ref=…)` of the markup."""
    parts = [f"[SVG image, {len(text):,} chars of markup"]
    root = _ROOT.search(text, 0, _HEAD + 4_000)
    if root is not None:
        attrs = [f'{k}="{v}"' for k, v in _ATTR.findall(root.group(1))]
        if attrs:
            parts.append(" ".join(attrs[:3]))
    counts = Counter(name.lower() for name in _ELEMENT.findall(text))
    if counts:
        top = ", ".join(f"{name} {n:,}" for name, n in counts.most_common(6))
        parts.append(f"{sum(counts.values()):,} elements ({top})")
    title = _TITLE.search(text, 0, _SCAN)
    if title is not None and title.group(1).strip():
        parts.append(f'title "{" ".join(title.group(1).split())}"')
    labels: list[str] = []
    size = 0
    for match in _TEXT.finditer(text, 0, _SCAN):
        label = " ".join(match.group(1).split())
        if not label:
            continue
        labels.append(f'"{label}"')
        size += len(label) + 4
        if len(labels) >= _MAX_LABELS or size >= _LABELS_CHARS:
            break
    if labels:
        parts.append("text " + ", ".join(labels))
    return "; ".join(parts) + f"; {pointer(ref, 'full markup')}]"


class SvgPass(ReductionPass):
    """An SVG document over the tool's size-gate limit: a summary instead of a text cut."""

    name = "svg"
    lossless = False
    scans = True

    def apply(self, text: str, ctx: PassContext) -> str | None:
        if len(text) <= ctx.profile.limit or not is_svg(text):
            return None
        return svg_summary(text, ctx.shown_ref)

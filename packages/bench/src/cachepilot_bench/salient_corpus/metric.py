"""The metric: which marked lines of an output a view of it shows."""

from __future__ import annotations

import re

from cachepilot_bench.salient_corpus.doc import Sample

__all__ = ["marked_in_view", "marked_share", "visible_line"]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_TAG = re.compile(r"<[^<>]{0,400}>")
_SPACES = re.compile(r"\s+")
_KEY_CHARS = 160  # a marked line counts as shown when its first 160 characters are


def visible_line(line: str) -> str:
    """What must appear of a marked line: its text without escapes and markup tags (a page
    may be shown as text), spaces collapsed, at most `_KEY_CHARS` characters (a preview may
    shorten a long line's end)."""
    text = _SPACES.sub(" ", _TAG.sub(" ", _ANSI.sub("", line))).strip()
    return text[:_KEY_CHARS]


def marked_in_view(view: str, sample: Sample) -> list[bool]:
    """For each marked line of `sample`, whether `view` shows it (spaces collapsed)."""
    flat = _SPACES.sub(" ", _TAG.sub(" ", view))
    return [visible_line(line) in flat for line in sample.marked]


def marked_share(view: str, sample: Sample) -> float:
    """The share of `sample`'s marked lines that `view` shows (1.0 when none are marked)."""
    found = marked_in_view(view, sample)
    return sum(found) / len(found) if found else 1.0

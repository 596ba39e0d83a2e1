"""A linear-time HTML tokenizer (start tags, end tags, text), after HTML5's tokenization rules.

The standard library's `html.parser` rescans the rest of the input for every construct that
is not closed (``<a b='`` repeated, ``<!--`` repeated): quadratic time on hostile tool
output. This scanner looks at every character a bounded number of times: each search that
fails consumes the input up to where it stopped, so no position is scanned twice.

Rules (a subset of HTML5 tokenization, enough for text extraction):

- ``<name attrs>`` and ``<name attrs/>`` are start tags (names and attribute names lowercased,
  attribute values unescaped, a value-less attribute gives None); ``</name ...>`` an end tag;
- comments, doctypes, ``<![CDATA[...]]>`` and ``<?...>`` are dropped;
- a construct left open at the end of the input is text (so nothing silently disappears);
- ``script`` and ``style`` contents are raw text up to their end tag;
- a ``<`` that starts nothing is text; character references are decoded in text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape

__all__ = ["EndTag", "StartTag", "Text", "Token", "scan_html"]

_RAW_TEXT = frozenset({"script", "style"})
_TAG_NAME = re.compile(r"[a-zA-Z][^\t\n\r\f />\x00]*")
_END_NAME = re.compile(r"[\t\n\r\f ]*([a-zA-Z][^\t\n\r\f />\x00]*)")
_SPACE = re.compile(r"[\t\n\r\f /]*")
_ATTR_NAME = re.compile(r"[^\t\n\r\f />=]+")
_ASSIGN = re.compile(r"[\t\n\r\f ]*=[\t\n\r\f ]*")
_UNQUOTED = re.compile(r"[^\t\n\r\f >]*")
_MAX_ATTRS = 64
"""Attributes kept per tag (the rest are parsed and dropped: a bounded dict per tag)."""


@dataclass(frozen=True, slots=True)
class StartTag:
    """``<name ...>``; `self_closing` for ``<name .../>``."""

    name: str
    attrs: list[tuple[str, str | None]]
    self_closing: bool


@dataclass(frozen=True, slots=True)
class EndTag:
    """``</name>``."""

    name: str


@dataclass(frozen=True, slots=True)
class Text:
    """Character data (references decoded; raw for script and style contents)."""

    data: str


Token = StartTag | EndTag | Text


def scan_html(html: str) -> Iterator[Token]:
    """The tokens of `html`, in order. Linear in ``len(html)``; never raises on bad markup."""
    n = len(html)
    pos = 0
    while pos < n:
        lt = html.find("<", pos)
        if lt < 0:
            yield Text(unescape(html[pos:]))
            return
        if lt > pos:
            yield Text(unescape(html[pos:lt]))
        pos, token = _markup(html, lt)
        if token is not None:
            yield token
            if isinstance(token, StartTag) and token.name in _RAW_TEXT and not token.self_closing:
                pos, raw = _raw_text(html, pos, token.name)
                if raw:
                    yield Text(raw)


def _markup(html: str, lt: int) -> tuple[int, Token | None]:
    """Read the construct starting with ``<`` at `lt`: (position after it, its token or None).

    A construct that does not close before the end of the input is text up to the end.
    """
    n = len(html)
    nxt = html[lt + 1 : lt + 2]
    if nxt.isascii() and nxt.isalpha():
        return _start_tag(html, lt)
    if nxt == "/":
        name = _END_NAME.match(html, lt + 2)
        if name is not None:  # `</name`, also `</ name` (as the standard library reads it)
            gt = html.find(">", name.end())
            if gt < 0:
                return n, _rest(html, lt)
            return gt + 1, EndTag(name.group(1).lower())
        if html.startswith(">", lt + 2):
            return lt + 3, None  # `</>`: nothing
        return _bogus(html, lt)
    if html.startswith("<!--", lt):
        if html.startswith(">", lt + 4):
            return lt + 5, None  # `<!-->`
        if html.startswith("->", lt + 4):
            return lt + 6, None  # `<!--->`
        end = html.find("-->", lt + 4)
        if end < 0:
            return n, _rest(html, lt)
        return end + 3, None
    if nxt in ("!", "?"):
        return _bogus(html, lt)
    return lt + 1, Text("<")


def _rest(html: str, lt: int) -> Text:
    """The input from `lt` to its end as text (a construct the input left open)."""
    return Text(unescape(html[lt:]))


def _bogus(html: str, lt: int) -> tuple[int, Token | None]:
    """A declaration, processing instruction or bogus comment: dropped up to its ``>``."""
    gt = html.find(">", lt + 2)
    if gt < 0:
        return len(html), _rest(html, lt)
    return gt + 1, None


def _start_tag(html: str, lt: int) -> tuple[int, Token | None]:
    n = len(html)
    name_match = _TAG_NAME.match(html, lt + 1)
    assert name_match is not None  # the first character is a letter
    name = name_match.group().lower()
    attrs: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    pos = name_match.end()
    while True:
        space = _SPACE.match(html, pos)
        assert space is not None  # `*`: always matches
        pos = space.end()
        if pos >= n:
            return n, _rest(html, lt)
        if html[pos] == ">":
            return pos + 1, StartTag(name, attrs, space.group().endswith("/"))
        attr = _ATTR_NAME.match(html, pos)
        if attr is None:  # `=` or a stray character starting a name: take one character
            key, pos = html[pos], pos + 1
        else:
            key, pos = attr.group(), attr.end()
        value: str | None = None
        assign = _ASSIGN.match(html, pos)
        if assign is not None and assign.end() < n:
            pos = assign.end()
            quote = html[pos]
            if quote in ("'", '"'):
                close = html.find(quote, pos + 1)
                if close < 0:
                    return n, _rest(html, lt)
                value, pos = html[pos + 1 : close], close + 1
            else:
                bare = _UNQUOTED.match(html, pos)
                assert bare is not None  # `*`: always matches
                value, pos = bare.group(), bare.end()
            value = unescape(value)
        elif assign is not None:
            return n, _rest(html, lt)
        key = key.lower()
        if key not in seen and len(attrs) < _MAX_ATTRS:  # the first of a repeated name wins
            seen.add(key)
            attrs.append((key, value))


def _raw_text(html: str, pos: int, name: str) -> tuple[int, str]:
    """The raw contents of a script or style element starting at `pos`, up to its end tag
    (left in the input for the caller to read). Unclosed: everything to the end."""
    end = re.compile(rf"</{name}(?=[\t\n\r\f />]|$)", re.IGNORECASE).search(html, pos)
    if end is None:
        return len(html), html[pos:]
    return end.start(), html[pos : end.start()]

"""HTML slimming: text, structure and links only.

Linear in the input whatever the markup (`html_scan` tokenizes in one pass; the converter
keeps what it needs about its output's end instead of re-reading it), with list indentation
capped at `MAX_LIST_DEPTH` levels so the output stays proportional to the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cachepilot.reduce.passes.base import PassContext, ReductionPass
from cachepilot.reduce.passes.html_scan import EndTag, StartTag, scan_html

__all__ = ["MAX_LIST_DEPTH", "HtmlPass", "html_to_text", "looks_like_html"]

MAX_LIST_DEPTH = 8
"""Nested lists deeper than this are indented like this level (output stays linear)."""
_SNIFF = 4_096
_SKIP = frozenset(
    {"script", "style", "svg", "noscript", "template", "iframe", "object", "canvas", "math"}
)
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "dd", "details", "dialog", "div",
        "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup",
        "main", "nav", "ol", "p", "section", "summary", "table", "tbody", "thead", "tfoot", "ul",
        "caption",
    }
)  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_SPACES = re.compile(r"\s+")
_BLANK_RUNS = re.compile(r"\n{3,}")


def looks_like_html(text: str) -> bool:
    """True when the text starts like an HTML document (doctype, `<html>`, or a head/body)."""
    head = text[:_SNIFF].lstrip("\ufeff \t\r\n").lower()
    if head.startswith("<?xml"):
        return "<html" in head
    if head.startswith(("<!doctype html", "<html")):
        return True
    return head.startswith("<") and ("<body" in head or "<head" in head) and "</" in text


@dataclass(slots=True)
class _End:
    """What the converter knows about the end of its output so far."""

    newlines: int = 0
    """Trailing newline characters."""
    text: bool = False
    """Something other than newlines was written."""
    last: str = "\n"
    """The last character written (a newline before anything was)."""

    def add(self, piece: str) -> None:
        if not piece:
            return
        body = piece.rstrip("\n")
        if body:
            self.text = True
            self.newlines = len(piece) - len(body)
        else:
            self.newlines += len(piece)
        self.last = piece[-1]


class _Converter:
    """Renders HTML as markdown-ish text (headings, lists, links, tables, pre blocks)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.title: list[str] = []
        self._skip: list[str] = []
        self._pre = 0
        self._in_title = False
        self._in_head = False
        self._lists: list[str] = []
        self._links: list[tuple[int, str | None, _End]] = []
        self._end = _End()

    def feed(self, html: str) -> None:
        """Convert a whole document."""
        for token in scan_html(html):
            if isinstance(token, StartTag):
                if token.self_closing:
                    self.handle_startendtag(token.name, token.attrs)
                else:
                    self.handle_starttag(token.name, token.attrs)
            elif isinstance(token, EndTag):
                self.handle_endtag(token.name)
            else:
                self.handle_data(token.data)

    # -- output helpers --------------------------------------------------------------------
    def _newlines(self, count: int) -> None:
        end = self._end
        if not end.text:
            return  # nothing written yet: no leading blank lines
        if end.newlines < count:
            self._emit("\n" * (count - end.newlines))

    def _emit(self, text: str) -> None:
        if text:
            self.pieces.append(text)
            self._end.add(text)

    # -- parser callbacks ------------------------------------------------------------------
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skip:
            if tag == self._skip[-1] or tag in _SKIP:
                self._skip.append(tag)
            return
        if tag in _SKIP:
            self._skip.append(tag)
            return
        attr = dict(attrs)
        if tag == "head":
            self._in_head = True
        elif tag == "title":
            self._in_title = True
        elif tag in _HEADINGS:
            self._newlines(2)
            self._emit("#" * _HEADINGS[tag] + " ")
        elif tag == "br":
            self._emit("\n")
        elif tag == "hr":
            self._newlines(1)
            self._emit("---\n")
        elif tag in {"ul", "ol"}:
            self._lists.append(tag)
            self._newlines(1)
        elif tag == "li":
            self._newlines(1)
            depth = min(len(self._lists), MAX_LIST_DEPTH)
            self._emit("  " * max(0, depth - 1) + "- ")
        elif tag == "tr":
            self._newlines(1)
            self._emit("|")
        elif tag in {"td", "th"}:
            self._emit(" ")
        elif tag == "pre":
            self._newlines(1)
            self._emit("```\n")
            self._pre += 1
        elif tag == "a":
            if self._links:  # `<a>` cannot nest: a new one closes the open one (as browsers do)
                self._close_link()
            snapshot = _End(self._end.newlines, self._end.text, self._end.last)
            self._links.append((len(self.pieces), attr.get("href"), snapshot))
            self._emit("[")
        elif tag == "img":
            self._image(attr)
        elif tag == "p":
            self._newlines(2)
        elif tag in _BLOCK:
            self._newlines(1)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            return
        self.handle_starttag(tag, attrs)
        if tag not in {"br", "hr", "img"}:
            self.handle_endtag(tag)

    def _image(self, attr: dict[str, str | None]) -> None:
        alt = _SPACES.sub(" ", attr.get("alt") or "").strip()
        src = (attr.get("src") or "").strip()
        if src.startswith("data:"):
            src = ""
        if src:
            self._emit(f"![{alt}]({src})")
        elif alt:
            self._emit(f"![{alt}]")

    def handle_endtag(self, tag: str) -> None:
        if self._skip:
            if tag == self._skip[-1]:
                self._skip.pop()
            elif tag in self._skip:
                while self._skip and self._skip.pop() != tag:
                    pass
            return
        if tag == "head":
            self._in_head = False
        elif tag == "title":
            self._in_title = False
        elif tag in _HEADINGS or tag == "p":
            self._newlines(2)
        elif tag in {"ul", "ol"}:
            if self._lists:
                self._lists.pop()
            self._newlines(1)
        elif tag in {"td", "th"}:
            self._emit(" |")
        elif tag == "pre":
            if self._pre:
                self._pre -= 1
            self._newlines(1)
            self._emit("```\n")
        elif tag == "a":
            self._close_link()
        elif tag in _BLOCK or tag in {"li", "tr"}:
            self._newlines(1)

    def _close_link(self) -> None:
        if not self._links:
            return
        index, href, before = self._links.pop()
        text = "".join(self.pieces[index + 1 :]).strip()
        usable = href and not href.startswith(("javascript:", "#", "data:"))
        if usable and text:
            self._emit(f"]({href})")
        else:
            self.pieces[index] = ""
            # The end of the output as if "[" had never been written (links do not nest, so
            # each piece is replayed at most once).
            for piece in self.pieces[index + 1 :]:
                before.add(piece)
            self._end = before

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title.append(data)
            return
        if self._in_head:
            return
        if self._pre:
            self._emit(data)
            return
        text = _SPACES.sub(" ", data)
        if text == " " or (text.startswith(" ") and self._end.last in ("\n", " ", "[")):
            text = text.lstrip(" ")
        self._emit(text)

    def render(self) -> str:
        while self._links:
            self._close_link()
        body = "".join(self.pieces)
        lines = [line.rstrip() for line in body.split("\n")]
        text = _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip("\n")
        title = _SPACES.sub(" ", "".join(self.title)).strip()
        if title:
            text = f"Title: {title}\n\n{text}" if text else f"Title: {title}"
        return text


def html_to_text(html: str) -> str:
    """Convert an HTML document to compact markdown-ish text."""
    converter = _Converter()
    converter.feed(html)
    return converter.render()


class HtmlPass(ReductionPass):
    """Slim an HTML page: drop scripts, styles, SVG, comments, head metadata and attributes
    (except `href`, `src`, `alt`), keep headings, lists, tables, links as plain text."""

    name = "html"
    lossless = False

    def apply(self, text: str, ctx: PassContext) -> str | None:
        if not looks_like_html(text):
            return None
        out = html_to_text(text)
        return out if out and len(out) < len(text) else None

"""HTML slimming with the standard library's HTML parser: text, structure and links only."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from cachepilot.reduce.passes.base import PassContext, ReductionPass

__all__ = ["HtmlPass", "html_to_text", "looks_like_html"]

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


class _Converter(HTMLParser):
    """Renders HTML as markdown-ish text (headings, lists, links, tables, pre blocks)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pieces: list[str] = []
        self.title: list[str] = []
        self._skip: list[str] = []
        self._pre = 0
        self._in_title = False
        self._in_head = False
        self._lists: list[str] = []
        self._links: list[tuple[int, str | None]] = []

    # -- output helpers --------------------------------------------------------------------
    def _tail(self) -> str:
        for piece in reversed(self.pieces):
            if piece:
                return piece
        return "\n"

    def _newlines(self, count: int) -> None:
        have = 0
        for piece in reversed(self.pieces):
            stripped = piece.rstrip("\n")
            have += len(piece) - len(stripped)
            if stripped:
                break
        else:
            return  # nothing written yet: no leading blank lines
        if have < count:
            self.pieces.append("\n" * (count - have))

    def _emit(self, text: str) -> None:
        if text:
            self.pieces.append(text)

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
            self._emit("  " * max(0, len(self._lists) - 1) + "- ")
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
            self._links.append((len(self.pieces), attr.get("href")))
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
        index, href = self._links.pop()
        text = "".join(self.pieces[index + 1 :]).strip()
        usable = href and not href.startswith(("javascript:", "#", "data:"))
        if usable and text:
            self._emit(f"]({href})")
        else:
            self.pieces[index] = ""

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
        if text == " " or (text.startswith(" ") and self._tail().endswith(("\n", " ", "[", "- "))):
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
    converter.close()
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

"""Text carried inside JSON, read as text: string values laid out as the lines they hold.

A tool that wraps its log in JSON (`{"returncode": 0, "output": "…174 KB…"}`) hands over one
physical line: a reducer would see one line, a grep would match "line 1 of 1" and return its
first characters. `decoded_text` lays such a string out as its own lines: inside every long
JSON string literal that holds line breaks, the escapes are decoded in place (`\\n` becomes a
line break, `\\"` a quote, `\\u00e9` an `é`), everything else stays byte for byte. Applied to a
JSON document, to JSON lines, or to JSON lines inside other text (a line that parses as JSON
on its own). The size gate's preview and `recall(lines=…, grep=…)` number the lines of this
text, so the line numbers one shows are the ones the other fetches.

Linear in the text: one regular-expression scan per JSON line, each literal decoded once by the
standard library's scanner. Escapes are decoded whole, so no cut of the decoded text can split
one; a string that is not valid JSON (a lone surrogate) is kept as written.
"""

from __future__ import annotations

import json
import re
from typing import Final

__all__ = ["DECODE_MAX_CHARS", "DECODE_MIN_CHARS", "decoded_text"]

DECODE_MAX_CHARS: Final = 8_000_000
"""Texts longer than this are not decoded (they are read as they are)."""

DECODE_MIN_CHARS: Final = 200
"""Shortest string literal (as written, quotes included) that is laid out as lines."""

_MIN_BREAKS = 2  # a literal with fewer escaped line breaks is not a text of lines

# A JSON string literal: a quote, then non-special characters or escapes, then a quote.
# Linear: the alternatives never overlap.
_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_JSON_START = re.compile(r"\s*[\[{]")
_NEWLINE = re.compile(r"\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def decoded_text(text: str) -> str | None:
    """`text` with its long JSON strings laid out as lines, or None when it holds none.

    Only JSON is decoded: the whole text when it parses as JSON, else each line that parses
    as JSON on its own (JSON lines, or a JSON document printed inside other output). A string
    literal is laid out when it is at least `DECODE_MIN_CHARS` long and holds at least two
    escaped line breaks. Deterministic: the same text always gives the same result.
    """
    if not text or len(text) > DECODE_MAX_CHARS or "\\n" not in text:
        return None
    if _JSON_START.match(text) and _is_json(text):
        return _decode_literals(text)
    parts: list[str] = []
    changed = False
    position = 0
    for match in _NEWLINE.finditer(text + "\n"):
        line = text[position : match.start()]
        position = match.end()
        decoded = None
        if (
            len(line) >= DECODE_MIN_CHARS
            and "\\n" in line
            and _JSON_START.match(line)
            and _is_json(line)
        ):
            decoded = _decode_literals(line)
        if decoded is not None:
            changed = True
            parts.append(decoded)
        else:
            parts.append(line)
    if not changed:
        return None
    return "\n".join(parts)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _decode_literals(text: str) -> str | None:
    """`text` (valid JSON) with its long multi-line string literals decoded in place."""
    parts: list[str] = []
    position = 0
    changed = False
    for match in _LITERAL.finditer(text):
        literal = match.group()
        if len(literal) < DECODE_MIN_CHARS or literal.count("\\n") < _MIN_BREAKS:
            continue
        try:
            value = json.loads(literal)
        except ValueError:
            continue
        if not isinstance(value, str) or _SURROGATE.search(value) is not None:
            continue  # a lone surrogate escape would not survive encoding: keep it as written
        parts.append(text[position : match.start() + 1])
        parts.append(value)
        parts.append('"')
        position = match.end()
        changed = True
    if not changed:
        return None
    parts.append(text[position:])
    return "".join(parts)

"""Terminal cleanup: escape sequences, carriage-return progress, whitespace."""

from __future__ import annotations

import re

from cachepilot.reduce.passes.base import PassContext, ReductionPass

__all__ = ["AnsiPass", "ProgressPass", "WhitespacePass", "collapse_progress", "strip_ansi"]

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase line
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks (BEL or ST terminated)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # other escapes: charset selection, keypad modes, save cursor
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|\x07"  # bell
)


def strip_ansi(text: str) -> str:
    """`text` without ANSI/VT escape sequences and bells."""
    if "\x1b" not in text and "\x9b" not in text and "\x07" not in text:
        return text
    return _ANSI.sub("", text)


def collapse_progress(text: str) -> str:
    """Keep the last state of each carriage-return-overwritten line (CRLF endings are kept)."""
    if "\r" not in text:
        return text
    lines = text.split("\n")
    out: list[str] = []
    changed = False
    for line in lines:
        body = line.rstrip("\r")  # a CRLF ending is not an overwrite (whitespace handles it)
        if "\r" in body:
            segments = [s for s in body.split("\r") if s]
            out.append(segments[-1] if segments else "")
            changed = True
        else:
            out.append(line)
    if not changed:
        return text
    return "\n".join(out)


class AnsiPass(ReductionPass):
    """Remove ANSI escape sequences (colours, cursor control): formatting only, no content."""

    name = "ansi"
    lossless = True

    def apply(self, text: str, ctx: PassContext) -> str | None:
        out = strip_ansi(text)
        return None if out == text else out


class ProgressPass(ReductionPass):
    """Collapse `\\r`-overwritten progress lines to their last state.

    Lossy: the intermediate states are dropped (a terminal would not show them either).
    """

    name = "progress"
    lossless = False

    def apply(self, text: str, ctx: PassContext) -> str | None:
        out = collapse_progress(text)
        return None if out == text else out


class WhitespacePass(ReductionPass):
    """Strip trailing whitespace, collapse blank-line runs to one, trim blank edges."""

    name = "whitespace"
    lossless = True

    def apply(self, text: str, ctx: PassContext) -> str | None:
        out: list[str] = []
        blank = False
        for raw in text.split("\n"):
            line = raw.rstrip()
            if not line:
                if blank or not out:
                    continue
                blank = True
            else:
                blank = False
            out.append(line)
        while out and not out[-1]:
            out.pop()
        result = "\n".join(out)
        if result and text.endswith("\n"):
            # Keep one final newline: dropping it alone would make nearly every shell output
            # "changed" and archived for no saving.
            result += "\n"
        return None if result == text else result

"""`RecallResult`: what a recall returned, and how it is shown to the model (headers,
continuation hints, echoes of the model's arguments clipped)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

from cachepilot.refs import REF_LENGTH, is_ref

__all__ = [
    "DEFAULT_MAX_CHARS",
    "ECHO_CHARS",
    "RECALL_TOOL_NAME",
    "RecallResult",
    "clip_echo",
    "displayable",
    "join_notes",
    "quote",
]


RECALL_TOOL_NAME: Final = "recall"

DEFAULT_MAX_CHARS: Final = 20_000

ECHO_CHARS = 80  # what a header or message quotes of a model's pattern or range at most

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class RecallResult:
    """What a recall returned, and how to show it to the model (`render`).

    Attributes:
        ref: The ref as normalized (or as given, when malformed).
        found: The artifact exists in this thread.
        content: The exact slice of the original text (for grep: the numbered matching lines).
            For a binary artifact the text is the bytes decoded with ``surrogateescape``.
        start_line: First line covered (1-based; 0 when there are no lines).
        end_line: Last line covered (possibly only partly, when `truncated`).
        total_lines: Lines in the original (``str.splitlines`` semantics).
        total_chars: Characters in the original.
        truncated: More of the requested range remains; see `next_lines`.
        next_lines: The ``lines`` argument that continues where this result stopped.
        start_col: 1-based character in `start_line` where the content starts.
        grep: The pattern, when the recall filtered lines.
        matches: Matching lines in the requested range (grep only).
        shown_matches: Matching lines included in `content` (grep only).
        range_end: Last line of the requested range (grep only; `end_line` is the last scanned).
        max_chars: The cap applied.
        is_text: The original payload was text.
        media_type: The artifact's media type.
        size: The artifact's size in bytes.
        sha256: The artifact's full sha256 hex digest.
        tool: The tool that produced it, when recorded.
        message: A note for the model (regex fallback, capped max_chars); when not `found`,
            why the archive could not be read.
        error: Why the request could not be served (malformed or out-of-range lines).
        printable: The content reads as text (False for binary data such as images).
        recent: Up to 5 recent refs of the thread with their tool names (when not found).
        removed: Why the archive no longer holds a ref it held (its retention period or its
            size limit), when the store remembers (when not found).
    """

    ref: str
    found: bool
    content: str = ""
    start_line: int = 0
    end_line: int = 0
    total_lines: int = 0
    total_chars: int = 0
    truncated: bool = False
    next_lines: str | None = None
    start_col: int = 1
    grep: str | None = None
    matches: int | None = None
    shown_matches: int | None = None
    range_end: int = 0
    max_chars: int = DEFAULT_MAX_CHARS
    is_text: bool = True
    media_type: str = ""
    size: int = 0
    sha256: str = ""
    tool: str | None = None
    message: str | None = None
    error: str | None = None
    printable: bool = True
    recent: tuple[tuple[str, str | None], ...] = ()
    removed: str | None = None

    def continuation(self) -> str | None:
        """The recall call that continues this result, as the model should write it."""
        if not self.truncated or self.next_lines is None:
            return None
        args = [f"ref={quote(self.ref)}", f"lines={quote(self.next_lines)}"]
        if self.grep is not None:
            args.append(f"grep={quote(self.grep)}")
        if self.max_chars != DEFAULT_MAX_CHARS:
            args.append(f"max_chars={self.max_chars}")
        return f"{RECALL_TOOL_NAME}({', '.join(args)})"

    def render(self) -> str:
        """The model-facing text: a header line, the content, and a continuation hint."""
        if not self.found:
            return self._render_not_found()
        parts = [f"[recall {self.ref}"]
        if not self.is_text:
            parts.append(
                f"binary {self.size:,} bytes · {self.media_type} · sha256 {self.sha256[:16]}"
            )
        if self.error is not None:
            parts.append(f"{self.total_lines:,} lines · {self.total_chars:,} chars]")
            return " · ".join(parts) + "\n" + self.error
        if not self.printable:
            parts.append("not text]")
            return " · ".join(parts) + "\nThis artifact is binary data and cannot be shown as text."
        if self.total_chars == 0:
            parts.append("empty output (0 chars)]")
            return " · ".join(parts)
        span = self._span()
        if self.grep is not None:
            start = span.split("-", 1)[0]
            parts.append(
                f"grep {quote(clip_echo(self.grep))} · {self.matches:,} matching lines "
                f"in lines {start}-{self.range_end} of {self.total_lines:,}"
            )
            if self.truncated:
                parts.append(f"showing {self.shown_matches:,} (up to line {self.end_line})")
        else:
            parts.append(f"lines {span} of {self.total_lines:,}")
        parts.append(f"{self.total_chars:,} chars")
        header = " · ".join(parts) + "]"
        if not self.is_text:
            header += " (shown as UTF-8, invalid bytes replaced)"
        out = [header]
        if self.message is not None:
            out.append(self.message)
        body = displayable(self.content)
        if body:
            out.append(body[:-1] if body.endswith("\n") else body)
        elif self.grep is not None:
            out.append("No lines match.")
        hint = self.continuation()
        if hint is not None:
            out.append(f"[continues: {hint}]")
        return "\n".join(out)

    def _span(self) -> str:
        start = (
            f"{self.start_line}" if self.start_col == 1 else f"{self.start_line}:{self.start_col}"
        )
        return f"{start}-{self.end_line}"

    def _render_not_found(self) -> str:
        if self.message is not None:  # the store failed: say so, not "not found"
            return f"[recall {self.ref}: the archive is unavailable]\n{self.message}"
        if self.removed is not None:
            return (
                f"[recall: ref {quote(self.ref)} was removed from this conversation's archive "
                f"by its {self.removed}]\nThe original is no longer available. Run the tool "
                "again if its output is still needed."
            )
        if is_ref(self.ref):
            head = f"[recall: ref {quote(self.ref)} was not found in this conversation]"
        else:
            head = f"[recall: {quote(self.ref)} is not a valid ref]"
        lines = [head]
        lines.append(
            f"Refs are {REF_LENGTH} hex characters, shown in shortened tool outputs "
            f'(e.g. recall(ref="<ref>")); refs from other conversations are not available.'
        )
        if self.recent:
            lines.append("Recent refs in this conversation:")
            lines.extend(f"- {ref}" + (f" ({tool})" if tool else "") for ref, tool in self.recent)
        else:
            lines.append("No tool outputs have been archived in this conversation.")
        return "\n".join(lines)


def quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def clip_echo(value: str) -> str:
    """At most `ECHO_CHARS` characters of a model's argument, for headers and messages."""
    return value if len(value) <= ECHO_CHARS else value[: ECHO_CHARS - 1] + "…"


def displayable(text: str) -> str:
    """`text` safe to send (surrogates, i.e. undecodable bytes, become U+FFFD)."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def join_notes(first: str | None, second: str | None) -> str | None:
    if first is None:
        return second
    if second is None:
        return first
    return f"{first} {second}"

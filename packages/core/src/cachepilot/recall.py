"""The recall tool, framework-neutral: fetch an archived original, or a slice of it.

`recall` never raises on model input: an unknown ref, a malformed line range or an invalid regex
become a helpful message in `RecallResult.render()`. Slices are exact substrings of the original
(recalled content is never reduced again, only capped by `max_chars`), so following the
continuation hints reconstructs the original exactly.

Every argument comes from the model and is bounded: a grep pattern is at most
`MAX_GREP_CHARS` characters, its matching runs with the `regex` engine under a total budget of
`GREP_TIME_LIMIT` seconds per recall with the interpreter lock released (a catastrophic pattern
such as ``(a|aa)+$`` falls back to a literal search and says so, other threads and the event
loop keep running), and what the header echoes of a pattern or range is clipped.
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import regex

from cachepilot.artifacts.base import Artifact, ArtifactInfo, ArtifactStore, check_thread
from cachepilot.refs import REF_LENGTH, is_ref, validate_ref

__all__ = [
    "DEFAULT_MAX_CHARS",
    "GREP_TIME_LIMIT",
    "MAX_GREP_CHARS",
    "RECALL_TOOL_DESCRIPTION",
    "RECALL_TOOL_NAME",
    "RECALL_TOOL_PARAMETERS",
    "RECALL_TOOL_SCHEMA",
    "RecallResult",
    "arecall",
    "recall",
]

logger = logging.getLogger(__name__)

RECALL_TOOL_NAME: Final = "recall"
DEFAULT_MAX_CHARS: Final = 20_000
MAX_GREP_CHARS: Final = 500
"""Longest grep pattern accepted (a longer one is refused with a message)."""
GREP_TIME_LIMIT: Final = 1.0
"""Seconds of regular-expression matching one recall may spend; then the pattern is searched
for as literal text instead (linear time)."""

# Sent with every request: kept short (about 120 tokens) and byte-stable.
RECALL_TOOL_DESCRIPTION: Final = (
    'Get the full original of a shortened tool output by the ref it shows (recall(ref="...")). '
    "Long results end with a hint: call again with those arguments to read on."
)

RECALL_TOOL_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "ref": {"type": "string", "description": "12 hex characters"},
        "lines": {"type": "string", "description": 'Optional 1-based range, e.g. "120-180"'},
        "grep": {"type": "string", "description": "Optional regex: only matching lines"},
        "max_chars": {"type": "integer", "default": DEFAULT_MAX_CHARS, "minimum": 1},
    },
    "required": ["ref"],
    "additionalProperties": False,
}

RECALL_TOOL_SCHEMA: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL_NAME,
        "description": RECALL_TOOL_DESCRIPTION,
        "parameters": RECALL_TOOL_PARAMETERS,
    },
}
"""OpenAI function-tool schema (Chat Completions shape). Part of the cached prefix: never
mutate it; copy (`json.loads(json.dumps(...))`) before changing anything."""

_RECENT_REFS = 5
_OFFLOAD_BYTES = 1 << 20  # arecall slices artifacts larger than this in a worker thread
_TEXT_SAMPLE_CHARS = 1 << 20
_NOT_TEXT_RATIO = 0.05
_SPEC = re.compile(
    r"^\s*(?:(?P<start>\d+)\s*(?::\s*(?P<col>\d+))?)?\s*"
    r"(?:(?P<sep>-|–|—|\.\.)\s*(?P<end>\d+)?)?\s*$"
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_NON_TEXT = re.compile("[\x00-\x08\x0e-\x1a\x7f\udc80-\udcff]")  # ESC is fine: ANSI logs
_MATCH_LIMIT_NOTE = 200
_MAX_EXPANSION = 10_000  # `regex` unrolls counted repeats when compiling: a{4294967294} is GBs
_REPEAT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_ECHO_CHARS = 80  # what a header or message quotes of a model's pattern or range at most
_MAX_SPEC_CHARS = 64  # a longer line range is not a range (and int() of it is not cheap)


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
        args = [f"ref={_quote(self.ref)}", f"lines={_quote(self.next_lines)}"]
        if self.grep is not None:
            args.append(f"grep={_quote(self.grep)}")
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
                f"grep {_quote(_clip(self.grep))} · {self.matches:,} matching lines "
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
        body = _displayable(self.content)
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
                f"[recall: ref {_quote(self.ref)} was removed from this conversation's archive "
                f"by its {self.removed}]\nThe original is no longer available. Run the tool "
                "again if its output is still needed."
            )
        if is_ref(self.ref):
            head = f"[recall: ref {_quote(self.ref)} was not found in this conversation]"
        else:
            head = f"[recall: {_quote(self.ref)} is not a valid ref]"
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


def recall(  # noqa: PLR0917 - mirrors the tool's arguments
    store: ArtifactStore,
    thread: str,
    ref: object,
    lines: object = None,
    grep: object = None,
    max_chars: object = DEFAULT_MAX_CHARS,
    *,
    on_access: Callable[[Artifact], object] | None = None,
    max_chars_cap: int | None = None,
) -> RecallResult:
    """Fetch an archived original (or a slice of it) from `store`.

    Model-supplied arguments are taken leniently and never raise: problems become a message in
    the result. A successful lookup counts an access (`store.record_access`) and calls
    `on_access(artifact)`.

    Args:
        store: The artifact store.
        thread: The conversation the call belongs to (refs of other threads are not found).
        ref: The ref the model passed.
        lines: Line range, e.g. "120-180", "120-", "-50", "42", or a continuation "7:20001-9".
        grep: Regular expression selecting lines (a literal substring when it does not compile).
        max_chars: Characters to return at most (a positive int; default 20,000).
        on_access: Called with the artifact after a successful lookup (feeds the recall gate).
        max_chars_cap: Upper bound the caller imposes on the model's `max_chars`.

    Raises:
        ValueError: for an empty or non-str thread id (misuse by the caller, not the model).
    """
    check_thread(thread)
    key, shown_ref = _normalize(ref)
    if key is None:
        return _not_found(shown_ref, _recent(_safe_list(store, thread)))
    try:
        artifact = store.get(thread, key)
    except Exception as exc:
        logger.warning("recall %s: the artifact store failed: %r", key, exc, exc_info=True)
        return _store_failed(key, exc)
    if artifact is None:
        removed = _removed(store, thread, key)
        if removed is not None:
            return RecallResult(ref=key, found=False, removed=removed)
        return _not_found(key, _recent(_safe_list(store, thread)))
    try:
        store.record_access(thread, key)
    except Exception as exc:
        logger.warning("recall %s: could not record the access: %r", key, exc)
    _notify(on_access, artifact)
    return _slice(artifact, lines, grep, max_chars, max_chars_cap)


async def arecall(  # noqa: PLR0917 - mirrors the tool's arguments
    store: ArtifactStore,
    thread: str,
    ref: object,
    lines: object = None,
    grep: object = None,
    max_chars: object = DEFAULT_MAX_CHARS,
    *,
    on_access: Callable[[Artifact], object] | None = None,
    max_chars_cap: int | None = None,
) -> RecallResult:
    """Async twin of `recall` (`on_access` may be a coroutine function)."""
    check_thread(thread)
    key, shown_ref = _normalize(ref)
    if key is None:
        return _not_found(shown_ref, _recent(await _asafe_list(store, thread)))
    try:
        artifact = await store.aget(thread, key)
    except Exception as exc:
        logger.warning("recall %s: the artifact store failed: %r", key, exc, exc_info=True)
        return _store_failed(key, exc)
    if artifact is None:
        removed = await _aremoved(store, thread, key)
        if removed is not None:
            return RecallResult(ref=key, found=False, removed=removed)
        return _not_found(key, _recent(await _asafe_list(store, thread)))
    try:
        await store.arecord_access(thread, key)
    except Exception as exc:
        logger.warning("recall %s: could not record the access: %r", key, exc)
    outcome = _notify(on_access, artifact)
    if inspect.isawaitable(outcome):
        try:
            await outcome
        except Exception:
            logger.exception("recall %s: on_access callback failed", key)
    if artifact.size > _OFFLOAD_BYTES or (grep is not None and grep != ""):
        # A grep may run up to GREP_TIME_LIMIT: never on the event loop.
        return await asyncio.to_thread(_slice, artifact, lines, grep, max_chars, max_chars_cap)
    return _slice(artifact, lines, grep, max_chars, max_chars_cap)


# --- lookup helpers ----------------------------------------------------------------------------


def _normalize(ref: object) -> tuple[str | None, str]:
    try:
        key = validate_ref(ref)
    except ValueError:
        shown = ref if isinstance(ref, str) else repr(ref)
        return None, shown[:80]
    return key, key


def _notify(on_access: Callable[[Artifact], object] | None, artifact: Artifact) -> object:
    if on_access is None:
        return None
    try:
        return on_access(artifact)
    except Exception:
        logger.exception("recall %s: on_access callback failed", artifact.ref)
        return None


def _removed(store: ArtifactStore, thread: str, ref: str) -> str | None:
    """Why the store no longer holds `ref` (stores without the `removed` method: None)."""
    method = getattr(store, "removed", None)
    if not callable(method):
        return None
    try:
        reason = method(thread, ref)
    except Exception as exc:
        logger.warning("recall: could not ask why %s is gone: %r", ref, exc)
        return None
    return reason if isinstance(reason, str) else None


async def _aremoved(store: ArtifactStore, thread: str, ref: str) -> str | None:
    method = getattr(store, "aremoved", None)
    if not callable(method):
        return None
    try:
        reason = await method(thread, ref)
    except Exception as exc:
        logger.warning("recall: could not ask why %s is gone: %r", ref, exc)
        return None
    return reason if isinstance(reason, str) else None


def _safe_list(store: ArtifactStore, thread: str) -> list[ArtifactInfo]:
    try:
        return store.list(thread)
    except Exception as exc:
        logger.warning("recall: could not list artifacts: %r", exc)
        return []


async def _asafe_list(store: ArtifactStore, thread: str) -> list[ArtifactInfo]:
    try:
        return await store.alist(thread)
    except Exception as exc:
        logger.warning("recall: could not list artifacts: %r", exc)
        return []


def _recent(infos: Sequence[ArtifactInfo]) -> tuple[tuple[str, str | None], ...]:
    ordered = sorted(infos, key=lambda info: info.created_at)  # stable: keeps store order
    return tuple((info.ref, info.tool) for info in reversed(ordered[-_RECENT_REFS:]))


def _not_found(ref: str, recent: tuple[tuple[str, str | None], ...]) -> RecallResult:
    return RecallResult(ref=ref, found=False, recent=recent)


def _store_failed(ref: str, exc: Exception) -> RecallResult:
    return RecallResult(
        ref=ref,
        found=False,
        message=f"The archive could not be read just now ({type(exc).__name__}); try again.",
    )


# --- slicing -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Range:
    start: int
    col: int
    end: int


def _slice(
    artifact: Artifact,
    lines: object,
    grep: object,
    max_chars: object,
    max_chars_cap: int | None,
) -> RecallResult:
    text = artifact.text
    starts = _line_starts(text)
    total_lines = len(starts) - 1
    budget, budget_note = _budget(max_chars, max_chars_cap)
    base = RecallResult(
        ref=artifact.ref,
        found=True,
        total_lines=total_lines,
        total_chars=len(text),
        max_chars=budget,
        is_text=artifact.is_text,
        media_type=artifact.media_type,
        size=artifact.size,
        sha256=artifact.sha256,
        tool=artifact.tool,
        message=budget_note,
        printable=artifact.is_text or _looks_like_text(text),
    )
    rng = _parse_range(lines, starts)
    if isinstance(rng, str):
        return replace(base, error=rng)
    matcher: _Matcher | None = None
    pattern_text: str | None = None
    if grep is not None and grep != "":
        pattern_text = grep if isinstance(grep, str) else str(grep)
        if len(pattern_text) > MAX_GREP_CHARS:
            return replace(
                base,
                error=(
                    f"The grep pattern has {len(pattern_text):,} characters; at most "
                    f"{MAX_GREP_CHARS} are accepted. Use a shorter pattern, or lines=... ."
                ),
            )
        matcher = _compile(pattern_text)
        if matcher.note is not None:
            base = replace(base, message=_join_notes(base.message, matcher.note))
    if total_lines == 0:
        return replace(base, grep=pattern_text, matches=0 if matcher is not None else None)
    if matcher is not None and pattern_text is not None:
        return _grep(base, text, starts, rng, matcher, pattern_text, budget)
    return _lines(base, text, starts, rng, budget)


def _lines(
    base: RecallResult, text: str, starts: list[int], rng: _Range, budget: int
) -> RecallResult:
    begin = starts[rng.start - 1] + rng.col - 1
    stop = starts[rng.end]
    if stop - begin <= budget:
        return replace(
            base,
            content=text[begin:stop],
            start_line=rng.start,
            start_col=rng.col,
            end_line=rng.end,
        )
    limit = begin + budget
    k = bisect.bisect_right(starts, limit) - 1  # the last line boundary within the budget
    if k >= rng.start and starts[k] > begin:
        cut, next_start, next_col, last = starts[k], k + 1, 1, k
    else:  # the first line alone exceeds the budget: cut inside it
        cut, next_start, last = limit, rng.start, rng.start
        next_col = cut - starts[rng.start - 1] + 1
    nxt = f"{next_start}-{rng.end}" if next_col == 1 else f"{next_start}:{next_col}-{rng.end}"
    return replace(
        base,
        content=text[begin:cut],
        start_line=rng.start,
        start_col=rng.col,
        end_line=last,
        truncated=True,
        next_lines=nxt,
    )


def _grep(  # noqa: PLR0917 - private helper, called in one place
    base: RecallResult,
    text: str,
    starts: list[int],
    rng: _Range,
    matcher: _Matcher,
    pattern_text: str,
    budget: int,
) -> RecallResult:
    hits = _matching_lines(text, starts, rng, matcher)
    if hits is None:  # the regex ran out of time: search for the pattern as literal text
        matcher = _Matcher(
            None,
            pattern_text,
            f"grep {_quote(_clip(pattern_text))} took longer than {GREP_TIME_LIMIT:g} s as a "
            "regular expression; searched for it as literal text.",
        )
        base = replace(base, message=_join_notes(base.message, matcher.note))
        hits = _matching_lines(text, starts, rng, matcher)
        assert hits is not None  # a literal search has no time limit to run out of
    entries: list[str] = []
    used = 0
    note: str | None = None
    for number, line in hits:
        entry = f"{number}: {line}\n"
        if used + len(entry) > budget:
            if not entries:  # a single huge matching line: show its start (number kept whole)
                prefix = f"{number}: "
                entries.append(prefix + line[: max(budget - len(prefix) - 1, 0)] + "\n")
                note = (
                    f"Line {number} is longer than max_chars and was cut; "
                    f'recall(ref="{base.ref}", lines="{number}") returns all of it.'
                )
            break
        entries.append(entry)
        used += len(entry)
    shown = len(entries)
    truncated = shown < len(hits)
    last = hits[shown - 1][0] if truncated else rng.end
    return replace(
        base,
        content="".join(entries),
        start_line=rng.start,
        start_col=rng.col,
        end_line=last,
        truncated=truncated,
        next_lines=f"{last + 1}-{rng.end}" if truncated else None,
        grep=pattern_text,
        matches=len(hits),
        shown_matches=shown,
        range_end=rng.end,
        message=_join_notes(base.message, note),
    )


def _line_starts(text: str) -> list[int]:
    """Offsets where each line starts, plus `len(text)` (``str.splitlines`` line breaks)."""
    starts = [0]
    position = 0
    for line in text.splitlines(keepends=True):
        position += len(line)
        starts.append(position)
    return starts


def _strip_eol(line: str) -> str:
    parts = line.splitlines()
    return parts[0] if parts else ""


def _parse_range(lines: object, starts: list[int]) -> _Range | str:
    """The requested range clamped to the text, or a message explaining what is wrong."""
    total = len(starts) - 1
    spec: str
    if lines is None:
        spec = ""
    elif isinstance(lines, bool):
        return _range_help(repr(lines), total)
    elif isinstance(lines, int):
        spec = str(lines)
    elif isinstance(lines, str):
        spec = lines
    elif (
        isinstance(lines, Sequence)
        and len(lines) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in lines)
    ):
        spec = f"{lines[0]}-{lines[1]}"
    else:
        return _range_help(repr(lines), total)
    if spec.strip().lower() in ("", "all", "*"):
        return _Range(1, 1, total)
    if len(spec) > _MAX_SPEC_CHARS:
        return _range_help(spec, total)
    match = _SPEC.fullmatch(spec)
    if match is None:
        return _range_help(spec, total)
    start = int(match["start"]) if match["start"] else 1
    col = int(match["col"]) if match["col"] else 1
    end = start if match["sep"] is None else int(match["end"]) if match["end"] else total
    start, col = max(start, 1), max(col, 1)
    if end < start:
        return (
            f"The line range {_quote(spec)} ends before it starts; "
            f'use "first-last", e.g. "{start}-{start + 49}".'
        )
    if start > total:
        return (
            f"Line {start} is past the end: the output has {total:,} lines. "
            f'Try lines="{max(total - 49, 1)}-{total}".'
            if total
            else "The output has no lines."
        )
    end = min(end, total)
    # A start character past the end of its line moves to the next line.
    if starts[start - 1] + col - 1 >= starts[start]:
        if start == end:
            return _Range(start, starts[start] - starts[start - 1] + 1, end)
        start, col = start + 1, 1
    return _Range(start, col, end)


def _range_help(spec: str, total: int) -> str:
    return (
        f"Could not read the line range {_quote(_clip(spec))}. Use 1-based inclusive lines: "
        f'"120-180", "120-" (to the end), "-50" (lines 1-50) or "42". '
        f"The output has {total:,} lines."
    )


def _budget(max_chars: object, cap: int | None) -> tuple[int, str | None]:
    value: int | None = None
    if max_chars is None:
        value = DEFAULT_MAX_CHARS
    elif isinstance(max_chars, bool):
        value = None
    elif isinstance(max_chars, int):
        value = max_chars
    elif isinstance(max_chars, float) and max_chars.is_integer():
        value = int(max_chars)
    elif (
        isinstance(max_chars, str)
        and max_chars.strip().isdigit()
        and len(max_chars.strip()) <= _MAX_SPEC_CHARS
    ):
        value = int(max_chars.strip())
    note = None
    if value is None or value < 1:
        value = DEFAULT_MAX_CHARS
        note = f"max_chars must be a positive integer; used {DEFAULT_MAX_CHARS}."
    if cap is not None and value > cap:
        value = max(cap, 1)
        note = f"max_chars is capped at {value:,} here."
    return value, note


@dataclass(frozen=True, slots=True)
class _Matcher:
    """A compiled grep: a regex (with a time budget) or, when `pattern` is None, a literal."""

    pattern: Any
    literal: str
    note: str | None = None


def _compile(pattern: str) -> _Matcher:
    if _expanded_size(pattern) > _MAX_EXPANSION:
        note = (
            f"grep {_quote(_clip(pattern))} repeats too much to run as a regular expression "
            f"(over {_MAX_EXPANSION:,} repeated items); searched for it as literal text."
        )
        return _Matcher(None, pattern, note)
    try:
        return _Matcher(regex.compile(pattern, regex.VERSION0), pattern)
    except (regex.error, re.error, RecursionError, OverflowError, ValueError, MemoryError) as exc:
        reason = str(exc)[:_ECHO_CHARS]
        note = f"grep {_quote(_clip(pattern))} is not a valid regular expression ({reason}); "
        return _Matcher(None, pattern, note + "searched for it as literal text.")


def _expanded_size(pattern: str) -> int:
    """An upper bound of the items a pattern unrolls to (counted repeats multiplied through
    nested groups), saturated just above `_MAX_EXPANSION`. Linear in the pattern."""
    cap = _MAX_EXPANSION + 1
    stack: list[list[int]] = [[0, 0]]  # per open group: [size so far, size of the last item]
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        item = 1
        if char == "\\":
            i += 2
            if i < n and pattern[i] == "{" and pattern[i - 1] in "pPNxuUgk":
                close = pattern.find("}", i)
                i = n if close < 0 else close + 1  # \p{L}, \x{41}, \g{name}: one item
        elif char == "[":
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
        elif char == "(":
            stack.append([0, 0])
            i += 1
            continue
        elif char == ")":
            i += 1
            if len(stack) == 1:
                continue
            item = max(stack.pop()[0], 1)
        elif char == "|":
            stack[-1][1] = 0
            i += 1
            continue
        elif char == "{" and (repeat := _REPEAT.match(pattern, i)) and repeat.group(0) != "{}":
            low, comma, high = repeat.groups()
            count = _count(high if comma and high else low, cap)
            top = stack[-1]
            top[0] = min(top[0] + top[1] * (max(count, 1) - 1), cap)
            top[1] = min(top[1] * max(count, 1), cap)
            i = repeat.end()
            continue
        else:
            i += 1
        top = stack[-1]
        top[0] = min(top[0] + item, cap)
        top[1] = item
    return max(group[0] for group in stack)


def _count(digits: str, cap: int) -> int:
    """A repeat count, saturated at `cap` (no int() of thousands of digits)."""
    digits = digits.lstrip("0")
    return cap if len(digits) > len(str(cap)) else min(int(digits or 0), cap)


def _matching_lines(
    text: str, starts: list[int], rng: _Range, matcher: _Matcher
) -> list[tuple[int, str]] | None:
    """(number, line) of the lines of `rng` that match; None when the regex ran out of time."""
    hits: list[tuple[int, str]] = []
    compiled = matcher.pattern
    literal = matcher.literal
    deadline = time.monotonic() + GREP_TIME_LIMIT
    for number in range(rng.start, rng.end + 1):
        begin = starts[number - 1] + (rng.col - 1 if number == rng.start else 0)
        line = _strip_eol(text[begin : starts[number]])
        if compiled is None:
            found = literal in line
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                # `concurrent`: the interpreter lock is released while matching.
                found = compiled.search(line, timeout=left, concurrent=True) is not None
            except TimeoutError:
                return None
        if found:
            hits.append((number, line))
    return hits


# --- rendering helpers -------------------------------------------------------------------------


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _clip(value: str) -> str:
    """At most `_ECHO_CHARS` characters of a model's argument, for headers and messages."""
    return value if len(value) <= _ECHO_CHARS else value[: _ECHO_CHARS - 1] + "…"


def _displayable(text: str) -> str:
    """`text` safe to send (surrogates, i.e. undecodable bytes, become U+FFFD)."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def _looks_like_text(text: str) -> bool:
    sample = text[:_TEXT_SAMPLE_CHARS]
    if not sample:
        return True
    return len(_NON_TEXT.findall(sample)) <= _NOT_TEXT_RATIO * len(sample)


def _join_notes(first: str | None, second: str | None) -> str | None:
    if first is None:
        return second
    if second is None:
        return first
    return f"{first} {second}"

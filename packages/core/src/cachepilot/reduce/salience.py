"""How much a line of tool output matters to the agent that called the tool.

A generic scorer, not a parser per tool: the words and shapes that errors, failures,
exceptions, stack traces and run summaries share across build systems, test runners, package
managers, servers and runtimes (`error:`, `FAILED`, `panicked at`, `Traceback`,
`Exception in thread`, `npm ERR!`, `--- FAIL:`, `3 passed, 1 failed`, `exit code 2` …), plus
the lines that name what the call asked for (a path, a test name, a pattern from its
arguments). A handful of tool-shaped rules (pytest's `E   ` lines, Rust's `-->` locations)
are kept because they clearly pay. Every check is a regular expression without nested
repetition run on at most `SCAN_LINE_CHARS` characters of a line: linear in the output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

__all__ = [
    "SCAN_LINE_CHARS",
    "STRONG",
    "TERM_BONUS",
    "LineScorer",
    "call_terms",
    "clean_line",
    "is_continuation",
    "line_shape",
]

SCAN_LINE_CHARS: Final = 2_000
"""Characters of a line the scorer reads (a longer line is scored on its start)."""

STRONG: Final = 10
"""Score of a line that reports an error, a failure, a crash or an exception."""
TERM_BONUS: Final = 4
"""Added for a line that names a term of the call (a path, a test name, a searched word)."""

_STRONG = re.compile(
    r"error(?:\[[A-Z]?\d+\])?:|ERROR\b|Error\b(?!s? *[:=]? *0\b)|FATAL\b|fatal:"
    r"|Fatal\b|panic(?:ked)?\b|PANIC\b|Traceback \(most recent call last\)"
    r"|(?:Error|Exception|Failure|Fault)\b|Caused by\b"
    r"|^E {2,}\S|--- FAIL\b|FAIL(?:ED|URE)?\b|Failed\b|ERR!|\[ERROR\]|SEVERE\b"
    r"|CRITICAL\b|undefined reference\b|Segmentation fault\b|core dumped\b"
    r"|OOMKilled\b|CrashLoopBackOff\b|ImagePullBackOff\b|ErrImagePull\b"
    r"|Killed\b|Aborted\b|assert(?:ion)? failed\b|AssertionError\b"
    r"|[✖✕✗✘×❌]|non-zero (?:exit|code|status)\b|exit(?:ed)? (?:with )?(?:code|status) [1-9]"
    r"|command failed\b|BUILD FAILED\b|compilation (?:failed|terminated)\b"
)
_WEAK = re.compile(  # run on the lower-cased line
    r"(?:errors?|fail(?:s|ed|ing|ures?)?|exceptions?|panics?|fatal|crash(?:ed|es)?"
    r"|abort(?:ed|ing)?|denied|refused|unreachable|timed? ?out|cannot|can't|couldn't"
    r"|could not|unable to|not found|no such file|unresolved|undefined|segfault)\b"
    r"|^\s*(?:expected|received|actual|got|want|but was)\b\s*[:=<]"
)
_ZERO = re.compile(  # run on the lower-cased line
    r"\b(?:0|no|zero) (?:errors?|failures?|failed|problems?|issues?)\b"
    r"|\b(?:errors?|failures?|failed)[ :=]+0\b|\bx(?:fail|pass)"  # pytest's expected failures
)
_SUMMARY = re.compile(  # run on the lower-cased line
    r"\d[\d,]* (?:passed|failed|errors?|warnings?|skipped|tests?|failures?|problems?"
    r"|examples?|specs?|suites?|assertions?|deselected|xfailed|xpassed|pending|todo)\b"
    r"|test result:|^\s*tests?:\s|^\s*test suites?:|exit (?:code|status)\b|exited with\b"
    r"|build (?:success|successful|failure|failed)\b|finished\b|done in\b"
    r"|compiled (?:successfully|with)\b|successfully (?:built|installed|tagged|created)\b"
    r"|^\s*(?:ok|fail)\s+\S+\s+[\d.]+s\b|^=+ .* =+$|^-+ .* -+$|total time\b|ran \d+ tests?\b"
    r"|found \d+ (?:errors?|problems?|vulnerabilit)"
)
_LOCATION = re.compile(r"\.[A-Za-z]\w{0,5}:\d|\bline \d|^\s*--> ")
# Words that every scored line holds one of (lower case): one scan of the lower-cased output
# finds the lines worth scoring, the rest are skipped without a regular expression each.
_HINTS = (
    "err", "fail", "fatal", "panic", "exception", "traceback", "caused by", "severe",
    "critical", "undefined", "segmentation", "segfault", "dumped", "killed", "backoff",
    "abort", "assert", "non-zero", "exit", "compilation", "fault", "crash", "denied", "refused",
    "unreachable", "timed out", "timeout", "cannot", "can't", "couldn't", "could not", "unable",
    "not found", "no such", "unresolved", "expected", "received", "actual", "got ", "want ",
    "but was", "warn", "deprecat", "passed", "skipped", "tests:", "test suites", "test result",
    "finished", "done in", "compiled", "success", "total time", "ran ", "found ", "problems",
    "examples", "deselected", "xfail", "xpass", "pending", "todo", "ok  ", "ok\t", "=====",
    "-----", "-->", "\ne  ", "✖", "✕", "✗", "✘", "×", "❌",
)  # fmt: skip
_CONTINUATION = re.compile(
    r"^(?:\s+\S|\s*[|^~]|\s*-->|\s*at |\s*Caused by\b|\s*= (?:note|help)|\s*\.\.\. \d+ more)"
)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_DIGITS = re.compile(r"\d+|0x[0-9a-fA-F]+|[0-9a-f]{8,}")

_TERM_SPLIT = re.compile(r"[\s'\"`;|&<>(){}\[\],=]+")
_TERM_SHAPE = re.compile(r"[/._:-]|\d|[a-z][A-Z]")
_MAX_TERMS = 12
_MIN_TERM = 4
_MAX_ARG_CHARS = 4_000
_QUERY_KEYS = frozenset({"prompt", "query", "pattern", "q", "search", "regex", "question"})
_QUERY_STOP = frozenset(
    {"about", "which", "where", "there", "their", "these", "those", "should", "would", "could",
     "what", "when", "with", "from", "into", "that", "this", "find", "show", "list", "page"}
)  # fmt: skip
_QUERY_WORD = re.compile(r"[A-Za-z][\w-]{4,}")
_COMMON_TERMS = frozenset(
    {
        "python", "python3", "pytest", "node", "npm", "npx", "yarn", "pnpm", "cargo", "make",
        "go", "mvn", "gradle", "./gradlew", "./mvnw", "docker", "kubectl", "bash", "sh",
        "true", "false", "null", "echo", "grep", "cat", "head", "tail", "sed", "awk", "git",
        "pip", "pip3", "uv", "run", "test", "tests", "build", "install", "/dev/null", "2>&1",
        "tsc", "eslint", "jest", "webpack", "-m", "&&", "||", "json", "text", "utf-8",
    }
)  # fmt: skip


def clean_line(line: str) -> str:
    """A line as a terminal shows it: escape sequences gone, trailing whitespace trimmed."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return line.rstrip()


def line_shape(line: str) -> str:
    """What near-identical lines share: the start of the line with numbers and ids masked."""
    return _DIGITS.sub("#", line[:120])


def is_continuation(line: str) -> bool:
    """True for a line that continues the one above (indented, a frame, a caret, `-->`)."""
    return bool(line) and _CONTINUATION.match(line) is not None


def call_terms(args: Mapping[str, Any]) -> tuple[str, ...]:
    """What the call asked for, as literal terms: paths, file names, test names, identifiers.

    Taken from the string values of the arguments (commands are split like a shell would,
    `a.py::test_b` and `pkg/mod.go` also give `test_b` and `mod.go`). Only specific terms are
    kept (at least `_MIN_TERM` characters with a path, dotted, numbered or camel-case shape;
    command names and flags are not), longest first, at most `_MAX_TERMS`.
    """
    found: dict[str, None] = {}
    for key, value in args.items():
        if str(key).lower() in _QUERY_KEYS and isinstance(value, str):
            # What the call searches for: its words count even without a path-like shape.
            for word in _QUERY_WORD.findall(value[:_MAX_ARG_CHARS]):
                if word.lower() not in _COMMON_TERMS and word.lower() not in _QUERY_STOP:
                    found[word] = None
    for value in _strings(args, budget=[_MAX_ARG_CHARS]):
        for raw in _TERM_SPLIT.split(value):
            token = raw.strip(".,:;!?")
            if not token or token.startswith("-") or token.lower() in _COMMON_TERMS:
                continue
            pieces = [token]
            if "::" in token:
                pieces.extend(token.split("::"))
            if "/" in token:
                pieces.append(token.rstrip("/").rsplit("/", 1)[-1])
            for whole in pieces:
                piece = whole.strip("./")
                if (
                    len(piece) >= _MIN_TERM
                    and piece.lower() not in _COMMON_TERMS
                    and _TERM_SHAPE.search(piece) is not None
                    and piece.count("/") <= 8
                ):
                    found[piece] = None
    terms = sorted(found, key=lambda t: (-len(t), t))
    return tuple(terms[:_MAX_TERMS])


def _strings(value: object, budget: list[int]) -> Iterable[str]:
    """The string values of `value` (recursively), at most `budget[0]` characters in all."""
    if budget[0] <= 0:
        return
    if isinstance(value, str):
        piece = value[: budget[0]]
        budget[0] -= len(piece)
        yield piece
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item, budget)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, budget)


class LineScorer:
    """Scores lines of one output; `terms` are the call's (see `call_terms`)."""

    __slots__ = ("_hints", "_terms", "terms")

    def __init__(self, terms: tuple[str, ...] = ()) -> None:
        self.terms = terms
        pattern = "|".join(re.escape(t) for t in terms)
        self._terms = re.compile(pattern, re.IGNORECASE) if pattern else None
        words = sorted({*_HINTS, *(t.lower() for t in terms)}, key=lambda w: (-len(w), w))
        self._hints = re.compile("|".join(re.escape(w) for w in words))

    def hint_ends(self, lower: str) -> Iterator[int]:
        """Offsets in `lower` (an output lower-cased, same length) of the last character of
        each word a scored line must hold: a line none falls in scores 0 and is skipped."""
        return (match.end() - 1 for match in self._hints.finditer(lower))

    def score(self, line: str) -> int:
        """0 for a line of no interest; higher for what an agent acts on (errors highest)."""
        score, term = self.score_parts(line)
        return score + (TERM_BONUS if term else 0)

    def score_parts(self, line: str) -> tuple[int, bool]:
        """The score without the term bonus, and whether the line names a term of the call."""
        score, terms = self.score_terms(line)
        return score, bool(terms)

    def score_terms(self, line: str) -> tuple[int, frozenset[str]]:
        """The score without the term bonus, and the terms of the call the line names
        (lower-cased)."""
        sample = line[:SCAN_LINE_CHARS]
        if not sample.strip():
            return 0, frozenset()
        score = 0
        lower = sample.lower()
        zero = _ZERO.search(lower) is not None
        if _STRONG.search(sample) is not None and not zero:
            score = STRONG
        elif _WEAK.search(lower) is not None and not zero:
            score = 5
        elif "warn" in lower or "deprecat" in lower:
            score = 2
        if _SUMMARY.search(lower) is not None:
            score = max(score, 6) + (1 if score else 0)
        terms = (
            frozenset(t.lower() for t in self._terms.findall(sample))
            if self._terms is not None
            else frozenset()
        )
        if score and _LOCATION.search(sample) is not None:
            score += 1
        return score, terms

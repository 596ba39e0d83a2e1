"""Tool-output patterns: exit codes, test-runner summaries, error lines, commits, env facts.

Linear-time like `patterns` (bounded repetitions); callers pass bounded windows of long output.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from cachepilot.memory.patterns import clip, signature

__all__ = [
    "ErrorHit",
    "TestSummary",
    "env_facts",
    "error_hits",
    "exit_code",
    "git_commit",
    "is_wrapper_line",
    "test_summary",
]

_WRAPPER_LINE = re.compile(
    r"^\s*(?:</?(?:output|returncode|output_head|output_tail|elided_chars|warning|stdout|stderr)"
    r"\b[^>]{0,40}>\s*$|\[(?:The command completed|Command finished|Current working directory|"
    r"Python interpreter)[^\]]{0,300}\]\s*$|\((?:Open file|Current directory):[^)]{0,300}\)\s*$|"
    r"bash-\$\s*$|Exit code:? -?\d{1,4}\s*$)"
)
_EXIT = re.compile(
    r"<returncode>\s{0,5}(-?\d{1,4})\s{0,5}</returncode>"
    r"|^Exit code:? (-?\d{1,4})\b"
    r"|\[(?:The command completed|Command finished) with exit code (-?\d{1,4})\.?\]"
    r"|<exit_code>\s{0,5}(-?\d{1,4})\s{0,5}</exit_code>"
    r"|\b(?:exit(?:ed)? (?:with )?(?:code|status)|returncode|exit_code)[:=]? ?(-?\d{1,4})\b",
    re.MULTILINE | re.IGNORECASE,
)
_PYTEST = re.compile(
    r"^=*\s?((?:\d{1,6} (?:failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected|"
    r"rerun)(?:, )?){1,8}) in \d{1,6}(?:\.\d{1,4})?s",
    re.MULTILINE,
)
_EXUNIT = re.compile(
    r"\b(?:(\d{1,6}) doctests?, )?(?:(\d{1,6}) propert(?:y|ies), )?(\d{1,6}) tests?, "
    r"(\d{1,6}) failures?"
)
_JEST = re.compile(r"^Tests:\s{1,5}(?:(\d{1,6}) failed, )?[^\n]{0,80}?(\d{1,6}) passed", re.M)
_CARGO = re.compile(r"test result: (?:ok|FAILED)\. (\d{1,6}) passed; (\d{1,6}) failed")
_COUNT = re.compile(r"(\d{1,6}) (failed|passed|errors?)")
_ERROR_LINE = re.compile(
    r"^[ \t]{0,8}(?:E[ \t]{1,8})?("
    r"[\w.]{0,80}(?:Error|Exception)(?::|\s|$)[^\n]{0,300}"
    r"|(?:error|ERROR|Error|fatal|FATAL|FAILED|FAIL|panic)(?:\[[\w-]{1,12}\])?(?::|!|\s-\s|\s)"
    r"[^\n]{0,300}"
    r"|\*\* \([\w.]{1,60}\)[^\n]{0,300}"
    r"|[^\n]{0,200}(?:No such file or directory|command not found|Permission denied|"
    r"SyntaxError|Segmentation fault|segfault|undefined (?:function|variable|method|reference))"
    r"[^\n]{0,200}"
    r")$",
    re.MULTILINE,
)
_NOT_ERROR = re.compile(
    r"^(?:errors?:? 0|0 errors?|error_|errors=|Error handling|\d+ errors? generated)|"
    r"warnings-as-errors|no errors|without errors|ErrorBoundary|error\.(?:ex|py|js|ts)\b",
    re.IGNORECASE,
)
_EXUNIT_FAIL = re.compile(r"^\s{1,8}\d{1,4}\) test ([^\n]{1,200})$", re.MULTILINE)
_SPECIFIC = re.compile(r"[\w.]{0,80}(?:Error|Exception)|FAILED|\*\* |test failed")
_TOOL_ERROR = re.compile(r"<tool_use_error>([^<]{1,400})</tool_use_error>")
_FRAME = re.compile(r"File \"([^\"\n]{1,300})\", line (\d{1,7})")
_LOC = re.compile(r"((?:[\w.@+-]{1,120}/){0,30}[\w.@+-]{1,120}\.[A-Za-z]{1,8}):(\d{1,7})")
_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|node_modules|^<")
_GIT_COMMIT = re.compile(
    r"^\[([\w./-]{1,120})(?: \(root-commit\))? ([0-9a-f]{7,40})\] ([^\n]{1,200})$", re.M
)
_ENV_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("python", "Python ", re.compile(r"\bPython (\d\.\d{1,2}(?:\.\d{1,3})?)\b")),
    ("platform", "platform ", re.compile(r"^platform (\w{2,20}) -- Python", re.M)),
    ("pytest", "pytest-", re.compile(r"\bpytest-(\d{1,2}\.\d{1,3}(?:\.\d{1,3})?)\b")),
    ("node", "\nv", re.compile(r"^v(\d{1,2}\.\d{1,3}\.\d{1,3})$", re.M)),
    ("elixir", "Elixir ", re.compile(r"\bElixir (\d{1,2}\.\d{1,3}\.\d{1,3})\b")),
    ("branch", "On branch ", re.compile(r"^On branch ([\w./-]{1,120})$", re.M)),
    ("cwd", "working directory: ", re.compile(r"\[Current working directory: ([^\]\n]{1,300})\]")),
    ("cwd", "Current directory: ", re.compile(r"\(Current directory: ([^)\n]{1,300})\)")),
    (
        "repo",
        "github.com",
        re.compile(r"github\.com[:/]([\w.-]{1,80}/[\w.-]{1,80}?)(?:\.git)?(?=[\s/]|$)", re.M),
    ),
)


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    tail = deque(matches, maxlen=1)
    return tail[0] if tail else None


def is_wrapper_line(line: str) -> bool:
    """True for harness wrapper lines (`<output>`, `[Command finished…]`, `Exit code 1`)."""
    return _WRAPPER_LINE.match(line) is not None


def exit_code(text: str) -> int | None:
    """The exit code a tool output shows (`<returncode>`, `Exit code N`, …), or None."""
    low = text.lower()
    if "exit" not in low and "returncode" not in low:
        return None
    match = _EXIT.search(text)
    if match is None:
        return None
    value = next(g for g in match.groups() if g is not None)
    return int(value)


@dataclass(frozen=True, slots=True)
class TestSummary:
    """Counts from a test runner's summary line."""

    failed: int
    passed: int
    text: str


def test_summary(text: str) -> TestSummary | None:
    """The last test-runner summary in `text` (pytest, ExUnit, Jest, cargo), or None."""
    text = text[-8_000:]
    match = _last(_PYTEST.finditer(text))
    if match is not None:
        counts = {k.rstrip("s"): int(v) for v, k in _COUNT.findall(match.group(1))}
        failed = counts.get("failed", 0) + counts.get("error", 0)
        return TestSummary(failed, counts.get("passed", 0), clip(match.group(1), 120))
    ex = _last(_EXUNIT.finditer(text))
    if ex is not None:
        tests = int(ex.group(3)) + int(ex.group(1) or 0) + int(ex.group(2) or 0)
        failed = int(ex.group(4))
        return TestSummary(failed, tests - failed, clip(ex.group(0), 120))
    jest = _JEST.search(text)
    if jest is not None:
        failed = int(jest.group(1) or 0)
        return TestSummary(failed, int(jest.group(2)), clip(jest.group(0), 120))
    cargo = _CARGO.search(text)
    if cargo is not None:
        return TestSummary(int(cargo.group(2)), int(cargo.group(1)), clip(cargo.group(0), 120))
    return None


@dataclass(frozen=True, slots=True)
class ErrorHit:
    """One error found in an output: the line, and a file it points into when known."""

    line: str
    path: str | None = None


def error_hits(text: str, limit: int = 4) -> list[ErrorHit]:
    """Error lines, tool errors and failing tests of an output (at most `limit`, deduped)."""
    hits: dict[str, ErrorHit] = {}
    # The innermost frame in the project's own code (not the stdlib or installed packages).
    frames = [f for f, _ in _FRAME.findall(text) if not _LIBRARY.search(f)]
    frame_path = frames[-1] if frames else None
    for match in _TOOL_ERROR.finditer(text):
        line = clip(match.group(1), 200)
        hits.setdefault(signature(line), ErrorHit(line))
    for match in _ERROR_LINE.finditer(text):
        raw = match.group(1).strip()
        if _NOT_ERROR.search(raw) or len(raw) < 6:
            continue
        line = clip(raw, 200)
        loc = _LOC.search(raw)
        path = loc.group(1) if loc else frame_path
        hits.setdefault(signature(line), ErrorHit(line, path))
        if len(hits) >= limit * 3:
            break
    for match in _EXUNIT_FAIL.finditer(text):
        line = clip("test failed: " + match.group(1), 200)
        hits.setdefault(signature(line), ErrorHit(line))
    ordered = list(hits.values())
    # Prefer specific lines (exception names, failing tests) over generic ones.
    ordered.sort(key=lambda h: 0 if _SPECIFIC.match(h.line) else 1)
    return ordered[:limit]


def git_commit(text: str) -> tuple[str, str, str] | None:
    """`(branch, sha, subject)` of a `git commit` output line, or None."""
    match = _GIT_COMMIT.search(text)
    return (match.group(1), match.group(2), match.group(3)) if match else None


def env_facts(text: str) -> list[tuple[str, str]]:
    """Environment facts an output states: python/pytest/node versions, branch, cwd, repo."""
    if len(text) > 12_000:
        text = text[:8_000] + "\n" + text[-4_000:]
    out: dict[str, str] = {}
    for name, hint, pattern in _ENV_PATTERNS:
        if name in out or hint not in text:
            continue
        match = pattern.search(text)
        if match:
            out[name] = match.group(1).strip()
    return list(out.items())

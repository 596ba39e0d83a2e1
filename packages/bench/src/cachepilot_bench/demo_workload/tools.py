"""Deterministic tools of the demo workload, working on the files the project ships.

The workspace is the fictional ``inventory`` repository under ``data/project`` (seen by the
agent at `DEMO_CWD`). Files are read from the package data and never written: edits go to
the in-memory copy held by a `DemoToolState`, so later reads, diffs and test runs see them.
Shell commands are a small fixed set; the outputs of test and lint runs were captured from
real runs of the shipped project (``data/outputs/captured.json`` maps a command and the
workspace contents to its output), logs and API bodies are shipped files.

Every tool returns text and never raises on bad input: errors come back as an ``Error: …``
string, the way agent tool runtimes report them to the model.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import Any, TypeAlias
from urllib.parse import urlsplit

__all__ = [
    "DEMO_CWD",
    "DEMO_TOOLS",
    "DEMO_TOOL_SCHEMAS",
    "DOCS_URL",
    "STAGING_STOCK_URL",
    "CommandRunner",
    "DemoToolState",
    "bash",
    "edit_file",
    "fetch_url",
    "grep",
    "is_captured_command",
    "list_dir",
    "read_file",
    "run_demo_tool",
    "shipped_output",
    "shipped_workspace",
]

DEMO_CWD = "/home/dev/projects/inventory"
"""Working directory the agent sees (the shipped ``data/project`` folder)."""
DOCS_URL = "https://docs.inventory.acme.example/"
"""Published docs page; `fetch_url` serves ``docs/index.html`` as shipped."""
STAGING_STOCK_URL = (
    "https://staging.inventory.acme.example/api/v1/stock/WH-EAST?expand=reservations,catalog"
)
"""Staging API snapshot; `fetch_url` serves ``outputs/staging_stock_WH-EAST.json``."""

_PROJECT_DIR = "project"
_OUTPUTS_DIR = "outputs"
_CAPTURED_MANIFEST = "captured.json"
# Shipped source files carry a ``.txt`` suffix so linters, type checkers and test runners of
# this repository leave them alone; the agent sees them without it.
_HIDDEN_SUFFIX = re.compile(r"\.(?:py|toml)\.txt$")
_GREP_MAX_MATCHES = 200
_MISSING = "(no matches)"


# --------------------------------------------------------------------------- shipped data


def _data_root() -> Traversable:
    return resources.files("cachepilot_bench.demo_workload").joinpath("data")


def _walk(node: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for child in node.iterdir():
        name = child.name
        if child.is_dir():
            found.extend(_walk(child, f"{prefix}{name}/"))
        elif not name.startswith("."):
            found.append((prefix + name, child))
    return found


def _virtual_name(path: str) -> str:
    if _HIDDEN_SUFFIX.search(path):
        return path[: -len(".txt")]
    return path


@functools.cache
def shipped_workspace() -> Mapping[str, str]:
    """The shipped project as the agent sees it: relative path → text (read-only)."""
    files = {
        _virtual_name(path): item.read_bytes().decode("utf-8")
        for path, item in _walk(_data_root().joinpath(_PROJECT_DIR), "")
    }
    return MappingProxyType(dict(sorted(files.items())))


@functools.cache
def shipped_output(name: str) -> str:
    """A shipped output file (log, API body) from ``data/outputs``, bytes kept exactly."""
    return _data_root().joinpath(_OUTPUTS_DIR, name).read_bytes().decode("utf-8")


@dataclass(frozen=True, slots=True)
class _Captured:
    command: str
    installed: bool
    tree: Mapping[str, str]
    output: str
    exit_code: int


@functools.cache
def _captured_runs() -> tuple[_Captured, ...]:
    try:
        raw = json.loads(shipped_output(_CAPTURED_MANIFEST))
    except FileNotFoundError:
        return ()
    return tuple(
        _Captured(
            command=str(entry["command"]),
            installed=bool(entry["installed"]),
            tree=MappingProxyType(dict(entry["tree"])),
            output=str(entry["output"]),
            exit_code=int(entry["exit_code"]),
        )
        for entry in raw["runs"]
    )


# --------------------------------------------------------------------------- state

CommandRunner: TypeAlias = Callable[[str, "DemoToolState"], tuple[str, int]]
"""``(command, state) -> (output, exit code)`` for commands run for real."""


@dataclass(slots=True)
class DemoToolState:
    """The mutable side of one demo run: the workspace as edited so far.

    Attributes:
        files: current text of every workspace file (starts as the shipped project).
        installed: True once ``pip install -e`` ran (``pytest`` then finds the package).
        command_runner: optional real runner for ``pytest`` / ``ruff`` commands.
    """

    files: dict[str, str] = field(default_factory=lambda: dict(shipped_workspace()))
    installed: bool = False
    command_runner: CommandRunner | None = None
    """Runs test and lint commands for real instead of replaying captured outputs (the
    capture script sets it); returns ``(output, exit code)``."""

    def modified(self) -> list[str]:
        """Paths whose content differs from the shipped project, sorted."""
        shipped = shipped_workspace()
        return sorted(p for p, text in self.files.items() if shipped.get(p) != text)

    def added(self) -> list[str]:
        """Paths that do not exist in the shipped project, sorted."""
        shipped = shipped_workspace()
        return sorted(p for p in self.files if p not in shipped)

    def tree_digest(self) -> dict[str, str]:
        """Short sha256 of every Python and TOML file (what test and lint runs depend on)."""
        return {
            path: hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
            for path, text in sorted(self.files.items())
            if path.endswith((".py", ".toml"))
        }


# --------------------------------------------------------------------------- paths


def _normalize(path: str) -> str | None:
    """Workspace-relative form of `path` ('' for the root), None when it leaves the workspace."""
    path = path.strip()
    if path == DEMO_CWD or path.startswith(DEMO_CWD + "/"):
        path = path[len(DEMO_CWD) :]
    elif path.startswith("~/projects/inventory"):
        path = path[len("~/projects/inventory") :]
    elif path.startswith("/"):
        return None
    joined = posixpath.normpath("/" + path.lstrip("/"))
    return joined.lstrip("/")


def _is_dir(state: DemoToolState, rel: str) -> bool:
    if rel == "":
        return True
    prefix = rel + "/"
    return any(p.startswith(prefix) for p in state.files)


def _number_lines(lines: list[str], first: int) -> str:
    return "\n".join(f"{first + i:>6}\t{line}" for i, line in enumerate(lines))


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# --------------------------------------------------------------------------- tools


def read_file(
    state: DemoToolState,
    path: str,
    start_line: int | None = None,
    end_line: int | None = None,
) -> str:
    """Read a workspace file with ``cat -n`` style line numbers.

    Args:
        state: the run's workspace.
        path: file path, relative to the working directory or absolute under it.
        start_line: first line to show (1-based, inclusive).
        end_line: last line to show (inclusive).
    """
    rel = _normalize(path)
    if rel is None:
        return f"Error: {path} is outside the working directory {DEMO_CWD}"
    if rel not in state.files:
        if _is_dir(state, rel):
            return f"Error: {path} is a directory; use list_dir"
        return f"Error: no such file: {path}"
    lines = _lines(state.files[rel])
    total = len(lines)
    first = 1 if start_line is None else int(start_line)
    last = total if end_line is None else min(int(end_line), total)
    if first < 1 or (end_line is not None and last < first):
        return f"Error: invalid line range {start_line}-{end_line}"
    if total == 0:
        return f"(empty file: {path})"
    if first > total:
        return f"Error: {path} has only {total} lines"
    return _number_lines(lines[first - 1 : last], first)


def list_dir(state: DemoToolState, path: str = ".") -> str:
    """List a workspace directory: subdirectories with a trailing ``/``, files with sizes.

    Args:
        state: the run's workspace.
        path: directory path (default: the working directory).
    """
    rel = _normalize(path)
    if rel is None:
        return f"Error: {path} is outside the working directory {DEMO_CWD}"
    if rel in state.files:
        return f"Error: {path} is a file; use read_file"
    if not _is_dir(state, rel):
        return f"Error: no such directory: {path}"
    prefix = rel + "/" if rel else ""
    dirs: set[str] = set()
    files: dict[str, int] = {}
    for file_path, text in state.files.items():
        if not file_path.startswith(prefix):
            continue
        head, sep, _ = file_path[len(prefix) :].partition("/")
        if sep:
            dirs.add(head + "/")
        else:
            files[head] = len(text.encode("utf-8"))
    names = sorted([*dirs, *files])
    width = max(len(n) for n in names)
    shown = posixpath.join(DEMO_CWD, rel) if rel else DEMO_CWD
    rows = [f"{shown}:"]
    for name in names:
        size = files.get(name)
        rows.append(name if size is None else f"{name.ljust(width)}  {size:>7,} bytes")
    return "\n".join(rows)


def grep(state: DemoToolState, pattern: str, path: str = ".") -> str:
    """Search workspace files for a Python regular expression, ``path:line:text`` per match.

    Args:
        state: the run's workspace.
        pattern: regular expression (Python syntax).
        path: file or directory to search (recursively).
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        return f"Error: invalid regular expression {pattern!r}: {exc}"
    rel = _normalize(path)
    if rel is None:
        return f"Error: {path} is outside the working directory {DEMO_CWD}"
    if rel in state.files:
        targets = [rel]
    elif _is_dir(state, rel):
        prefix = rel + "/" if rel else ""
        targets = sorted(p for p in state.files if p.startswith(prefix))
    else:
        return f"Error: no such file or directory: {path}"
    hits: list[str] = []
    total = 0
    for target in targets:
        for number, line in enumerate(_lines(state.files[target]), start=1):
            if regex.search(line):
                total += 1
                if len(hits) < _GREP_MAX_MATCHES:
                    hits.append(f"{target}:{number}:{line}")
    if not hits:
        return _MISSING
    if total > len(hits):
        hits.append(f"[{total - len(hits)} more matches not shown; narrow the pattern or path]")
    return "\n".join(hits)


def edit_file(state: DemoToolState, path: str, old: str, new: str) -> str:
    """Replace one exact occurrence of `old` by `new` in a workspace file (in memory).

    An empty `old` on a path that does not exist creates the file with `new`.

    Args:
        state: the run's workspace.
        path: file to edit.
        old: exact text to replace; must occur exactly once.
        new: replacement text.
    """
    rel = _normalize(path)
    if rel is None:
        return f"Error: {path} is outside the working directory {DEMO_CWD}"
    if rel not in state.files:
        if old == "" and rel and not _is_dir(state, rel):
            state.files[rel] = new
            return f"Created {rel} ({len(_lines(new))} lines)."
        return f"Error: no such file: {path}"
    text = state.files[rel]
    if old == "":
        return "Error: `old` must not be empty when editing an existing file"
    count = text.count(old)
    if count == 0:
        return f"Error: `old` text not found in {rel}; read the file again and copy it exactly"
    if count > 1:
        return f"Error: `old` text occurs {count} times in {rel}; include more context"
    at = text.index(old)
    state.files[rel] = text[:at] + new + text[at + len(old) :]
    first = text.count("\n", 0, at) + 1
    old_n, new_n = len(old.splitlines()), len(new.splitlines())
    lines = _lines(state.files[rel])
    lo = max(first - 3, 1)
    hi = min(first + max(new_n, 1) + 2, len(lines))
    return (
        f"Edited {rel}: replaced {old_n} line{'s' if old_n != 1 else ''} with {new_n} "
        f"line{'s' if new_n != 1 else ''} at line {first}. Snippet of the edited file:\n"
        + _number_lines(lines[lo - 1 : hi], lo)
    )


def fetch_url(state: DemoToolState, url: str) -> str:
    """Fetch a URL and return the response body (only the demo's two sites resolve).

    Args:
        state: the run's workspace (unused: the sites are not part of it).
        url: ``https://`` URL.
    """
    del state
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        return f"Error: unsupported URL scheme in {url!r}"
    if parts.netloc == urlsplit(DOCS_URL).netloc:
        if parts.path in ("", "/", "/index.html"):
            return shipped_workspace()["docs/index.html"]
        return f"Error: HTTP 404 Not Found: {url}"
    if parts.netloc == urlsplit(STAGING_STOCK_URL).netloc:
        if parts.path.rstrip("/") == "/api/v1/stock/WH-EAST":
            return shipped_output("staging_stock_WH-EAST.json")
        if parts.path.rstrip("/") == "/api/v1/health":
            return '{"status":"ok","warehouses":3}'
        return f'Error: HTTP 404 Not Found: {{"error":"not_found","path":"{parts.path}"}}'
    return f"Error: could not resolve host {parts.netloc!r}"


# --------------------------------------------------------------------------- bash


def _git_blob(text: str) -> str:
    data = text.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def _git_status(state: DemoToolState) -> str:
    shipped = shipped_workspace()
    changed = [p for p in state.modified() if p in shipped]
    added = state.added()
    out = ["On branch main", "Your branch is up to date with 'origin/main'.", ""]
    if not changed and not added:
        out.append("nothing to commit, working tree clean")
        return "\n".join(out)
    if changed:
        out += [
            "Changes not staged for commit:",
            '  (use "git add <file>..." to update what will be committed)',
            '  (use "git restore <file>..." to discard changes in working directory)',
            *(f"\tmodified:   {p}" for p in changed),
            "",
        ]
    if added:
        out += [
            "Untracked files:",
            '  (use "git add <file>..." to include in what will be committed)',
            *(f"\t{p}" for p in added),
            "",
        ]
    if changed:
        out.append('no changes added to commit (use "git add" and/or "git commit -a")')
    else:
        out.append('nothing added to commit but untracked files present (use "git add" to track)')
    return "\n".join(out)


def _git_diff(state: DemoToolState, args: list[str]) -> str:
    stat = "--stat" in args
    paths = [a for a in args if not a.startswith("-")]
    wanted = [_normalize(p) for p in paths]
    shipped = shipped_workspace()
    chunks: list[str] = []
    stats: list[tuple[str, int, int]] = []
    for rel in state.modified():
        if rel not in shipped:
            continue  # untracked files are not in `git diff`
        if wanted and not any(
            w is not None and (rel == w or rel.startswith(w + "/")) for w in wanted
        ):
            continue
        before, after = shipped[rel], state.files[rel]
        diff = list(
            difflib.unified_diff(
                before.splitlines(), after.splitlines(), f"a/{rel}", f"b/{rel}", lineterm="", n=3
            )
        )
        plus = sum(1 for d in diff[2:] if d.startswith("+"))
        minus = sum(1 for d in diff[2:] if d.startswith("-"))
        stats.append((rel, plus, minus))
        chunks.append(
            f"diff --git a/{rel} b/{rel}\nindex {_git_blob(before)}..{_git_blob(after)} 100644\n"
            + "\n".join(diff)
        )
    if stat:
        if not stats:
            return ""
        width = max(len(r) for r, _, _ in stats)
        rows = [
            f" {r.ljust(width)} | {p + m:>3} {'+' * min(p, 40)}{'-' * min(m, 40)}"
            for r, p, m in stats
        ]
        plus_total, minus_total = sum(p for _, p, _ in stats), sum(m for _, _, m in stats)
        n = len(stats)
        rows.append(
            f" {n} file{'s' if n != 1 else ''} changed, {plus_total} insertion"
            f"{'s' if plus_total != 1 else ''}(+), {minus_total} deletion"
            f"{'s' if minus_total != 1 else ''}(-)"
        )
        return "\n".join(rows)
    return "\n".join(chunks)


def _git_log(args: list[str]) -> str:
    text = shipped_output("git_log.txt")
    entries = re.split(r"\n(?=commit [0-9a-f]{40})", text.strip("\n"))
    limit: int | None = None
    oneline = False
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--oneline":
            oneline = True
        elif arg in ("-n", "--max-count") and rest:
            limit = int(rest.pop(0))
        elif arg.startswith("--max-count="):
            limit = int(arg.split("=", 1)[1])
        elif re.fullmatch(r"-\d+", arg):
            limit = int(arg[1:])
        else:
            return f"Error: git log option {arg!r} is not available in the demo workspace"
    if limit is not None:
        entries = entries[:limit]
    if not oneline:
        return "\n\n".join(e.rstrip("\n") for e in entries)
    rows = []
    for entry in entries:
        head = entry.split("\n", 1)[0].split()
        sha, refs = head[1], " ".join(head[2:])
        subject = next(ln.strip() for ln in entry.split("\n")[1:] if ln.startswith("    "))
        rows.append(f"{sha[:7]} {refs + ' ' if refs else ''}{subject}")
    return "\n".join(rows)


def _family(command: str) -> str:
    words = command.split()
    return "pytest" if _canonical_pytest(words)[:3] == ["python", "-m", "pytest"] else words[0]


def _captured(state: DemoToolState, command: str) -> tuple[str, int] | None:
    """Output and exit code of the captured run that best matches `command` and the workspace.

    Exact command first, else any run of the same tool (``pytest`` and ``python -m pytest``
    are one tool); among those, the run whose workspace differs in the fewest files.
    """
    runs = [r for r in _captured_runs() if r.installed == state.installed]
    same = [r for r in runs if r.command == command]
    if not same:
        same = [r for r in runs if _family(r.command) == _family(command)]
    if not same:
        return None
    tree = state.tree_digest()

    def distance(run: _Captured) -> int:
        keys = set(tree) | set(run.tree)
        return sum(1 for k in keys if tree.get(k) != run.tree.get(k))

    best = min(same, key=distance)  # min() keeps the first of equals: manifest order
    return shipped_output(best.output), best.exit_code


def is_captured_command(words: list[str]) -> bool:
    """True for the commands whose output comes from captured real runs (pytest, ruff)."""
    return bool(words) and (
        words[0] in ("pytest", "ruff") or _canonical_pytest(words)[:3] == ["python", "-m", "pytest"]
    )


def _canonical_pytest(words: list[str]) -> list[str]:
    if words[:3] in (["python", "-m", "pytest"], ["python3", "-m", "pytest"]):
        return ["python", "-m", "pytest", *words[3:]]
    return words


def bash(state: DemoToolState, command: str) -> str:
    """Run a shell command in the demo workspace (a fixed set of deterministic commands).

    Args:
        state: the run's workspace.
        command: the command line.
    """
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return f"bash: syntax error: {exc}\n[exit code 2]"
    if not words:
        return ""
    if words[0] == "cd" and len(words) >= 4 and words[2] == "&&":
        if _normalize(words[1]) != "":
            return f"bash: cd: {words[1]}: only the working directory exists in the demo"
        words = words[3:]
    words = [w for w in words if w != "2>&1"]
    if "|" in words:
        at = words.index("|")
        return _pipe(bash(state, shlex.join(words[:at])), words[at + 1 :])
    return _run(state, _canonical_pytest(words))


def _pipe(output: str, words: list[str]) -> str:
    """Apply ``| head -n N`` / ``| tail -n N`` (possibly chained) to a command's output."""
    if "|" in words:
        at = words.index("|")
        return _pipe(_pipe(output, words[:at]), words[at + 1 :])
    if not words or words[0] not in ("head", "tail"):
        shown = words[0] if words else ""
        return f"bash: only `| head` and `| tail` pipes are available in the demo, not {shown!r}"
    count = 10
    for i, word in enumerate(words[1:], start=1):
        if word == "-n" and i + 1 < len(words) and words[i + 1].isdigit():
            count = int(words[i + 1])
        elif re.fullmatch(r"-\d+", word):
            count = int(word[1:])
    lines = output.split("\n")
    return "\n".join(lines[:count] if words[0] == "head" else lines[-count:] if count else [])


def _run(state: DemoToolState, words: list[str]) -> str:
    if not words:
        return ""
    program = words[0]
    if is_captured_command(words):
        command = " ".join(words)
        if state.command_runner is not None:
            found: tuple[str, int] | None = state.command_runner(command, state)
        else:
            found = _captured(state, command)
        if found is None:
            return f"bash: {program}: no recorded run matches this command\n[exit code 127]"
        text, code = found
        return text.rstrip("\n") + f"\n[exit code {code}]" if code else text
    if program == "pip" or words[:3] in (["python", "-m", "pip"], ["python3", "-m", "pip"]):
        sub = words[1] if program == "pip" else words[3] if len(words) > 3 else ""
        if sub != "install":
            return f"Error: only `pip install` is available in the demo workspace, not {sub!r}"
        state.installed = True
        return shipped_output("pip_install.log")
    if program == "git" and len(words) > 1:
        if words[1] == "log":
            return _git_log(words[2:])
        if words[1] == "status":
            return _git_status(state)
        if words[1] == "diff":
            return _git_diff(state, words[2:])
        return f"Error: git {words[1]} is not available in the demo workspace"
    if program == "curl":
        urls = [w for w in words[1:] if w.startswith(("http://", "https://"))]
        if len(urls) != 1:
            return "curl: try 'curl --help' for more information\n[exit code 2]"
        return fetch_url(state, urls[0])
    if program in ("cat", "head", "tail", "wc"):
        return _text_command(state, words)
    if program == "ls":
        targets = [w for w in words[1:] if not w.startswith("-")] or ["."]
        return "\n\n".join(list_dir(state, t) for t in targets)
    return (
        f"bash: {program}: command not found in the demo workspace (available: pytest, "
        "python -m pytest, ruff check, pip install, git log/status/diff, curl, ls, cat, head, "
        "tail, wc)\n[exit code 127]"
    )


def _text_command(state: DemoToolState, words: list[str]) -> str:
    program, args = words[0], words[1:]
    count = 10
    paths: list[str] = []
    flags: set[str] = set()
    while args:
        arg = args.pop(0)
        if arg == "-n" and args and program in ("head", "tail"):
            count = int(args.pop(0))
        elif re.fullmatch(r"-\d+", arg) and program in ("head", "tail"):
            count = int(arg[1:])
        elif arg.startswith("-"):
            flags.add(arg)
        else:
            paths.append(arg)
    if not paths:
        return f"{program}: reading standard input is not supported in the demo\n[exit code 1]"
    out: list[str] = []
    totals = 0
    for path in paths:
        rel = _normalize(path)
        if rel is None or rel not in state.files:
            out.append(f"{program}: {path}: No such file or directory")
            continue
        text = state.files[rel]
        lines = _lines(text)
        if program == "cat":
            out.append(text.rstrip("\n"))
        elif program == "head":
            out.append("\n".join(lines[:count]))
        elif program == "tail":
            out.append("\n".join(lines[-count:] if count else []))
        else:
            totals += len(lines)
            out.append(f"{len(lines):>5} {path}")
    if program == "wc" and len(paths) > 1:
        out.append(f"{totals:>5} total")
    return "\n".join(out)


# --------------------------------------------------------------------------- registry

DEMO_TOOLS: dict[str, Callable[..., str]] = {
    "read_file": read_file,
    "list_dir": list_dir,
    "grep": grep,
    "bash": bash,
    "fetch_url": fetch_url,
    "edit_file": edit_file,
}
"""Tool name → function; each takes the `DemoToolState` first, then the JSON arguments."""


def _schema(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 1}

DEMO_TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema(
        "read_file",
        "Read a text file of the repository. Lines are prefixed with their number (like "
        "`cat -n`); use start_line/end_line to read part of a long file.",
        {
            "path": {**_STR, "description": "File path, relative to the working directory."},
            "start_line": {**_INT, "description": "First line to read (1-based)."},
            "end_line": {**_INT, "description": "Last line to read (inclusive)."},
        },
        ["path"],
    ),
    _schema(
        "list_dir",
        "List a directory of the repository: subdirectories end with '/', files show sizes.",
        {"path": {**_STR, "description": "Directory path; '.' is the working directory."}},
        ["path"],
    ),
    _schema(
        "grep",
        "Search files for a regular expression (Python syntax). Prints path:line:text for "
        "each matching line.",
        {
            "pattern": {**_STR, "description": "Regular expression."},
            "path": {**_STR, "description": "File or directory to search recursively."},
        },
        ["pattern", "path"],
    ),
    _schema(
        "bash",
        "Run a shell command in the working directory and return its output (stdout and "
        "stderr). Use it for tests, git, pip and linters, not for reading or editing files.",
        {"command": {**_STR, "description": "The command line to run."}},
        ["command"],
    ),
    _schema(
        "fetch_url",
        "Fetch a URL over HTTP(S) and return the raw response body.",
        {"url": {**_STR, "description": "Absolute http(s) URL."}},
        ["url"],
    ),
    _schema(
        "edit_file",
        "Replace an exact snippet of a file. `old` must match the file's text exactly "
        "(without line-number prefixes) and occur exactly once; with an empty `old` a new "
        "file is created.",
        {
            "path": {**_STR, "description": "File to edit."},
            "old": {**_STR, "description": "Exact text to replace."},
            "new": {**_STR, "description": "Replacement text."},
        },
        ["path", "old", "new"],
    ),
]
"""OpenAI function-tool schemas, in the order the agent registered them."""


def run_demo_tool(name: str, arguments_json: str, state: DemoToolState) -> str:
    """Run one demo tool call the way an agent runtime would.

    Args:
        name: tool name (a key of `DEMO_TOOLS`).
        arguments_json: the call's arguments as JSON text (an object).
        state: the run's workspace; edits and installs change it.

    Returns:
        The tool's output, or an ``Error: …`` text for unknown tools and bad arguments.
    """
    tool = DEMO_TOOLS.get(name)
    if tool is None:
        return f"Error: unknown tool {name!r}; available: {', '.join(DEMO_TOOLS)}"
    try:
        arguments = json.loads(arguments_json) if arguments_json.strip() else {}
    except ValueError as exc:
        return f"Error: arguments of {name} are not valid JSON: {exc}"
    if not isinstance(arguments, dict):
        return f"Error: arguments of {name} must be a JSON object"
    try:
        return tool(state, **arguments)
    except TypeError as exc:
        return f"Error: bad arguments for {name}: {exc}"
    except (ValueError, KeyError) as exc:
        return f"Error: {name} failed: {exc}"

"""What a tool call does, read from its structure: files touched, shell command, symbols.

Tool arguments are exact (the model produced them), so they are the first source of the
session memory: `path` / `file_path` arguments, editor sub-commands (`str_replace_editor`),
apply-patch headers, and the programs and file operands of shell commands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cachepilot.memory import patterns

__all__ = [
    "READ_PROGRAMS",
    "CallFacts",
    "FileTouch",
    "analyze_call",
    "command_family",
    "command_key",
    "shell_facts",
]

_PATH_KEYS = (
    "file_path",
    "path",
    "filepath",
    "filename",
    "file",
    "file_name",
    "notebook_path",
    "target_file",
    "relative_workspace_path",
    "dir",
    "directory",
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_READ = _words(
    "read read_file view view_file open open_file cat notebookread readfile get_file fs_read "
    "read_many_files"
)
_EDIT = _words(
    "edit multiedit str_replace edit_file replace insert apply_patch patch notebookedit "
    "search_replace replace_in_file edit_notebook"
)
_WRITE = _words("write create create_file write_file write_to_file save_file")
_SEARCH = _words(
    "grep glob find find_file search_dir search_file search ls list_dir list_files "
    "codebase_search file_search ripgrep list_directory"
)
_SHELL = _words(
    "bash shell execute_bash run_command run terminal exec execute_command run_shell_command "
    "cmd sh powershell local_shell run_terminal_cmd"
)
_FINISH = _words("finish submit task_complete attempt_completion complete done")
_THINK = frozenset(("think",))
_TODO = frozenset(("todowrite", "todo_write", "write_todos", "update_plan", "todo"))
_DONE_STATES = frozenset(("completed", "complete", "done", "finished"))
_EDITOR_TOOLS = frozenset(
    ("str_replace_editor", "text_editor", "str_replace_based_edit_tool", "edit_tool")
)
_EDITOR_ACTIONS = {
    "view": "read",
    "create": "create",
    "str_replace": "edit",
    "insert": "edit",
    "undo_edit": "edit",
    "write": "create",
}
_NEW_CODE_KEYS = ("new_string", "new_str", "replace", "content", "file_text", "text", "code")
_OLD_CODE_KEYS = ("old_string", "old_str", "search")
_PATCH_FILE = re.compile(r"^(?:\*\*\* (?:Add|Update|Delete) File: |\+\+\+ b/)(\S{1,300})", re.M)
_TOKEN = re.compile(
    r"'[^']{0,4000}'|\"(?:[^\"\\]|\\.){0,4000}\"|[^\s'\";|&<>]+|&&|\|\||[;|&]|>>?|<<-?"
)
_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w{1,20})['\"]?")
_REDIRECT_NOISE = re.compile(
    r"\s+\d?>&\d|\s+\d?>\s*/dev/null|\s+\|\s*(?:tail|head)(?:\s+-n?\s*\d+)?\s*$"
)
_SUBCOMMAND_PROGRAMS = _words(
    "git mix npm yarn pnpm bun cargo go uv poetry pip pip3 docker make bd kubectl bundle rake "
    "dotnet gradle mvn npx conda brew apt apt-get gh rails django-admin composer deno"
)
_WRAPPERS = _words("sudo time timeout nohup env exec xvfb-run stdbuf nice")
_RUNNERS = (("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("bundle", "exec"), ("npx", ""))
_PACKAGE_MANAGERS = _words(
    "uv pip pip3 poetry pipenv conda npm yarn pnpm bun cargo mix bundle gem composer go mvn "
    "gradle dotnet brew apt apt-get"
)
READ_PROGRAMS = _words("cat head tail less more nl bat sed grep egrep rg ag ack find ls tree wc fd")
"""Programs whose output is file content or a listing (not scanned for errors)."""
_READERS = _words("cat head tail less more nl bat wc view xxd od file stat")
_SEARCHERS = _words("grep egrep rg ag ack find ls tree fd locate du")
_EDITORS = _words("vim vi nvim nano emacs code ed")
_NO_ERROR_FAMILIES = _words("grep egrep rg ag ack find diff test [ ls which cmp") | {
    "git diff",
    "git grep",
    "git status",
}
"""Command families whose non-zero exit is an answer (no match, files differ), not an error."""


@dataclass(frozen=True, slots=True)
class FileTouch:
    """A path a call touched and how (`read`, `edit`, `create`, `search`, `run`, `delete`…)."""

    path: str
    action: str


@dataclass(slots=True)
class CallFacts:
    """Everything the structure of one tool call tells."""

    tool: str
    files: list[FileTouch] = field(default_factory=list)
    command: str | None = None
    """The shell command, verbatim (first line when multi-line)."""
    family: str | None = None
    """Command family (`pytest`, `git commit`, `mix test`) or `tool:<name>` for other tools."""
    identifiers: list[tuple[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Free text the call states (a `think` tool's thought)."""
    todos: list[tuple[str, bool]] = field(default_factory=list)
    """A todo / plan tool's items: `(text, done)` (`TodoWrite`, `update_plan`)."""
    finish: bool = False
    cwd: str | None = None
    package_managers: list[str] = field(default_factory=list)
    errors_expected: bool = True
    """False for families whose non-zero exit is not an error (`grep` with no match…)."""


def _text(value: Any, limit: int = 200_000) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _simple_name(name: str) -> str:
    low = name.strip().lower()
    if low.startswith("mcp__"):
        low = low.rsplit("__", 1)[-1]
    return low.replace("-", "_")


def _action_for(name: str) -> str:
    if name in _READ:
        return "read"
    if name in _EDIT:
        return "edit"
    if name in _WRITE:
        return "create"
    if name in _SEARCH:
        return "search"
    for needle, action in (
        ("read", "read"),
        ("view", "read"),
        ("open", "read"),
        ("write", "create"),
        ("create", "create"),
        ("edit", "edit"),
        ("replace", "edit"),
        ("patch", "edit"),
        ("search", "search"),
        ("find", "search"),
        ("list", "search"),
    ):
        if needle in name:
            return action
    return "use"


def _introduced_symbols(args: Mapping[str, Any]) -> list[tuple[str, float]]:
    new = "\n".join(_text(args.get(k), 64_000) for k in _NEW_CODE_KEYS)
    edits = args.get("edits")
    if isinstance(edits, list):
        for edit in edits[:50]:
            if isinstance(edit, Mapping):
                new += "\n" + "\n".join(_text(edit.get(k), 16_000) for k in _NEW_CODE_KEYS)
    if not new.strip():
        return []
    old = "\n".join(_text(args.get(k), 64_000) for k in _OLD_CODE_KEYS)
    old_words = set(patterns.word_tokens(old))
    out: dict[str, float] = {name: 2.5 for name in patterns.code_definitions(new)}
    for word in patterns.word_tokens(new)[:40]:
        if word not in old_words:
            out.setdefault(word, 0.6)
    return list(out.items())


def _generic_identifiers(args: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Exact id-like argument values of domain tools (`reservation_id="ZFA04Y"`)."""
    out: list[tuple[str, float]] = []
    for key, value in list(args.items())[:20]:
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float):
            if key.lower().endswith(("id", "number", "count", "amount")):
                out.append((f"{key}={value}", 1.0))
            continue
        if not isinstance(value, str) or not value or len(value) > 60 or " " in value.strip():
            continue
        low = key.lower()
        if low.endswith(("id", "_ids", "name", "key", "code", "number", "ref")) or any(
            c.isdigit() for c in value
        ):
            out.append((value, 1.2))
    return out


def analyze_call(name: str, args: Mapping[str, Any]) -> CallFacts:
    """Read one tool call's structure.

    Args:
        name: the tool's name as the model called it.
        args: its parsed arguments (`{}` when they were not a JSON object).
    """
    tool = _simple_name(name)
    facts = CallFacts(tool=name, family=f"tool:{tool}")
    if tool in _SHELL or (tool not in _EDITOR_TOOLS and isinstance(args.get("cmd"), str)):
        command = _text(args.get("command") or args.get("cmd") or args.get("script"))
        if command.strip():
            _merge_shell(facts, shell_facts(command))
            return facts
    if tool in _EDITOR_TOOLS:
        action = _EDITOR_ACTIONS.get(str(args.get("command", "")), "edit")
    elif tool in _FINISH:
        facts.finish = True
        action = "use"
    else:
        action = _action_for(tool)
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip() and "\n" not in value and len(value) < 400:
            path_action = action
            if key in ("dir", "directory") or (action == "search" and key == "path"):
                path_action = "search"
            facts.files.append(FileTouch(value.strip(), path_action))
    paths = args.get("paths") or args.get("file_paths")
    if isinstance(paths, list):
        facts.files.extend(
            FileTouch(p.strip(), action) for p in paths[:50] if isinstance(p, str) and p.strip()
        )
    patch = _text(args.get("patch") or args.get("input"), 400_000)
    if tool in ("apply_patch", "patch") and patch:
        facts.files.extend(FileTouch(p, "edit") for p in _PATCH_FILE.findall(patch)[:50])
    if action in ("edit", "create") or tool in _EDIT or tool in _WRITE:
        facts.identifiers.extend(_introduced_symbols(args))
    if tool in ("grep", "search", "search_dir", "search_file", "ripgrep", "codebase_search"):
        query = _text(args.get("pattern") or args.get("search_term") or args.get("query"), 400)
        facts.identifiers.extend((w, 1.0) for w in patterns.word_tokens(query))
    if tool in _TODO:
        facts.todos = _todos(args)
        return facts
    if tool in _THINK:
        thought = _text(args.get("thought") or args.get("thoughts") or args.get("content"))
        if thought:
            facts.notes.append(thought[:4000])
    if not facts.files and tool not in _THINK and tool not in _FINISH:
        facts.identifiers.extend(_generic_identifiers(args))
    return facts


def _todos(args: Mapping[str, Any]) -> list[tuple[str, bool]]:
    items = args.get("todos") or args.get("plan") or args.get("items")
    out: list[tuple[str, bool]] = []
    if not isinstance(items, list):
        return out
    for entry in items[:50]:
        if isinstance(entry, Mapping):
            text = entry.get("content") or entry.get("step") or entry.get("text") or ""
            status = str(entry.get("status", "")).lower()
            if isinstance(text, str) and text.strip():
                out.append((text.strip()[:300], status in _DONE_STATES))
    return out


def _merge_shell(facts: CallFacts, shell: CallFacts) -> None:
    facts.files = shell.files
    facts.command = shell.command
    facts.family = shell.family
    facts.identifiers = shell.identifiers
    facts.finish = shell.finish
    facts.cwd = shell.cwd
    facts.package_managers = shell.package_managers
    facts.errors_expected = shell.errors_expected


def command_key(command: str) -> str:
    """Identity of a shell command: first line, whitespace collapsed, noise redirects dropped."""
    first = command.strip().splitlines()[0] if command.strip() else ""
    flat = " ".join(first.split())
    previous = None
    while previous != flat:
        previous = flat
        flat = _REDIRECT_NOISE.sub("", flat).strip()
    return flat[:300]


def _unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return token[1:-1]
    return token


def _segments(line: str) -> list[list[str]]:
    segments: list[list[str]] = [[]]
    for match in _TOKEN.finditer(line):
        token = match.group(0)
        if token in ("&&", "||", ";", "|", "&"):
            segments.append([])
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


def _program(tokens: list[str]) -> tuple[str, list[str]]:
    rest = list(tokens)
    while rest and (_ASSIGN.match(rest[0]) or rest[0] in _WRAPPERS):
        head = rest.pop(0)
        if head == "timeout" and rest and rest[0][:1].isdigit():
            rest.pop(0)
    while rest and not _unquote(rest[0]).strip():
        rest.pop(0)
    if not rest:
        return "", []
    return _unquote(rest[0]).rsplit("/", 1)[-1], rest[1:]


def _family(program: str, args: list[str]) -> str:
    plain = [a for a in args if not a.startswith("-")]
    if program.startswith("python"):
        if len(args) >= 2 and args[0] == "-m":
            return "pytest" if args[1] == "pytest" else f"python -m {args[1]}"
        return "python"
    if program in ("py.test", "pytest"):
        return "pytest"
    for runner, sub in _RUNNERS:
        if program == runner and (not sub or (plain and plain[0] == sub)):
            inner = plain[1:] if sub else plain
            if inner:
                return _family(inner[0].rsplit("/", 1)[-1], args[args.index(inner[0]) + 1 :])
    if program in _SUBCOMMAND_PROGRAMS and plain:
        return f"{program} {plain[0]}"
    return program


def _is_path_arg(token: str) -> bool:
    if not token or token.startswith("-") or len(token) > 300:
        return False
    if any(c in token for c in "$*?{}=`") or "://" in token or token.startswith("/dev/"):
        return False
    if any(c.isspace() for c in token):
        return False
    if token in (".", "..", "/", "~"):
        return False
    return "/" in token or bool(patterns.paths_in_text(token))


def _clean(token: str) -> str:
    return patterns.paths_in_text(token)[0] if patterns.paths_in_text(token) else token


def _effective(program: str, args: list[str]) -> tuple[str, list[str]]:
    """The program a runner runs: `uv run pytest x` → `pytest x`, `python -m pytest` too."""
    for _ in range(3):
        plain = [a for a in args if not a.startswith("-")]
        if program.startswith("python") and len(args) >= 2 and args[0] == "-m":
            return args[1], args[2:]
        runner = next(
            (
                sub
                for name, sub in _RUNNERS
                if name == program and (not sub or (plain and plain[0] == sub))
            ),
            None,
        )
        if runner is None:
            break
        inner = plain[1:] if runner else plain
        if not inner:
            break
        at = args.index(inner[0])
        program, args = inner[0].rsplit("/", 1)[-1], args[at + 1 :]
    return program, args


def _segment_files(program: str, args: list[str]) -> list[FileTouch]:
    out: list[FileTouch] = []
    program, args = _effective(program, [_unquote(a) for a in args])
    words = args
    redirect_targets: set[int] = set()
    for i, token in enumerate(words[:-1]):
        if token in (">", ">>"):
            redirect_targets.add(i + 1)
            action = "create" if token == ">" else "edit"
            if _is_path_arg(words[i + 1]):
                out.append(FileTouch(_clean(words[i + 1]), action))
    if program in _READERS:
        action = "read"
    elif program == "sed":
        action = "edit" if any(a.startswith("-i") for a in words) else "read"
    elif program in _SEARCHERS:
        action = "search"
    elif program in _EDITORS:
        action = "edit"
    elif program == "tee":
        action = "edit" if "-a" in words else "create"
    elif program == "touch":
        action = "create"
    elif program in ("rm", "unlink"):
        action = "delete"
    elif program in ("pytest", "py.test", "node", "ruby", "go", "cargo", "mix", "npm") or (
        program.startswith("python")
    ):
        action = "run"
    elif program == "git":
        action = "git"
    else:
        action = "use"
    skip_first_plain = program in ("sed", "grep", "egrep", "rg", "ag", "ack") and not any(
        a in ("-e", "-f") for a in words
    )
    for i, token in enumerate(words):
        if i in redirect_targets or token in (">", ">>", "<", "<<"):
            continue
        if skip_first_plain and not token.startswith("-"):
            skip_first_plain = False
            continue
        if _is_path_arg(token):
            touch_action = action
            if program in ("cp", "mv") and i == len(words) - 1:
                touch_action = "create"
            elif program in ("cp", "mv"):
                touch_action = "read"
            out.append(FileTouch(_clean(token), touch_action))
    return out


def shell_facts(command: str) -> CallFacts:
    """Read a shell command: its family, files (by program semantics), cwd, package managers."""
    text = command[:200_000]
    lines = text.splitlines() or [""]
    facts = CallFacts(tool="shell", command=patterns.clip(lines[0], 300))
    if len(lines) > 1:
        facts.command = patterns.clip(lines[0], 280) + " …"
    parse_lines = [lines[0]]
    heredoc = _HEREDOC.search(lines[0])
    body = ""
    if heredoc:
        end = next(
            (i for i, ln in enumerate(lines[1:], 1) if ln.strip() == heredoc.group(1)), len(lines)
        )
        body = "\n".join(lines[1:end])
        parse_lines.extend(lines[end + 1 : end + 20])
    else:
        parse_lines.extend(lines[1:40])
    family: str | None = None
    for line in parse_lines:
        for index, tokens in enumerate(_segments(line)):
            program, args = _program(tokens)
            if not program:
                continue
            if program == "cd" and args and facts.cwd is None and index == 0:
                target = _unquote(args[0])
                if target.startswith("/"):
                    facts.cwd = target.rstrip("/") or "/"
                continue
            if program in _PACKAGE_MANAGERS and program not in facts.package_managers:
                facts.package_managers.append(program)
            if family is None and program not in ("cd", "export", "source", ".", "set", "echo"):
                family = _family(program, [_unquote(a) for a in args])
            facts.files.extend(_segment_files(program, args))
            if "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in line or program == "submit":
                facts.finish = True
            for arg in args[:30]:
                word = _unquote(arg)
                if word.startswith("-") or _is_path_arg(word):
                    continue
                if patterns.is_ticket(word):
                    facts.identifiers.append((word, 1.5))
                elif patterns.word_tokens(word) == [word]:
                    facts.identifiers.append((word, 0.8))
    if body:
        facts.identifiers.extend((n, 2.0) for n in patterns.code_definitions(body))
    facts.family = family or "shell"
    facts.errors_expected = facts.family not in _NO_ERROR_FAMILIES
    return facts


def command_family(command: str) -> str:
    """The family of a shell command (`pytest`, `git commit`, `mix test`, `python`)."""
    return shell_facts(command).family or "shell"

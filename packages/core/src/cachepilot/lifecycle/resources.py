"""What a tool call touched: files read, edited or written, commands run, identifiers.

Heuristics over tool-call structure (exact) first: file tools by name and path argument
(Claude Code `Read`/`Edit`/`Write`, editor tools with a `command`, SWE-agent `open`/`edit`
on the open file, generic `*_write` / `*_edit` names), shell commands parsed into simple
commands (`cat`/`sed -n`/`head` reads, `sed -i` edits, `>` writes, `rm` deletes, anything
else a run), everything else a run keyed by `reduce.source_key`. Total: never raises.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cachepilot.lifecycle.model import Effect, EffectOp
from cachepilot.messages import Message, ReasoningPart, TextPart
from cachepilot.reduce import classify_tool, coerce_args, source_key
from cachepilot.support.redact import redact

__all__ = [
    "DONE_MARKERS",
    "DONE_TOOLS",
    "GENERIC_BASENAMES",
    "CallFacts",
    "call_facts",
    "looks_failed",
    "looks_like_path",
    "mention_tokens",
    "message_mentions",
    "normalize_path",
    "output_facts",
    "path_variants",
    "same_path",
    "shell_facts",
]


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


GENERIC_BASENAMES = _wordset(
    "__init__.py __main__.py setup.py conftest.py main.py utils.py index.js index.ts main.go "
    "mod.rs lib.rs README.md package.json Makefile CMakeLists.txt"
)
"""File names too common to identify a file on their own (matched only with a parent dir)."""

DONE_TOOLS = _wordset(
    "finish submit task_complete complete_task attempt_completion final_answer done end_task "
    "task_done"
)
"""Tool names by which an agent declares its task done."""

DONE_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
"""Shell-command markers by which mini-swe-agent style agents declare done."""

_EXTENSIONS = _wordset(
    "py pyi pyx js jsx ts tsx mjs cjs json jsonl yaml yml toml ini cfg conf txt md rst c h "
    "cc cpp hpp cxx hh java kt kts go rs rb php cs swift m mm scala sh bash zsh ps1 sql "
    "html htm css scss sass less xml csv tsv log lock ex exs eex heex erl hrl hs ml mli lua "
    "r pl pm tex ipynb vue svelte proto gradle mk cmake env patch diff out pony tf hcl dart "
    "clj fs vb bat properties gemspec podspec sbt nix zig jl"
)
_PATH_BAD_CHARS = frozenset("=$`*?[]{}()<>|;&\"',\\\n\r\t\x00 ")
_TOKEN = re.compile(r"[\w./~+-]+")
_STEM = re.compile(r"[\w.+-]+")
_FILE_ARGS = ("file_path", "path", "filepath", "filename", "file", "notebook_path")
_RANGE_ARGS = _wordset(
    "offset limit view_range line_number start_line end_line lines range line start end"
)
_CONTENT_ARGS = _wordset(
    "content contents text new_string old_string new_str old_str description thought summary "
    "message prompt body code command cmd script replace search edits"
)
_EDITOR_NAMES = frozenset(
    {"str_replace_editor", "str_replace_based_edit_tool", "text_editor", "edit_file", "editor"}
)
_WRITE_WORDS = frozenset({"write", "create", "save", "overwrite", "put"})
_EDIT_WORDS = frozenset({"edit", "replace", "patch", "insert", "append", "modify", "multiedit"})
_DELETE_WORDS = frozenset({"delete", "remove", "unlink", "rm"})
_VIEW_WINDOW_TOOLS = frozenset({"goto", "scroll_up", "scroll_down"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")
_MAX_RESOURCES = 24
_MAX_LABEL = 160
_MAX_IDENT = 80

# shell
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w]*)\1")
_CMD_SEPARATORS = frozenset({"&&", "||", ";", "\n", "&", ";;", "(", ")"})
_REDIRECT_OUT = frozenset({">", ">|", "&>"})
_REDIRECT_APPEND = frozenset({">>", "&>>"})
_REDIRECT_SKIP = frozenset({"<", "<<", "<<<", ">&", "<&", "<<-"})
_PREFIX_WORDS = frozenset({"sudo", "time", "nohup", "command", "builtin", "exec"})
_NOOP_COMMANDS = frozenset({"cd", "pushd", "popd", "true", ":", "export", "set", "clear"})
_FILTER_COMMANDS = frozenset({"sed", "head", "tail", "nl", "cat"})
_TRAILING_FILTER = re.compile(r"\s*\|\s*(?:head|tail)(?:\s+-[-\w]+(?:\s+\d+)?)*\s*$")
_LEADING_CD = re.compile(r"^\s*cd\s+[^;&|\n]+?\s*(?:&&|;)\s*")
_STDERR_MERGE = re.compile(r"\s*2>&1")
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_EXIT_CODE = re.compile(r"exit code (-?\d+)", re.IGNORECASE)


def _snake(name: str) -> str:
    return _CAMEL.sub("_", str(name)).lower().strip()


def _words(name: str) -> set[str]:
    return {w for w in _SPLIT.split(_snake(name)) if w}


def normalize_path(raw: object) -> str | None:
    """A path as the registry compares it (`./a//b/` -> `a/b`); `None` when not a file path."""
    if not isinstance(raw, str):
        return None
    text = raw.strip().strip("'\"`")
    if not text or len(text) > 300 or "\n" in text or "\x00" in text or "://" in text:
        return None
    if text.startswith(("/dev/", "/proc/")) or text in {"-", ".", "..", "/", "~"}:
        return None
    norm = posixpath.normpath(text)
    if norm in {".", "/", ".."}:
        return None
    return norm[2:] if norm.startswith("./") else norm


def _components(path: str) -> list[str]:
    return [c for c in path.split("/") if c]


def same_path(a: str, b: str) -> bool:
    """True when two normalised paths name the same file.

    Equal, or one ends with the other at a `/` boundary: when the shorter has at least two
    components (`/testbed/src/a.py` ~ `src/a.py`), or it is a bare name and the longer has at
    most two (`/testbed/x.py` ~ `x.py`). Different working directories are not tracked.
    """
    if a == b:
        return True
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    if not long.endswith("/" + short.lstrip("/")) or short.startswith("/"):
        return False
    if len(_components(short)) >= 2:
        return True
    return len(_components(long)) <= 2


def path_variants(path: str) -> set[str]:
    """Lookup keys of a path: itself and every suffix at a `/` boundary (bare names only when
    not in `GENERIC_BASENAMES`)."""
    parts = _components(path)
    out = {path}
    for start in range(1, len(parts)):
        suffix = "/".join(parts[start:])
        if start == len(parts) - 1 and suffix in GENERIC_BASENAMES:
            continue
        out.add(suffix)
    return out


def looks_like_path(token: str) -> bool:
    """True for a shell word or argument that names a file (`src/a.py`, `setup.cfg`)."""
    if not token or len(token) > 300 or token.startswith("-") or "://" in token:
        return False
    if any(ch in _PATH_BAD_CHARS for ch in token):
        return False
    if "/" in token:
        return any(ch.isalpha() for ch in token) and not token.startswith(("/dev/", "/proc/"))
    stem, dot, ext = token.rpartition(".")
    return bool(dot and stem and ext.lower() in _EXTENSIONS and _STEM.fullmatch(stem))


def _identifier_like(token: str) -> bool:
    if not 3 <= len(token) <= _MAX_IDENT:
        return False
    if token.isdigit():
        return len(token) >= 4
    return (
        any(ch.isdigit() for ch in token)
        or "_" in token.strip("_")
        or any(ch.isupper() for ch in token[1:])
        or (token.isupper() and token.isalpha())
    )


def mention_tokens(text: str) -> set[str]:
    """Lookup keys of everything in `text` that could name a resource (paths get every
    `path_variants` key, other words themselves)."""
    out: set[str] = set()
    for raw in _TOKEN.findall(text):
        token = raw.rstrip(".-")
        if len(token) < 2:
            continue
        if "/" in token:
            norm = normalize_path(token)
            if norm is not None:
                out |= path_variants(norm)
            continue
        if token.startswith("./"):
            token = token[2:]
        out.add(token)
    return out


def output_facts(text: str, limit: int = 400) -> set[str]:
    """Identifier-like values in a tool output that a later message may quote: words with a
    digit and a letter or separator (`credit_card_44214`, `HAT078`, `2024-05-27`, `9f2c41d`),
    at most `limit` distinct ones. Pure numbers (line numbers) are left out."""
    out: set[str] = set()
    # A repeated word adds nothing new, so each distinct one is judged once, in order.
    for raw in dict.fromkeys(_TOKEN.findall(text)):
        token = raw.rstrip(".-")
        # `isalpha`: no digit at all (the common case, decided in C); a token that is not all
        # digits has a non-digit, so it qualifies when it has any digit.
        if not 4 <= len(token) <= _MAX_IDENT or token.isalpha() or token.isdigit() or "/" in token:
            continue
        if any(map(str.isdigit, token)):
            out.add(token)
            if len(out) >= limit:
                break
    return out


def _walk_strings(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 4:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _walk_strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value[:50]:
            yield from _walk_strings(item, depth + 1)


def message_mentions(message: Message) -> set[str]:
    """Lookup keys of what a user or assistant message mentions (text, reasoning, arguments)."""
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart | ReasoningPart):
            pieces.append(part.text)
    for call in message.tool_calls:
        pieces.extend(_walk_strings(call.parsed_arguments() or call.arguments))
    return mention_tokens("\n".join(pieces))


def looks_failed(text: str) -> bool:
    """True when a tool result reads like a failure (error text or a non-zero exit code)."""
    head = text.lstrip()[:200].lower()
    if head.startswith(
        ("error", "<tool_use_error>", "failed", "traceback", "exception", "no replacement")
    ):
        return True
    code = _RETURNCODE.search(text[:200])
    if code is not None:
        return code.group(1) != "0"
    tail_code = _EXIT_CODE.findall(text[-300:])
    return bool(tail_code) and tail_code[-1] != "0"


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What one tool call did, as far as its name and arguments tell."""

    effects: tuple[Effect, ...]
    resources: tuple[str, ...]
    label: str
    done: bool = False
    """The call declares the task done (`finish`, `submit`, a done marker…)."""
    open_file: str | None = None
    """Editor tools: the file open after the call (`None`: unchanged)."""


def _first_path(args: Mapping[str, Any]) -> str | None:
    for name in _FILE_ARGS:
        value = args.get(name)
        if isinstance(value, str):
            norm = normalize_path(value)
            if norm is not None:
                return norm
    return None


def _span(args: Mapping[str, Any]) -> str:
    picked = {k: args[k] for k in sorted(args) if k in _RANGE_ARGS and args[k] not in (None, "")}
    if not picked:
        return ""
    return json.dumps(picked, sort_keys=True, separators=(",", ":"), default=str)


def _label(name: str, args: Mapping[str, Any]) -> str:
    key = source_key(name, args)
    shown = key[len(name) + 1 :] if key.startswith(f"{name}:") else key
    shown = shown.strip().splitlines()[0] if shown.strip() else ""
    if len(shown) > 60:
        shown = shown[:59] + "…"
    return f"{name} {shown}".strip()


def _arg_resources(args: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for name in sorted(args):
        if name in _CONTENT_ARGS:
            continue
        for raw_text in _walk_strings(args[name]):
            if len(raw_text) > 300:
                continue
            text = redact(raw_text)  # resources are kept in state: no credential shapes
            if name in _FILE_ARGS or looks_like_path(text.strip()):
                norm = normalize_path(text)
                if norm is not None:
                    out.append(f"path:{norm}")
                    continue
            for raw in _TOKEN.findall(text):
                token = raw.rstrip(".-")
                if _identifier_like(token):
                    out.append(f"id:{token}")
    return out


def _dedupe(items: Iterable[str], cap: int = _MAX_RESOURCES) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))[:cap]


def call_facts(name: str, raw_args: object, open_file: str | None = None) -> CallFacts:
    """Effects, resources and a label for one tool call.

    Args:
        name: the tool's name.
        raw_args: its arguments (dict or JSON text).
        open_file: editor tools' currently open file (SWE-agent `edit` has no path argument).
    """
    try:
        return _call_facts(str(name), coerce_args(raw_args), open_file)
    except Exception:  # heuristics must never break observation
        args = coerce_args(raw_args) if isinstance(raw_args, Mapping | str) else {}
        return CallFacts(
            effects=(Effect(op="run", target=source_key(str(name), args)),),
            resources=(f"src:{source_key(str(name), args)}",),
            label=str(name)[:_MAX_LABEL],
        )


def _call_facts(name: str, args: dict[str, Any], open_file: str | None) -> CallFacts:
    snake = _snake(name)
    words = _words(name)
    key = source_key(name, args)
    label = _label(name, args)
    path = _first_path(args)
    resources = [f"src:{key}", *_arg_resources(args)]
    done = snake in DONE_TOOLS
    effects: list[Effect] = []
    new_open: str | None = None

    if snake in _EDITOR_NAMES and path is not None:
        command = str(args.get("command", ""))
        if command == "view":
            effects.append(Effect(op="read", target=path, span=_span(args)))
        elif command == "create":
            effects.append(Effect(op="write", target=path))
        else:
            effects.append(Effect(op="edit", target=path))
    elif snake in _VIEW_WINDOW_TOOLS and open_file is not None:
        effects.append(Effect(op="read", target=open_file, span=f"{snake}:{_span(args)}"))
    elif classify_tool(name, args) == "file_read" and path is not None:
        effects.append(Effect(op="read", target=path, span=_span(args)))
        new_open = path
    elif classify_tool(name, args) == "shell":
        command = next(
            (
                args[k]
                for k in ("command", "cmd", "script", "input")
                if isinstance(args.get(k), str)
            ),
            "",
        )
        shell_effects, paths, shell_done = shell_facts(name, redact(command))
        effects.extend(shell_effects)
        resources.extend(f"path:{p}" for p in paths)
        done = done or shell_done
        label = _label(name, {"command": _normalize_command(command)})
    elif path is not None and words & _DELETE_WORDS:
        effects.append(Effect(op="write", target=path))
    elif path is not None and words & _WRITE_WORDS:
        effects.append(Effect(op="write", target=path))
        new_open = path
    elif path is not None and words & _EDIT_WORDS:
        effects.append(Effect(op="edit", target=path))
    elif path is None and open_file is not None and snake in {"edit", "insert", "append"}:
        effects.append(Effect(op="edit", target=open_file))
        resources.append(f"path:{open_file}")
    elif "todo" in words or snake.startswith("todo"):
        effects.append(Effect(op="run", target=name))  # each call replaces the whole list
    if not effects:
        effects.append(Effect(op="run", target=key))
    for effect in effects:
        if effect.op != "run":
            resources.append(f"path:{effect.target}")
    return CallFacts(
        effects=tuple(effects),
        resources=_dedupe(resources),
        label=label[:_MAX_LABEL],
        done=done,
        open_file=new_open,
    )


# --- shell ---------------------------------------------------------------------------------


def _strip_heredocs(command: str) -> str:
    """The command without here-document bodies (their text is data, not commands)."""
    lines = command.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        out.append(line)
        index += 1
        for match in _HEREDOC.finditer(line):
            delimiter = match.group(2)
            while index < len(lines) and lines[index].strip() != delimiter:
                index += 1
            index += 1  # the delimiter line
    return "\n".join(out)


def _normalize_command(command: str) -> str:
    """A command as a re-run is compared: no leading `cd …&&`, no `2>&1`, no trailing
    `| head`/`| tail`, single spaces."""
    text = command.strip()
    previous = None
    while previous != text:
        previous = text
        text = _LEADING_CD.sub("", text, count=1)
    text = _STDERR_MERGE.sub("", text)
    previous = None
    while previous != text:
        previous = text
        text = _TRAILING_FILTER.sub("", text)
    return " ".join(text.split())


def _tokenize(command: str) -> list[str] | None:
    lexer = shlex.shlex(command, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


@dataclass(slots=True)
class _Simple:
    words: list[str]
    writes: list[str]
    appends: list[str]


def _split_commands(tokens: list[str]) -> list[list[_Simple]]:
    """Tokens -> list of pipelines, each a list of simple commands."""
    pipelines: list[list[_Simple]] = []
    pipeline: list[_Simple] = []
    current = _Simple([], [], [])
    index = 0

    def close_simple() -> None:
        nonlocal current
        if current.words or current.writes or current.appends:
            pipeline.append(current)
        current = _Simple([], [], [])

    while index < len(tokens):
        token = tokens[index]
        nxt = tokens[index + 1] if index + 1 < len(tokens) else None
        if token in _CMD_SEPARATORS:
            close_simple()
            if pipeline:
                pipelines.append(pipeline)
                pipeline = []
        elif token in {"|", "|&"}:
            close_simple()
        elif token in _REDIRECT_OUT or token in _REDIRECT_APPEND:
            if nxt is not None:
                target = normalize_path(nxt)
                if target is not None:
                    (current.writes if token in _REDIRECT_OUT else current.appends).append(target)
                index += 1
        elif token in _REDIRECT_SKIP:
            index += 1
        elif token.isdigit() and nxt is not None and nxt[:1] in {">", "<"}:
            pass  # a file-descriptor number before a redirection
        else:
            current.words.append(token)
        index += 1
    close_simple()
    if pipeline:
        pipelines.append(pipeline)
    return pipelines


def _command_words(words: list[str]) -> list[str]:
    index = 0
    while index < len(words):
        word = words[index]
        if (
            "=" in word and not word.startswith("-") and word.split("=", 1)[0].isidentifier()
        ) or word in _PREFIX_WORDS:
            index += 1
        elif word == "timeout" and index + 1 < len(words):
            index += 2
        else:
            break
    return words[index:]


def _file_args(words: list[str], *, skip_script: bool = False) -> list[str]:
    out: list[str] = []
    script_taken = not skip_script
    skip_next = False
    for word in words[1:]:
        if skip_next:
            skip_next = False
            continue
        if word in {"-e", "--expression", "-f"}:
            script_taken = True
            skip_next = True
            continue
        if word.startswith("-") and word != "-":
            continue
        if not script_taken:
            script_taken = True
            continue
        if looks_like_path(word):
            norm = normalize_path(word)
            if norm is not None:
                out.append(norm)
    return out


def _is_sed_inplace(words: list[str]) -> bool:
    return any(w == "-i" or w.startswith(("-i", "--in-place")) for w in words[1:])


def _read_span(words: list[str]) -> str | None:
    """Span of a reading command (`""`: whole file); `None` when it is not a read."""
    program = posixpath.basename(words[0])
    if program in {"cat", "nl", "less", "more", "bat", "batcat"}:
        return ""
    if program in {"head", "tail"}:
        return " ".join([program, *[w for w in words[1:] if not looks_like_path(w)]])
    if program == "sed" and "-n" in words[1:] and not _is_sed_inplace(words):
        script = next((w for w in words[1:] if not w.startswith("-")), "")
        return f"sed {script}"
    return None


def shell_facts(tool: str, command: str) -> tuple[list[Effect], list[str], bool]:
    """Parse a shell command into effects, the paths it names, and whether it declares done.

    Reads (`cat f`, `nl -ba f | sed -n 1,20p`, `head f`, `sed -n 5,9p f`), in-place edits
    (`sed -i`, `perl -pi`, `>> f`, `tee -a f`), whole writes (`> f`, `tee f`, `rm f`). When
    any part of the command is something else, one `run` effect keyed by the normalised
    command is added (`cd x && pytest 2>&1 | tail -5` re-runs `pytest`).
    """
    done = any(marker in command for marker in DONE_MARKERS)
    run = Effect(op="run", target=source_key(tool, {"command": _normalize_command(command)}))
    body = _strip_heredocs(command)
    tokens = _tokenize(body)
    if tokens is None:
        found = [p for p in (normalize_path(t) for t in _TOKEN.findall(body)) if p]
        return [run], [p for p in found if looks_like_path(p)][:_MAX_RESOURCES], done
    effects: list[Effect] = []
    paths: list[str] = []
    other = False
    for pipeline in _split_commands(tokens):
        first = pipeline[0]
        for simple in pipeline:
            for target in simple.writes:
                effects.append(Effect(op="write", target=target))
            for target in simple.appends:
                effects.append(Effect(op="edit", target=target))
        words = _command_words(first.words)
        if not words:
            continue
        program = posixpath.basename(words[0])
        if program in _NOOP_COMMANDS:
            continue
        files = _file_args(words, skip_script=program in {"sed", "perl", "awk"})
        paths.extend(files)
        for simple in pipeline[1:]:
            paths.extend(_file_args(_command_words(simple.words)) if simple.words else [])
        span = _read_span(words)
        if span is not None and files:
            filters = [_command_words(s.words) for s in pipeline[1:]]
            if all(f and posixpath.basename(f[0]) in _FILTER_COMMANDS for f in filters):
                extra = " | ".join(" ".join(f) for f in filters)
                full = " | ".join(x for x in (span, extra) if x)
                effects.extend(Effect(op="read", target=f, span=full) for f in files)
                continue
        if program in {"sed", "perl"} and _is_sed_inplace(words) and files:
            effects.extend(Effect(op="edit", target=f) for f in files)
            continue
        if program == "rm" and files:
            effects.extend(Effect(op="write", target=f) for f in files)
            continue
        if program == "tee" and files:
            op: EffectOp = "edit" if any(w in {"-a", "--append"} for w in words) else "write"
            effects.extend(Effect(op=op, target=f) for f in files)
            continue
        if program in {"cat", "echo", "printf"} and not files and (first.writes or first.appends):
            continue  # `cat <<EOF > f`, `echo x > f`: the write is the whole effect
        other = True
        if len(pipeline) > 1:
            for simple in pipeline[1:]:
                sub = _command_words(simple.words)
                if sub and posixpath.basename(sub[0]) == "tee":
                    sub_files = _file_args(sub)
                    sub_op: EffectOp = (
                        "edit" if any(w in {"-a", "--append"} for w in sub) else "write"
                    )
                    effects.extend(Effect(op=sub_op, target=f) for f in sub_files)
    if other or not effects:
        effects.append(run)
    for effect in effects:
        if effect.op != "run":
            paths.append(effect.target)
    return effects, list(dict.fromkeys(paths))[:_MAX_RESOURCES], done

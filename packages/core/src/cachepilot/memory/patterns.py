"""Text patterns the session memory reads: paths, identifiers, errors, test summaries, cues.

Every regex here is linear-time (bounded repetitions, no nested unbounded quantifiers), and
callers pass bounded windows of long text (`window`), so a 1 MB tool output costs one scan.
"""

from __future__ import annotations

import re

__all__ = [
    "FILE_EXTENSIONS",
    "asks_user",
    "clip",
    "code_definitions",
    "completion_cue",
    "decisions",
    "first_sentence",
    "identifiers",
    "is_ticket",
    "numbers_with_units",
    "paths_in_text",
    "plan_steps",
    "scrub",
    "signature",
    "specificity",
    "task_body",
    "task_text",
    "window",
    "word_tokens",
]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


FILE_EXTENSIONS = _words(
    "ex exs heex eex leex erl hrl js jsx ts tsx mjs cjs py pyi pyx rb go rs c h cc cpp "
    "cxx hpp hh java kt kts swift cs fs php pl sh bash zsh fish ps1 md rst txt adoc json "
    "jsonl yaml yml toml ini cfg conf lock css scss sass less html htm xml svg sql csv "
    "tsv proto graphql gql vue svelte lua pony traj ipynb env mk cmake gradle scala clj "
    "dart jl r tf hcl dockerfile gitignore patch diff log out ml mli hs elm zig nim v sv "
    "vhd tex bib"
)
"""File extensions that make a dot-token a path (`config.py`, `app.js`)."""

_WS = re.compile(r"\s+")
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,20}[A-Za-z]|\x1b\][^\x07\n]{0,200}\x07|\r(?!\n)")
_CODE = re.compile(r"(?<![\w-])(?=[A-Z0-9]{0,11}\d)(?=[0-9]{0,11}[A-Z])[A-Z0-9]{5,12}(?![\w-])")
_MONEY = re.compile(
    r"(?<![\w$])\$\d{1,3}(?:,\d{3}){0,4}(?:\.\d{1,2})?(?![\d])|(?<![\w$])\$\d{1,9}(?:\.\d{1,2})?(?!\d)"
)
_PATH = re.compile(
    r"(?<![\w@$%/.:~-])"
    r"(?:"
    r"(?:~|\.{1,2})?/(?:[\w@+-][\w.@+-]{0,120}/){0,30}[\w@+-][\w.@+-]{0,120}/?"
    r"|(?:[\w@+-][\w.@+-]{0,120}/){1,30}[\w.@+-]{0,120}"
    r"|[\w@+-][\w@+-]{0,120}(?:\.[\w@+-]{1,60}){1,5}"
    r")"
)
_PATH_TAIL = re.compile(r"(?::\d+){1,2}$|::[\w\[\].-]*$")
_SYMBOL_WORD = re.compile(
    r"\b(?:_?[A-Za-z][A-Za-z0-9]{0,60}(?:_[A-Za-z0-9]{1,60}){1,12}"
    r"|[A-Za-z0-9]{0,60}[a-z][A-Z][A-Za-z0-9]{0,60})\b"
)
_BACKTICK = re.compile(r"`([^`\n]{1,120})`")
_TICKET = re.compile(
    r"(?<![\w/.-])(?:[A-Z][A-Z0-9]{1,9}-\d{1,6}|[a-z][a-z0-9]{1,20}-[a-z0-9]{2,12}(?:\.\d{1,4}){0,3}"
    r"|#\d{2,6})(?![\w/-])"
)
_TICKET_SHAPE = re.compile(
    r"[A-Z][A-Z0-9]{1,9}-\d{1,6}|[a-z][a-z0-9]{1,20}-(?=[a-z]{0,11}\d|[a-z]{3}\b)[a-z0-9]{2,12}"
    r"(?:\.\d{1,4}){0,3}|#\d{2,6}"
)
_SYMBOL = re.compile(r"[:@]?[A-Za-z_][\w.]{0,100}[?!]?")
_NUM_UNIT = re.compile(
    r"(?<![\w.])\d{1,9}(?:\.\d{1,6})?(?:\s?(?:ms|sec|secs|seconds|minutes|mins|hours|KB|MB|GB|"
    r"kB|KiB|MiB|GiB|tokens|tests|doctests|failures|errors|files|lines|chars|bytes|rows|"
    r"requests|calls|px|rem)|%|ms|s|m|h|x)(?![\w%])"
)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_STRONG_CUE = re.compile(
    r"\b(?:because|instead(?: of)?|rather than|root cause|the (?:fix|issue|problem|cause|bug|"
    r"solution|reason|plan|approach) (?:is|was|here is)|decided|decision|so that|which means|"
    r"in order to|the key (?:is|was)|doesn't support|does not support|must|should not|"
    r"shouldn't|won't work|need to)\b",
    re.IGNORECASE,
)
_INTENT_CUE = re.compile(
    r"^(?:I'll|I will|I'm going to|I need to|We need to|We'll|Let's|Next,? I|Now I|"
    r"The fix|I should|We should|Plan:|Approach:)",
    re.IGNORECASE,
)
_LET_ME = re.compile(r"^(?:Let me|Now let me|First,? let me|Now,? )", re.IGNORECASE)
_DONE_CUE = re.compile(
    r"\b(?:all (?:\d+ )?tests? (?:now )?pass\w*|all green|tests? (?:now )?pass(?:es|ed)?\b|"
    r"(?:is|are) (?:now )?(?:done|complete|completed|fixed|resolved)\b|"
    r"successfully (?:implemented|fixed|completed|committed|pushed|resolved)|"
    r"committed and pushed|task (?:is )?(?:complete|completed|done)|"
    r"I have (?:completed|fixed|implemented|resolved)|has been (?:fixed|resolved|implemented))",
    re.IGNORECASE,
)
_HEX = re.compile(r"0x[0-9a-fA-F]{1,16}")
_DIGITS = re.compile(r"\d{1,20}")
_DEFINITION = re.compile(
    r"\b(?:def|defp|defmacro|defmodule|defstruct|defprotocol|defimpl|class|function|func|fn|"
    r"struct|enum|trait|interface|type|module|impl)\s{1,4}([A-Za-z_][\w.]{1,80}[?!]?)"
)
_NOISE_USER = (
    "<task-notification>",
    "[Request interrupted",
    "<system-reminder>",
    "<command-name>",
    "<command-message>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "Caveat:",
    "Please always provide EXACTLY ONE action",
    "Please format your action",
    "Your response must contain",
    "Your last command ran successfully",
    "Observation:",
    "OBSERVATION:",
    "<returncode>",
    "<user-prompt-submit-hook>",
    "<RUNTIME_INFORMATION>",
    "<EXTRA_INFO>",
    "This session is being continued from a previous conversation",
)
_ACK = re.compile(
    r"^(?:ok(?:ay)?|yes|yep|yeah|sure|continue|go on|go ahead|proceed|keep going|check again|"
    r"thanks?(?: you)?|thx|looks good|lgtm|do it|try again|retry|please continue|next)\W{0,5}$"
    r"|^(?:thanks?|thank you)\b[^\n]{0,80}$|^###STOP###$",
    re.IGNORECASE,
)
_TASK_TAGS = (
    "pr_description",
    "issue_description",
    "issue",
    "task",
    "problem_statement",
    "user_request",
)
_TASK_BOILER = re.compile(
    r"^(?:Consider the following (?:PR|issue) description:?|#{1,6}\s*(?:Description|"
    r"Summary|Issue|Problem)\s*:?|Description:?|<[\w_-]{1,40}>|</[\w_-]{1,40}>)$",
    re.IGNORECASE,
)
_COMMON_WORDS = _words(
    "self this that true false none null nil return import from class def end else elif "
    "then with when case also into only just the and for not"
)


def scrub(text: str) -> str:
    """`text` with lone surrogates (undecodable bytes) replaced, so it serialises as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def clip(text: str, limit: int) -> str:
    """`text` on one line (whitespace collapsed), cut at a word boundary to `limit` chars."""
    flat = _WS.sub(" ", text[: limit * 4 + 64]).strip()
    if len(flat) <= limit:
        return flat
    cut = flat[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:…") + "…"


def first_sentence(text: str) -> str:
    """The first sentence of `text` (up to `.`, `!` or `?` followed by a space, or a newline)."""
    piece = _SENTENCE_BREAK.split(text.strip()[:2_000], maxsplit=1)[0]
    return piece.strip()


def window(text: str, head: int = 48_000, tail: int = 24_000) -> str:
    """The head and tail of a long text (what pattern scans look at)."""
    if len(text) > head + tail:
        text = text[:head] + "\n" + text[-tail:]
    text = scrub(text)
    return _ANSI.sub("", text) if "\x1b" in text or "\r" in text else text


def signature(text: str) -> str:
    """Normalized form of an error line: numbers and addresses masked, whitespace collapsed."""
    flat = _HEX.sub("0x?", _WS.sub(" ", text).strip())
    return _DIGITS.sub("#", flat)[:200]


def _clean_path(raw: str) -> str:
    path = _PATH_TAIL.sub("", raw.rstrip(".,:;!?)'\"`]"))
    return path.rstrip(".,:;")


def _has_extension(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if "." not in name.strip("."):
        return False
    return name.rsplit(".", 1)[-1].lower() in FILE_EXTENSIONS


def paths_in_text(text: str) -> list[str]:
    """Path-like tokens of prose or output, first occurrence order.

    A token counts when it has a known file extension, or starts at a root (`/`, `./`,
    `../`, `~/`) with at least two segments, or ends with `/` (a folder). Slash-joined words
    (`open/closed`) and URLs do not.
    """
    out: dict[str, None] = {}
    for match in _PATH.finditer(text):
        start = match.start()
        if text.startswith("//", match.end() - 2) or text[max(0, start - 3) : start] == "://":
            continue
        path = _clean_path(match.group(0))
        if len(path) < 3 or "//" in path:
            continue
        rooted = path.startswith(("/", "./", "../", "~/"))
        if _has_extension(path):
            out.setdefault(path, None)
        elif rooted and path.strip("/").count("/") >= 1 and not path.startswith("/dev/"):
            out.setdefault(path.rstrip("/") if len(path) > 1 else path, None)
        elif path.endswith("/") and path.count("/") >= 2:
            out.setdefault(path, None)
    return list(out)


def word_tokens(text: str) -> list[str]:
    """CamelCase and snake_case words of `text` (code symbols), first occurrence order."""
    out: dict[str, None] = {}
    for match in _SYMBOL_WORD.finditer(text):
        word = match.group(0)
        if len(word) >= 4 and word not in out and word.lower() not in _COMMON_WORDS:
            out[word] = None
    return list(out)


def _is_symbol_word(word: str) -> bool:
    return len(word) >= 4 and _SYMBOL_WORD.fullmatch(word) is not None


def specificity(value: str) -> float:
    """How specific an exact value is: 1 for compound symbols, ids and numbers with units,
    0.35 for a plain word (`line`, `mount`, `App`), which names little on its own."""
    core = value.lstrip(":@")
    if any(c in core for c in "_.-/#=") or any(c.isdigit() for c in core):
        return 1.0
    if _is_symbol_word(core):
        return 1.0
    return 0.35


def is_ticket(token: str) -> bool:
    """A ticket-like id: `ABC-123`, `#1234`, `spotter-gqc.4` (kebab with a digit or dot part)."""
    return _TICKET_SHAPE.fullmatch(token) is not None


def identifiers(text: str) -> list[tuple[str, float]]:
    """Exact values named in prose: backticked symbols (weight 2), tickets (1.5), code words (1).

    Returns:
        `(value, weight)` pairs, first occurrence order, each value once (highest weight).
    """
    found: dict[str, float] = {}

    def put(value: str, weight: float) -> None:
        if weight > found.get(value, 0.0):
            found[value] = weight

    for match in _BACKTICK.finditer(text):
        inner = match.group(1).strip()
        inner = re.sub(r"(?:/\d{1,2}|\(\))$", "", inner)
        if _SYMBOL.fullmatch(inner) and any(c.isalpha() for c in inner) and len(inner) >= 3:
            if "." in inner.strip(".") and _has_extension(inner):
                continue
            put(inner.rstrip("."), 2.0)
    for match in _TICKET.finditer(text):
        if is_ticket(match.group(0)):
            put(match.group(0), 1.5)
    for word in word_tokens(text):
        put(word, 1.0)
    for match in _CODE.finditer(text):
        put(match.group(0), 1.2)
    return list(found.items())


def numbers_with_units(text: str) -> list[str]:
    """Numbers with a unit (`43 tests`, `2.5s`, `80%`), first occurrence order."""
    found = [m.group(0) for m in _NUM_UNIT.finditer(text)]
    found.extend(m.group(0) for m in _MONEY.finditer(text))
    return list(dict.fromkeys(found))


def decisions(text: str) -> list[tuple[str, float]]:
    """Statements of intent or reason, with a strength (2 reasons, 1 intents, 0.3 'let me')."""
    out: dict[str, float] = {}
    previous = ""
    for piece in _SENTENCE_BREAK.split(text):
        sentence = piece[:600].strip().lstrip("-*#>0123456789. ").strip()
        sentence = sentence.replace("**", "")
        before, previous = previous, sentence
        if len(sentence) < 24 or sentence.count(" ") < 3:
            continue
        if _STRONG_CUE.search(sentence):
            strength = 2.0
        elif _INTENT_CUE.match(sentence):
            strength = 1.0
        elif _LET_ME.match(sentence):
            strength = 0.3
        else:
            continue
        if len(sentence) < 60 and before and not before.endswith(":"):
            sentence = f"{before} {sentence}"  # a short intent reads better with its reason
        out.setdefault(clip(sentence, 220), strength)
    return list(out.items())


_PLAN_INTRO = re.compile(
    r"(?:\b(?:I'll|I will|I need to|Let me|Next steps?|Plan|Still need to|Remaining|TODO|To do|"
    r"Steps?)\b[^\n]{0,200}:)\s*$",
    re.IGNORECASE | re.MULTILINE,
)
_PLAN_ITEM = re.compile(r"^\s{0,6}(?:\d{1,2}[.)]|[-*•])\s+(.{3,300})$")


def plan_steps(text: str) -> list[str]:
    """The steps of the last plan in assistant text: a list after "I'll …:" / "Next steps:"."""
    tail = text[-12_000:]
    intros = list(_PLAN_INTRO.finditer(tail))[-5:]
    for intro in reversed(intros):
        steps: list[str] = []
        for line in tail[intro.end() :].splitlines():
            if not line.strip():
                if steps:
                    break
                continue
            item = _PLAN_ITEM.match(line)
            if item is None:
                break
            steps.append(clip(item.group(1).replace("**", ""), 90))
        if len(steps) >= 2:
            return steps
    return []


_ASKS = re.compile(
    r"\?|\b(?:please (?:let me know|confirm|provide|specify|choose|select|tell me)|"
    r"would you like|do you want|shall I|should I|which (?:one|option)|your choice)\b",
    re.IGNORECASE,
)


def asks_user(text: str) -> bool:
    """True when assistant text ends by asking the user something (a question, "please confirm")."""
    return _ASKS.search(text[-300:]) is not None


def completion_cue(text: str) -> bool:
    """True when assistant text says the work is finished ("all tests pass", "done")."""
    return _DONE_CUE.search(text) is not None


def code_definitions(code: str) -> list[str]:
    """Names defined in a code snippet (`def x`, `class X`, `defmodule A.B`, `function f`)."""
    out: dict[str, None] = {}
    for match in _DEFINITION.finditer(code):
        name = match.group(1).rstrip(".")
        if name.startswith("__") or len(name) < 3 or name.lower() in _COMMON_WORDS:
            continue
        out.setdefault(name, None)
    return list(out)


def _tag_body(text: str, tag: str) -> str | None:
    start = text.find(f"<{tag}>")
    if start < 0:
        return None
    end = text.find(f"</{tag}>", start)
    body = text[start + len(tag) + 2 : end if end > 0 else len(text)]
    return body if body.strip() else None


def task_body(text: str) -> str | None:
    """The part of a user message that states a request; None for noise and acks.

    Long agent prompts are narrowed to their task (`<pr_description>`, `<issue>`, `ISSUE:`).
    """
    head = text[:20_000].strip()
    if not head or head.startswith(_NOISE_USER) or _ACK.match(head):
        return None
    for tag in _TASK_TAGS:
        body = _tag_body(head, tag)
        if body is not None:
            return body
    if "ISSUE:" in head:
        return head.split("ISSUE:", 1)[1].split("INSTRUCTIONS:", 1)[0]
    return head


def task_text(text: str, limit: int = 400) -> str | None:
    """The request a user message makes, cleaned and clipped; None for noise and acks."""
    body = task_body(text)
    if body is None:
        return None
    lines: list[str] = []
    for raw in body.splitlines():
        line = raw.strip()
        if not line or line.startswith("```") or _TASK_BOILER.match(line):
            continue
        lines.append(line.lstrip("#> ").strip())
        if sum(len(x) for x in lines) > limit:
            break
    kept: list[str] = []
    size = 0
    for line in lines:
        room = limit - size
        if room < 8:
            break
        kept.append(clip(line, room))
        size += len(kept[-1]) + 1
    return "\n".join(kept) or None

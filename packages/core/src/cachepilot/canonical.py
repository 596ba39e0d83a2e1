"""Prefix canonicalization: volatile-value placeholders, frozen per-thread values, tool order.

Providers bill a byte-identical cached prompt prefix at a fraction of the price. A system prompt
rendered with ``datetime.now()``, the working directory or a session id differs on every call
(or in every thread), so the cache misses from the very first token. `Canonicalizer.apply`
rewrites one model request so its stable part (tools + system prompt) stays byte-identical:

* **Detection** (`detect_volatile`): dates, datetimes, times, weekdays, UUIDs, long hex and git
  SHAs, long numbers, absolute paths under home/tmp/cwd roots, values of id-like keys
  (``session_id=…``), plus user patterns and named values. Spans never overlap; user spans
  (named values, then patterns) beat built-in ones, and among built-ins the longest wins.
* **Placeholders** look like ``{{date_1}}``: kind plus ordinal of first appearance, so the
  canonical text is a pure function of the prompt's *stable* text (and of which values are
  equal). It is identical across the calls of a thread and across threads whose prompts differ
  only in their volatile values, so a new thread's first call already hits the shared prefix.
  The same value gets the same placeholder everywhere in one request. Named values use their
  name without an ordinal (``{{user_id}}``). The format is ASCII on purpose: ``{{``/``}}`` are
  common tokens in code-trained BPE vocabularies, JSON serializers with ``ensure_ascii`` leave them
  alone (``⟨…⟩`` would turn into ``\\u27e8`` escapes), and models read ``{{name}}`` as a template
  variable. Both delimiters are configurable. Send the result straight to the model: an
  f-string or mustache prompt template applied afterwards would read the braces as variables.
* **Dynamic-context block**: the real values, one ``{{label}} = value`` line each, in a small
  ``<context>`` block placed after the stable part: at the head of the first user message
  (default) or at the system tail. When there is no user message yet, the block goes to the
  system tail, and the thread keeps it there until the next refresh point (moving it on the next
  call would break the system prompt).

Per-thread values live in `CanonicalState` and are *frozen* at the first call, so the block and
with it the first user message stay byte-identical across calls. When they change:

* ``refresh="maintenance"`` (default): when ``apply(..., maintenance=True)`` is called, i.e. at a
  scheduled maintenance point that rewrites history anyway;
* ``refresh="always"``: on every call (the block follows the current values; tools + system still
  cache, the prefix breaks from the first user message on);
* ``refresh="never"``: the first value of each placeholder is kept for the thread's lifetime.

**New values mid-thread.** A placeholder the state has not seen can only appear when the canonical
stable part itself changed since the previous call (its text did not contain that placeholder
before). The provider cache then misses from that change onwards anyway, and the block lies after
it, so rewriting the block costs nothing: the new placeholder is added with its current value,
and (unless ``refresh="never"`` or ``refresh_on_prefix_change=False``) every frozen value is
refreshed and the block placement re-resolved ("refresh when it is free"). This also repairs the
one hazard of ordinal numbering: when a new path is inserted before an old one, ``path_1`` names
a different value, and the refresh rebinds it. So the block changes only (a) when something
before it already changed, (b) at maintenance points, or (c) with ``refresh="always"``: the
behaviour is deterministic and prefix-safe. Under ``refresh="never"`` existing placeholders keep
their first value even then (choose it only for prompts whose layout of volatile values is fixed).

Only the system prompt (and, by default, system-role messages at the head of ``messages``) is
canonicalized; the transcript is not (tool outputs legitimately contain dates). Tool
descriptions can be canonicalized too (off by default). Tools are sorted by name and rendered
with recursively sorted keys (lists, e.g. a schema's ``required``, keep their order);
`tool_fingerprint` identifies a tool set so a change mid-thread is detectable (counted in the
state and logged).

Known limits: a raw prompt that already contains placeholder-shaped text (``{{date_1}}``) is not
escaped; paths containing spaces are only recognised under a configured ``cwd``/``home``/root;
with ``dedupe_values=True`` two fields that coincidentally hold the same value (a start time equal
to "now" on the first call) share one placeholder, which changes the canonical text when they
diverge later: set ``dedupe_values=False`` for such prompts.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from cachepilot.messages import ContentPart, Message, TextPart

__all__ = [
    "DEFAULT_ID_KEYS",
    "KINDS",
    "CanonicalConfig",
    "CanonicalState",
    "CanonicalText",
    "Canonicalizer",
    "Placement",
    "Refresh",
    "VolatileKind",
    "VolatileSpan",
    "canonical_json",
    "canonicalize_text",
    "canonicalize_tool",
    "detect_volatile",
    "order_tools",
    "render_block",
    "tool_fingerprint",
    "tool_name",
]

logger = logging.getLogger(__name__)

_ToolT = TypeVar("_ToolT", bound=Mapping[str, Any])

VolatileKind: TypeAlias = Literal[
    "datetime", "date", "time", "weekday", "uuid", "hex", "number", "path", "id"
]
KINDS: tuple[VolatileKind, ...] = (
    "datetime",
    "date",
    "time",
    "weekday",
    "uuid",
    "hex",
    "number",
    "path",
    "id",
)
"""Built-in detector kinds (the values `CanonicalConfig.enabled_kinds` accepts)."""
_KIND_PRIORITY: dict[str, int] = {
    kind: rank
    for rank, kind in enumerate(
        ("id", "uuid", "datetime", "date", "time", "path", "hex", "number", "weekday")
    )
}

Placement: TypeAlias = Literal["first_user", "system_tail"]
Refresh: TypeAlias = Literal["maintenance", "never", "always"]

DEFAULT_ID_KEYS: tuple[str, ...] = (
    "session",
    "session_id",
    "request_id",
    "trace_id",
    "span_id",
    "run_id",
    "user_id",
    "conversation_id",
    "thread_id",
    "chat_id",
    "correlation_id",
    "job_id",
    "build_id",
    "execution_id",
    "invocation_id",
    "device_id",
    "account_id",
    "org_id",
    "tenant_id",
    "workspace_id",
    "container_id",
    "pid",
)
"""Keys whose ``key=value`` / ``key: value`` / ``"key": "value"`` values are id-like."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_TAG = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_ -]*")
_STOP_VALUES = frozenset(
    {"none", "null", "nil", "unknown", "undefined", "n/a", "na", "true", "false", "empty", "-"}
)
_PATH_CHARS = r"[^\s\"'`<>|(){}\[\],;*?]"
_TRAILING_PUNCT = ".:,!?"


# --------------------------------------------------------------------------------------------
# Spans


@dataclass(frozen=True, slots=True)
class VolatileSpan:
    """One detected volatile value: ``text[start:end] == value``."""

    start: int
    end: int
    kind: str
    """A `VolatileKind`, a user pattern's name or a named value's name."""
    value: str


# --------------------------------------------------------------------------------------------
# Configuration


class CanonicalConfig(BaseModel):
    """Settings of the canonicalizer; validated at construction (bad values: `ValueError`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    enabled_kinds: frozenset[VolatileKind] = frozenset(KINDS)
    """Built-in detectors that run (``datetime`` is a date joined to a time; disabling ``weekday``
    only stops standalone weekdays, a weekday inside a date phrase stays part of that date)."""
    patterns: dict[str, str] = Field(default_factory=dict)
    """User regexes, name → pattern; the name is the placeholder kind (``{{name_1}}``). The span
    is the group named ``value`` when present, else group 1, else the whole match."""
    named_values: dict[str, str] = Field(default_factory=dict)
    """Literal values to replace, name → value (``{"user_id": "u-123"}`` → ``{{user_id}}``)."""
    placement: Placement = "first_user"
    """Where the dynamic-context block goes: head of the first user message, or system tail."""
    refresh: Refresh = "maintenance"
    """When frozen values are refreshed: at ``maintenance=True`` calls, on every call, or never."""
    refresh_on_prefix_change: bool = True
    """Also refresh when the canonical tools + system changed since the previous call (the cache
    misses from there anyway, so the refresh is free). Ignored with ``refresh="never"``."""
    cwd: str | None = None
    """The agent's working directory: any path under it is volatile."""
    home: str | None = None
    """The user's home directory: any path under it is volatile."""
    path_roots: tuple[str, ...] = ()
    """More absolute roots whose paths are volatile (e.g. a CI workspace)."""
    default_path_roots: bool = True
    """Flag paths under ``/home/*``, ``/Users/*``, ``/root/*``, ``/tmp``, ``/var/tmp``,
    ``/var/folders``, ``/private/var``, ``/private/tmp``, ``/mnt/<d>/Users/*``, ``C:\\Users\\*``."""
    min_number_digits: int = Field(default=6, ge=4, le=64)
    """Shortest digit run flagged as a number (epoch timestamps, pids, counters)."""
    id_keys: tuple[str, ...] = DEFAULT_ID_KEYS
    """Keys whose values are id-like; matched case-insensitively, ``_``/``-``/space/camelCase
    spellings alike, with an optional ``x-`` prefix. Values of keys that do not end in ``id``
    (e.g. ``session``) are flagged only when they contain a digit."""
    sort_tools: bool = True
    """Sort tools by name (ties by canonical JSON)."""
    canonical_tool_keys: bool = True
    """Return tool dicts with recursively sorted keys so every serializer emits the same bytes."""
    canonicalize_tool_descriptions: bool = False
    """Also replace volatile values in tools' ``description`` strings (numbered first)."""
    leading_system_messages: bool = True
    """Also canonicalize system-role messages at the head of ``messages`` (frameworks that keep
    the system prompt in the transcript); the system tail is then the last of them."""
    dedupe_values: bool = True
    """Give equal values one placeholder; False numbers every occurrence separately."""
    placeholder_open: str = "{{"
    """Opening delimiter of a placeholder."""
    placeholder_close: str = "}}"
    """Closing delimiter of a placeholder."""
    block_tag: str = "context"
    """XML-ish tag wrapping the dynamic-context block."""
    block_header: str = "Placeholders in the system prompt stand for these values:"
    """First line inside the block (one line; empty: no header line)."""

    _compiled: _Detectors | None = PrivateAttr(default=None)

    @field_validator("cwd", "home", mode="before")
    @classmethod
    def _fspath(cls, value: object) -> object:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("path_roots", mode="before")
    @classmethod
    def _fspaths(cls, value: object) -> object:
        if isinstance(value, str | os.PathLike):
            raise ValueError("path_roots must be a sequence of paths, not a single path")
        if isinstance(value, Iterable):
            return tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value)
        return value

    @field_validator("cwd", "home")
    @classmethod
    def _check_dir(cls, value: str | None) -> str | None:
        return None if value is None else _check_root(value)

    @field_validator("path_roots")
    @classmethod
    def _check_roots(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_root(v) for v in value)

    @field_validator("patterns")
    @classmethod
    def _check_patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            _check_name(name, "pattern")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {name!r}: invalid regular expression: {exc}") from exc
            if compiled.fullmatch("") is not None:
                raise ValueError(f"pattern {name!r} matches the empty string")
        return value

    @field_validator("named_values")
    @classmethod
    def _check_named(cls, value: dict[str, str]) -> dict[str, str]:
        seen: dict[str, str] = {}
        for name, literal in value.items():
            _check_name(name, "named value")
            if not isinstance(literal, str) or not literal.strip():
                raise ValueError(f"named value {name!r} must be a non-blank string")
            if literal in seen:
                raise ValueError(f"named values {seen[literal]!r} and {name!r} share one value")
            seen[literal] = name
        return value

    @field_validator("id_keys")
    @classmethod
    def _check_keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for key in value:
            if not _KEY.fullmatch(key) or not key.strip():
                raise ValueError(f"id key {key!r} must start with a letter (letters, digits, _-)")
        return value

    @field_validator("placeholder_open", "placeholder_close")
    @classmethod
    def _check_delimiter(cls, value: str) -> str:
        if not value or any(c.isspace() or c.isalnum() or c == "_" for c in value):
            raise ValueError(
                f"placeholder delimiter {value!r} must be non-empty punctuation (e.g. '{{{{')"
            )
        return value

    @field_validator("block_tag")
    @classmethod
    def _check_tag(cls, value: str) -> str:
        if not _TAG.fullmatch(value):
            raise ValueError(f"block_tag {value!r} must be a tag name (letters, digits, _.-)")
        return value

    @field_validator("block_header")
    @classmethod
    def _check_header(cls, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise ValueError("block_header must be a single line")
        return value

    @model_validator(mode="after")
    def _check_names(self) -> CanonicalConfig:
        clash = set(self.named_values) & set(self.patterns)
        if clash:
            raise ValueError(f"names used both as pattern and named value: {sorted(clash)}")
        kinds = "|".join(re.escape(k) for k in (*KINDS, *self.patterns))
        ordinal_like = re.compile(rf"(?:{kinds})_\d+")
        for name in self.named_values:
            if name in KINDS or ordinal_like.fullmatch(name):
                raise ValueError(f"named value {name!r} collides with a placeholder label")
        return self

    def model_post_init(self, context: Any, /) -> None:
        """Compile the detectors once per config."""
        self._compiled = _Detectors(self)

    def placeholder(self, label: str) -> str:
        """The placeholder text for a label (``date_1`` → ``{{date_1}}``)."""
        return f"{self.placeholder_open}{label}{self.placeholder_close}"


def _check_root(value: str) -> str:
    stripped = value.strip()
    if stripped != value or not value:
        raise ValueError(f"path root {value!r} must be a non-blank path without outer spaces")
    if not (value.startswith(("/", "\\\\")) or re.match(r"[A-Za-z]:[\\/]", value)):
        raise ValueError(f"path root {value!r} must be absolute")
    trimmed = value.rstrip("/\\")
    if len(trimmed) < 2 or re.fullmatch(r"[A-Za-z]:", trimmed):
        raise ValueError(f"path root {value!r} is a filesystem root: it would flag every path")
    return trimmed


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{what} name {name!r} must be an identifier ([A-Za-z][A-Za-z0-9_]*)")


# --------------------------------------------------------------------------------------------
# Built-in detectors
#
# Speed matters (this runs on every model call): every pattern starts with a literal or a
# character class so the regex engine can skip ahead, and "what may precede a match" is checked
# in code (`_Rx.left`) instead of with a leading lookbehind, which would disable that skip.

_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH_ABBRS = ("Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sept", "Sep", "Oct", "Nov", "Dec")
_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_WEEKDAY_ABBRS = ("Mon", "Tues", "Tue", "Wed", "Thurs", "Thur", "Thu", "Fri", "Sat", "Sun")
_TZ_NAMES = (
    "UTC",
    "GMT",
    "UT",
    "EST",
    "EDT",
    "CST",
    "CDT",
    "MST",
    "MDT",
    "PST",
    "PDT",
    "AKST",
    "AKDT",
    "HST",
    "CET",
    "CEST",
    "EET",
    "EEST",
    "WET",
    "WEST",
    "BST",
    "IST",
    "JST",
    "KST",
    "AEST",
    "AEDT",
    "ACST",
    "ACDT",
    "AWST",
    "NZST",
    "NZDT",
    "MSK",
    "SGT",
    "HKT",
    "ICT",
    "PHT",
    "WIB",
)


def _words(full: Sequence[str], abbr: Sequence[str] = ()) -> str:
    """A flat alternation (longest first; Title and UPPER case), abbreviations with an opt. dot."""
    alts = [*full, *(w.upper() for w in full)]
    alts += [f"{w}\\.?" for w in (*abbr, *(a.upper() for a in abbr))]
    ordered = sorted(alts, key=lambda w: (-len(w.replace("\\.?", "")), w))
    return "(?:" + "|".join(ordered) + r")(?![A-Za-z])"


_MONTH = _words(_MONTH_NAMES, _MONTH_ABBRS)
_WEEKDAY = _words(_WEEKDAY_NAMES, _WEEKDAY_ABBRS)
_WEEKDAY_FULL = re.compile(_words(_WEEKDAY_NAMES))
_DAY = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?(?![0-9A-Za-z])"
_YEAR = r"(?:19|20)\d{2}(?!\d|:\d)"
_TZ_NAME = "|".join(sorted(_TZ_NAMES, key=lambda w: (-len(w), w)))
_TZ = (
    r"(?:Z(?![A-Za-z0-9])"
    r"|[ \t]?[+-](?:[01]\d|2[0-3]):?[0-5]\d(?!\d)"
    rf"|[ \t]?\((?:{_TZ_NAME})(?:[ \t]?[+-]\d{{1,2}}(?::?[0-5]\d)?)?\)"
    rf"|[ \t]?(?:UTC|GMT)(?:[ \t]?[+-]\d{{1,2}}(?::?[0-5]\d)?)?(?![A-Za-z0-9])"
    rf"|[ \t](?:{_TZ_NAME})(?![A-Za-z0-9]))"
)
_AMPM = r"[ \t]?[AaPp]\.?[Mm]\.?(?![A-Za-z])"


@dataclass(frozen=True, slots=True)
class _Rx:
    """A pattern plus the characters that must not directly precede a match."""

    pattern: re.Pattern[str]
    left: str = ""
    """Forbidden preceding characters; ``\\w`` stands for any alphanumeric or ``_``."""
    in_identifier: bool = True
    """False: skip matches that continue a hyphenated identifier (``gpt-4o-2024-08-06``,
    ``claude-sonnet-4-5-20250929``: model snapshots are constants, not volatile values)."""

    def scan(self, text: str) -> Iterable[re.Match[str]]:
        left = self.left
        word = "\\w" in left
        for m in self.pattern.finditer(text):
            start = m.start()
            if start and left:
                before = text[start - 1]
                if before in left or (word and (before.isalnum() or before == "_")):
                    continue
            if (
                not self.in_identifier
                and start >= 2
                and text[start - 1] == "-"
                and text[start - 2].isalnum()
            ):
                continue
            yield m


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_LETTERS = _ALNUM[:52]
_DIGITS = _ALNUM[52:]

# Atoms of date phrases. Types: d = date, t = time, dt = both, w = weekday, y = year, z = zone.
_ATOMS: tuple[tuple[str, _Rx], ...] = (
    (
        "d",
        _Rx(
            re.compile(r"(?:19|20)\d{2}-(?:0[1-9]|1[0-2])-(?:3[01]|[12]\d|0[1-9])(?!\d)"),
            _DIGITS,
            in_identifier=False,
        ),
    ),
    (
        "d",
        _Rx(
            re.compile(r"(?:19|20)\d{2}/(?:1[0-2]|0?[1-9])/(?:3[01]|[12]\d|0?[1-9])(?![\w/])"),
            "\\w/.",
        ),
    ),
    (
        "dn",  # numeric day/month/year in either order: validated in code
        _Rx(
            re.compile(
                r"(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P=sep)"
                r"(?P<y>(?:19|20)\d{2}|\d{2})(?![\w/]|[.-]\d)"
            ),
            "\\w/.:-",
        ),
    ),
    ("d", _Rx(re.compile(rf"{_MONTH}[ \t]+{_DAY}(?:,?[ \t]+{_YEAR})?"), _LETTERS)),
    ("d", _Rx(re.compile(rf"{_DAY}[ \t]+(?:of[ \t]+)?{_MONTH}(?:,?[ \t]+{_YEAR})?"), "\\w.")),
    ("d", _Rx(re.compile(rf"{_MONTH}[ \t]+{_YEAR}"), _LETTERS)),
    (
        "dt",
        _Rx(
            re.compile(r"(?:19|20)\d{6}T\d{4}(?:\d{2})?(?:\.\d+)?(?:Z|[+-]\d{4})?(?![\w])"),
            "\\w",
            in_identifier=False,
        ),
    ),
    (
        "t",
        _Rx(
            re.compile(
                r"(?P<h>\d{1,2}):[0-5]\d(?P<s>:(?:[0-5]\d|60)(?:[.,]\d{1,9})?)?(?!\d|:\d)"
                rf"(?P<ampm>{_AMPM})?(?P<tz>{_TZ})?"
            ),
            _ALNUM.replace("T", "") + ":.",
        ),
    ),
    ("t12", _Rx(re.compile(rf"(?P<h>\d{{1,2}}){_AMPM}(?:{_TZ})?"), "\\w.:")),
    ("w", _Rx(re.compile(_WEEKDAY), _LETTERS)),
    ("y", _Rx(re.compile(r"(?:19|20)\d{2}(?![\w]|[.:]\d)"), "\\w.")),
    (
        "z",
        _Rx(
            re.compile(
                r"(?:Africa|America|Antarctica|Asia|Atlantic|Australia|Europe|Indian|Pacific|Etc)"
                r"/[A-Z][A-Za-z_+-]*(?:/[A-Z][A-Za-z_+-]*)?(?![\w/])"
            ),
            "\\w/",
        ),
    ),
)
_SLOTS: dict[str, frozenset[str]] = {
    "d": frozenset("d"),
    "t": frozenset("t"),
    "dt": frozenset("dt"),
    "w": frozenset("w"),
    "y": frozenset("y"),
    "z": frozenset("z"),
}
"""What each atom type fills in a date phrase: a phrase has at most one of each (two dates
separated by a comma are two values, not one)."""
_JOIN = re.compile(r"[ \t]*,[ \t]*|[ \t]+|T|[ \t]+(?:at|on|@)[ \t]+|[ \t]*,[ \t]+(?:at|on)[ \t]+")
_JOIN_WEAK = re.compile(r"[ \t]+")  # years and zones only join across plain blanks
_NEAR = re.compile(r"[ \t]*[(\[)\],;-]{0,2}[ \t]*")
_WEEKDAY_CUE = re.compile(
    r"(?i:\b(?:today|tomorrow|yesterday)(?:[ \t]+(?:is|was|will[ \t]+be)|[ \t]*[:=])"
    r"|\b(?:day(?:[ \t]+of[ \t]+(?:the[ \t]+)?week)?|weekday)[ \t]*(?:[:=]|[ \t]is)"
    r"|\bit(?:'s|[ \t]+is))[ \t]*\Z"
)

_UUID = _Rx(
    re.compile(
        r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
        r"(?![0-9A-Za-z])"
    ),
    _ALNUM,
)
_HEX_RUN = re.compile(r"[0-9a-fA-F]{7,}(?![0-9A-Za-z])")
_HEX_0X = _Rx(re.compile(r"0[xX][0-9a-fA-F]{6,}(?![0-9A-Za-z])"), _ALNUM)
_GIT_CUE = re.compile(
    r"(?i:\b(?:commit|sha1?|rev(?:ision)?|head[ \t]+is[ \t]+(?:now[ \t]+)?at|hash|checkout"
    r"|cherry-pick|revert|fixup!?|squash!?|parent|tree|merge))[ \t]*[:=#]?[ \t]*\Z"
)
_GIT_LOG_PREFIX = re.compile(r"[ \t*|\\/]*")
_PATH_TOKEN = _Rx(re.compile(rf"/{_PATH_CHARS}*"), "\\w.~/\\$-")
_DRIVE_TOKEN = re.compile(rf":[\\/]{_PATH_CHARS}*")
_DEFAULT_ROOT = re.compile(
    r"/(?:home|Users|root)/[^/\\]+"
    r"|/(?:tmp|var/tmp|private/tmp|private/var|var/folders)/[^/\\]+"
    r"|/mnt/[a-z]/Users/[^/\\]+"
    r"|[A-Za-z]:[\\/](?:Users|Documents and Settings)[\\/][^/\\]+"
)
_PATH_EXTEND = re.compile(rf"{_PATH_CHARS}*")
_ID_SEP = re.compile(r"=>|->|[:=]")
_ID_VALUE = re.compile(
    r"[ \t]*(?:\"(?P<dq>[^\"\n]{1,200})\"|'(?P<sq>[^'\n]{1,200})'"
    r"|(?P<bare>[A-Za-z0-9][^\s\"'`,;&)\]}>]{0,199}(?![^\s\"'`,;&)\]}>])))"
)
_CACHE_ENTRIES = 64
_KEY_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@dataclass(frozen=True, slots=True)
class _Candidate:
    start: int
    end: int
    kind: str
    tier: int  # 0 named value, 1 user pattern, 2 built-in

    @property
    def rank(self) -> tuple[int, int, int, int, str]:
        priority = _KIND_PRIORITY.get(self.kind, 99)
        return (self.tier, self.start - self.end, priority, self.start, self.kind)


def _normal_key(key: str) -> str:
    return "".join(w.lower() for w in _KEY_WORDS.findall(key))


class _Detectors:
    """Compiled detectors of one `CanonicalConfig`."""

    def __init__(self, config: CanonicalConfig) -> None:
        self.kinds = config.enabled_kinds
        self.patterns = [(name, re.compile(p)) for name, p in config.patterns.items()]
        self.named = sorted(config.named_values.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        self.number = _Rx(
            re.compile(rf"\d{{{config.min_number_digits},}}(?:\.\d+)?(?![0-9A-Za-z]|[.,]\d)"),
            _ALNUM + ".,",
            in_identifier=False,
        )
        self.roots = [r for r in (config.cwd, config.home, *config.path_roots) if r]
        self.default_roots = config.default_path_roots
        self.id_keys = {_normal_key(k) for k in config.id_keys} - {""}
        self.id_key_ends = {k[-1] for k in self.id_keys}
        # Prompts repeat across calls (and threads): remember the spans of recent texts.
        self._cache: OrderedDict[str, tuple[VolatileSpan, ...]] = OrderedDict()
        self._lock = threading.Lock()

    # -- entry point --------------------------------------------------------------------------

    def detect(self, text: str) -> list[VolatileSpan]:
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return list(cached)
        spans = tuple(self._detect(text))
        with self._lock:
            self._cache[text] = spans
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return list(spans)

    def _detect(self, text: str) -> list[VolatileSpan]:
        found: list[_Candidate] = []
        for name, literal in self.named:
            found.extend(_literal_hits(text, literal, name))
        for name, pattern in self.patterns:
            found.extend(_pattern_hits(text, pattern, name))
        kinds = self.kinds
        if kinds & {"datetime", "date", "time", "weekday"}:
            found.extend(self._dates(text))
        if "uuid" in kinds:
            found.extend(_Candidate(m.start(), m.end(), "uuid", 2) for m in _UUID.scan(text))
        if "hex" in kinds:
            found.extend(self._hex(text))
        if "number" in kinds:
            found.extend(
                _Candidate(m.start(), m.end(), "number", 2) for m in self.number.scan(text)
            )
        if "path" in kinds:
            found.extend(self._paths(text))
        if "id" in kinds and self.id_keys:
            found.extend(self._ids(text))
        chosen = _select(found)
        return [VolatileSpan(c.start, c.end, c.kind, text[c.start : c.end]) for c in chosen]

    # -- dates and times ----------------------------------------------------------------------

    def _dates(self, text: str) -> list[_Candidate]:
        atoms: list[_Candidate] = []
        for kind, rx in _ATOMS:
            for m in rx.scan(text):
                if kind == "dn":
                    if not _valid_numeric_date(m):
                        continue
                    kind_ = "d"
                elif kind in ("t", "t12"):
                    if not _valid_time(m, twelve=kind == "t12"):
                        continue
                    kind_ = "t"
                else:
                    kind_ = kind
                atoms.append(_Candidate(m.start(), m.end(), kind_, 2))
        if not atoms:
            return []
        # Longest atom wins an overlap (a year inside a date, a day inside a datetime).
        groups: list[list[_Candidate]] = []
        for atom in _select(atoms):
            if groups:
                last = groups[-1][-1]
                gap = text[last.end : atom.start]
                weak = "y" in (last.kind, atom.kind) or "z" in (last.kind, atom.kind)
                taken = set().union(*(_SLOTS[a.kind] for a in groups[-1]))
                joins = _JOIN_WEAK if weak else _JOIN
                if not (_SLOTS[atom.kind] & taken) and joins.fullmatch(gap):
                    groups[-1].append(atom)
                    continue
            groups.append([atom])
        out: list[_Candidate] = []
        lone_weekdays: list[_Candidate] = []
        for group in groups:
            types = {a.kind for a in group}
            has_date = bool(types & {"d", "dt"})
            has_time = bool(types & {"t", "dt"})
            start, end = group[0].start, group[-1].end
            if has_time and (has_date or "w" in types):
                kind = "datetime"
            elif has_date:
                kind = "date"
            elif has_time:
                kind = "time"
            elif types == {"w"}:
                lone_weekdays.append(_Candidate(start, end, "weekday", 2))
                continue
            else:
                continue  # a year or a zone alone is not volatile enough
            if kind in self.kinds:
                out.append(_Candidate(start, end, kind, 2))
        if "weekday" in self.kinds and lone_weekdays:
            out.extend(_standalone_weekdays(text, lone_weekdays, out))
        return out

    # -- hex and git SHAs ---------------------------------------------------------------------

    def _hex(self, text: str) -> list[_Candidate]:
        out = [_Candidate(m.start(), m.end(), "hex", 2) for m in _HEX_0X.scan(text)]
        for m in _HEX_RUN.finditer(text):
            start, end, value = m.start(), m.end(), m.group()
            if not _digit_and_letter(value):
                continue
            before = text[start - 1] if start else ""
            if before.isalnum() or before == "_":
                # `git describe`: v1.2.3-14-g<sha>
                if text[start - 2 : start] == "-g" and value.islower():
                    out.append(_Candidate(start, end, "hex", 2))
                continue
            if len(value) >= 12 or (value.islower() and _git_context(text, start, end)):
                out.append(_Candidate(start, end, "hex", 2))
        return out

    # -- paths --------------------------------------------------------------------------------

    def _paths(self, text: str) -> list[_Candidate]:
        out: list[_Candidate] = []
        if self.default_roots:
            tokens = [(m.start(), m.group()) for m in _PATH_TOKEN.scan(text)]
            for m in _DRIVE_TOKEN.finditer(text):
                at = m.start() - 1
                if at >= 0 and text[at].isascii() and text[at].isalpha():
                    before = text[at - 1] if at else ""
                    if not (before.isalnum() or before in "_.~/\\$-"):
                        tokens.append((at, text[at : m.end()]))
            for at, raw in tokens:
                token = raw.rstrip(_TRAILING_PUNCT)
                if _DEFAULT_ROOT.match(token):
                    out.append(_Candidate(at, at + len(token), "path", 2))
        for root in self.roots:
            at = text.find(root)
            while at != -1:
                end = at + len(root)
                before = text[at - 1] if at else ""
                after = text[end] if end < len(text) else ""
                left_ok = not before or not (before.isalnum() or before in "._~/\\$-")
                slash = after in ("/", "\\")
                right_ok = not after or slash or not re.match(_PATH_CHARS, after)
                if left_ok and right_ok:
                    tail = _PATH_EXTEND.match(text, end) if slash else None
                    stop = tail.end() if tail else end
                    token = text[at:stop].rstrip(_TRAILING_PUNCT)
                    if len(token) >= len(root):
                        out.append(_Candidate(at, at + len(token), "path", 2))
                at = text.find(root, at + 1)
        return out

    # -- id-like keys -------------------------------------------------------------------------

    def _ids(self, text: str) -> list[_Candidate]:
        out: list[_Candidate] = []
        seps = [(m.start(), m.end(), False) for m in _ID_SEP.finditer(text)]
        at = text.find(" is ")
        while at != -1:
            seps.append((at, at + 3, True))
            at = text.find(" is ", at + 1)
        for start, end, is_sep in seps:
            key = self._key_before(text, start)
            if key is None:
                continue
            m = _ID_VALUE.match(text, end)
            if m is None:
                continue
            group = next(g for g in ("dq", "sq", "bare") if m.group(g) is not None)
            vstart, vend = m.start(group), m.end(group)
            value = m.group(group)
            if group == "bare":
                value = value.rstrip(_TRAILING_PUNCT)
                vend = vstart + len(value)
            if not value.strip() or value.strip().lower() in _STOP_VALUES:
                continue
            if (is_sep or not key.endswith("id")) and not any(c.isdigit() for c in value):
                continue
            out.append(_Candidate(vstart, vend, "id", 2))
        return out

    def _key_before(self, text: str, at: int) -> str | None:
        """The id key that ends just before a separator at `at`, if any."""
        i = at
        while i > 0 and text[i - 1] in " \t":
            i -= 1
        if i > 0 and text[i - 1] in "\"'":
            i -= 1
        if i == 0 or text[i - 1].lower() not in self.id_key_ends:
            return None
        j = i
        while j > 0 and i - j < 48 and (text[j - 1].isalnum() or text[j - 1] in "_- "):
            j -= 1
        words = [w.lower() for w in _KEY_WORDS.findall(text[j:i])]
        for k in range(len(words)):
            key = "".join(words[k:])
            if key in self.id_keys:
                return key
        return None


def _git_context(text: str, start: int, end: int) -> bool:
    """A 7–11 hex run counts as a short SHA after a git cue or at the head of a log line."""
    if _GIT_CUE.search(text, max(0, start - 40), start):
        return True
    line_start = text.rfind("\n", 0, start) + 1
    return bool(
        _GIT_LOG_PREFIX.fullmatch(text, line_start, start)
        and end + 1 < len(text)
        and text[end] in " \t"
        and not text[end + 1].isspace()
    )


def _valid_time(m: re.Match[str], *, twelve: bool) -> bool:
    hour_text = m.group("h")
    hour = int(hour_text)
    if twelve:
        return 1 <= hour <= 12
    if hour > 23:
        return False
    # "3:16" (a verse, a ratio) is prose; a time needs a 2-digit hour, seconds, AM/PM or a zone.
    return len(hour_text) == 2 or any(m.group(g) for g in ("s", "ampm", "tz"))


def _valid_numeric_date(m: re.Match[str]) -> bool:
    a, b, year, sep = int(m.group("a")), int(m.group("b")), m.group("y"), m.group("sep")
    if sep != "/" and len(year) != 4:
        return False  # 1.2.26 is a version; 03-17-26 too ambiguous
    if a < 1 or b < 1 or a > 31 or b > 31:
        return False
    return a <= 12 or b <= 12


def _standalone_weekdays(
    text: str, lone: list[_Candidate], dated: list[_Candidate]
) -> list[_Candidate]:
    """Weekdays alone count only next to a date/time or in 'Today is Tuesday'-like phrases."""
    out: list[_Candidate] = []
    spans = sorted((c.start, c.end) for c in dated)
    starts = [s for s, _ in spans]
    for day in lone:
        if not _WEEKDAY_FULL.fullmatch(text, day.start, day.end):
            continue  # "Sun", "Sat" alone are too ambiguous
        if _WEEKDAY_CUE.search(text, max(0, day.start - 40), day.start):
            out.append(day)
            continue
        i = bisect.bisect_left(starts, day.end)
        after = spans[i] if i < len(spans) else None
        before = spans[i - 1] if i > 0 else None
        if (after and _NEAR.fullmatch(text, day.end, after[0])) or (
            before and before[1] <= day.start and _NEAR.fullmatch(text, before[1], day.start)
        ):
            out.append(day)
    return out


def _digit_and_letter(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _literal_hits(text: str, literal: str, name: str) -> Iterable[_Candidate]:
    at = text.find(literal)
    while at != -1:
        end = at + len(literal)
        left_ok = at == 0 or not (literal[0].isalnum() and text[at - 1].isalnum())
        right_ok = end == len(text) or not (literal[-1].isalnum() and text[end].isalnum())
        if left_ok and right_ok:
            yield _Candidate(at, end, name, 0)
        at = text.find(literal, at + 1)


def _pattern_hits(text: str, pattern: re.Pattern[str], name: str) -> Iterable[_Candidate]:
    group: int | str = (
        "value" if "value" in pattern.groupindex else (1 if pattern.groups >= 1 else 0)
    )
    for m in pattern.finditer(text):
        start, end = m.span(group)
        if start >= 0 and end > start:
            yield _Candidate(start, end, name, 1)


def _select(candidates: Iterable[_Candidate]) -> list[_Candidate]:
    """Non-overlapping spans, sorted by start: tier first, then longest, then kind priority."""
    starts: list[int] = []
    chosen: list[_Candidate] = []
    for cand in sorted(set(candidates), key=lambda c: c.rank):
        if cand.end <= cand.start:
            continue
        i = bisect.bisect_right(starts, cand.start)
        if i > 0 and chosen[i - 1].end > cand.start:
            continue
        if i < len(chosen) and chosen[i].start < cand.end:
            continue
        starts.insert(i, cand.start)
        chosen.insert(i, cand)
    return chosen


def _detectors(config: CanonicalConfig) -> _Detectors:
    compiled = config._compiled
    if compiled is None:  # pragma: no cover - model_post_init always sets it
        compiled = config._compiled = _Detectors(config)
    return compiled


@functools.cache
def _default_config() -> CanonicalConfig:
    return CanonicalConfig()


def detect_volatile(text: str, config: CanonicalConfig | None = None) -> list[VolatileSpan]:
    """Find the volatile values in `text`.

    Args:
        text: any text (non-strings give no spans).
        config: detector settings; the defaults when None.

    Returns:
        Non-overlapping spans sorted by start. Named values, then user patterns, win over
        built-in detectors; among built-ins the longest span wins (ties: `id`, `uuid`,
        `datetime`, `date`, `time`, `path`, `hex`, `number`, `weekday`).
    """
    if not isinstance(text, str) or not text:
        return []
    return _detectors(config or _default_config()).detect(text)


# --------------------------------------------------------------------------------------------
# Placeholder assignment


@dataclass(frozen=True, slots=True)
class CanonicalText:
    """The result of `canonicalize_text`: the canonical text and what it replaced."""

    text: str
    values: dict[str, str]
    """Label (``date_1``) → real value, in order of first appearance."""
    spans: tuple[VolatileSpan, ...]
    """The spans replaced, positions in the original text."""


class _Assigner:
    """Numbers placeholders across the texts of one request (kind + ordinal of first sight)."""

    def __init__(self, config: CanonicalConfig) -> None:
        self.config = config
        self.values: dict[str, str] = {}
        self._by_value: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self.spans = 0

    def label(self, span: VolatileSpan) -> str:
        if span.kind in self.config.named_values:
            self.values.setdefault(span.kind, span.value)
            return span.kind
        if self.config.dedupe_values and span.value in self._by_value:
            return self._by_value[span.value]
        n = self._counts.get(span.kind, 0) + 1
        self._counts[span.kind] = n
        label = f"{span.kind}_{n}"
        self.values[label] = span.value
        self._by_value.setdefault(span.value, label)
        return label

    def canonicalize(self, text: str) -> tuple[str, list[VolatileSpan]]:
        spans = detect_volatile(text, self.config)
        if not spans:
            return text, spans
        pieces: list[str] = []
        at = 0
        for span in spans:
            pieces.append(text[at : span.start])
            pieces.append(self.config.placeholder(self.label(span)))
            at = span.end
        pieces.append(text[at:])
        self.spans += len(spans)
        return "".join(pieces), spans


def canonicalize_text(text: str, config: CanonicalConfig | None = None) -> CanonicalText:
    """Replace the volatile values of one text by placeholders (fresh numbering).

    Useful for diagnostics (`explain` can compare canonical forms); `Canonicalizer.apply` does
    the same across a whole request and keeps per-thread values.
    """
    assigner = _Assigner(config or _default_config())
    canonical, spans = assigner.canonicalize(text) if isinstance(text, str) else ("", [])
    return CanonicalText(canonical, dict(assigner.values), tuple(spans))


def render_block(values: Iterable[tuple[str, str]], config: CanonicalConfig | None = None) -> str:
    """The dynamic-context block for ``(label, value)`` pairs ("" when there are none).

    A value spanning lines or with outer blanks is written as a JSON string.
    """
    cfg = config or _default_config()
    lines = [f"{cfg.placeholder(label)} = {_show(value)}" for label, value in values]
    if not lines:
        return ""
    header = [cfg.block_header] if cfg.block_header else []
    return "\n".join([f"<{cfg.block_tag}>", *header, *lines, f"</{cfg.block_tag}>"])


def _show(value: str) -> str:
    if value != value.strip() or any(c in value for c in "\n\r\t\x0b\x0c\x85\u2028\u2029"):
        return json.dumps(value, ensure_ascii=False)
    return value


# --------------------------------------------------------------------------------------------
# Tools


def _canonical(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _canonical(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted((_canonical(v) for v in obj), key=canonical_json)
    return obj


def canonical_json(obj: Any) -> str:
    """Compact JSON with recursively sorted keys; list order is kept (e.g. ``required``).

    Same bytes as `cachepilot.sim.canonical_tool` for plain JSON data. Objects JSON cannot
    encode are written as ``str(obj)``.
    """
    return json.dumps(
        _canonical(obj), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )


def canonicalize_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a tool schema whose dicts have their keys in sorted order."""
    out = _canonical(tool)
    return out if isinstance(out, dict) else {}


def tool_name(tool: Mapping[str, Any]) -> str:
    """The tool's name in OpenAI (``function.name``), flat or Anthropic (``name``) shape.

    Built-in tools without a name (``{"type": "web_search"}``) are named by their type.
    """
    function = tool.get("function")
    if isinstance(function, Mapping) and "name" in function:
        return str(function["name"])
    if "name" in tool:
        return str(tool["name"])
    return str(tool.get("type", ""))


def order_tools(tools: Iterable[_ToolT]) -> list[_ToolT]:
    """Tools sorted by name, ties broken by canonical JSON (independent of the input order).

    The same objects come back (no copies); `canonicalize_tool` sorts their keys.
    """
    return sorted(tools, key=lambda t: (tool_name(t), canonical_json(t)))


def tool_fingerprint(tools: Iterable[Mapping[str, Any]], *, ordered: bool = True) -> str:
    """A 16-hex digest of a tool list's canonical JSON.

    Args:
        tools: tool schemas.
        ordered: True: the order matters (as it does for the cached prefix); False: the
            fingerprint of the set (as `order_tools` would order it).
    """
    items = list(tools) if ordered else order_tools(tools)
    blob = canonical_json(items).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Per-thread state


class CanonicalState(BaseModel):
    """Per-thread canonicalization state (JSON-serialisable, small; updated by `apply`)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    values: dict[str, str] = Field(default_factory=dict)
    """Frozen placeholder label → value, the values the block shows."""
    placement: Placement | None = None
    """Where this thread's block is placed; None until the block is first emitted."""
    epoch: int = 0
    """Refreshes that changed the frozen values (0: the values of the first call)."""
    calls: int = 0
    """Calls canonicalized in this thread."""
    prefix_digest: str | None = None
    """Digest of the previous call's canonical tools + system (detects a changed prefix)."""
    tool_fingerprint: str | None = None
    """`tool_fingerprint` of the previous call's tools, as returned."""
    tool_changes: int = 0
    """Times the tool set changed mid-thread (a prefix break cause)."""

    @property
    def by_value(self) -> dict[str, str]:
        """Frozen value → label (first label wins)."""
        out: dict[str, str] = {}
        for label, value in self.values.items():
            out.setdefault(value, label)
        return out

    @property
    def ordinals(self) -> dict[str, int]:
        """Highest ordinal per kind among the frozen labels."""
        out: dict[str, int] = {}
        for label in self.values:
            kind, _, n = label.rpartition("_")
            if kind and n.isdigit():
                out[kind] = max(out.get(kind, 0), int(n))
        return out

    @property
    def block_emitted(self) -> bool:
        """Whether a dynamic-context block has been emitted in this thread."""
        return self.placement is not None


# --------------------------------------------------------------------------------------------
# The canonicalizer


class Canonicalizer:
    """Applies canonicalization to each model request of a thread.

    Stateless apart from small memos: of the last tool list (so an unchanged tool list comes
    back as the same dict objects), and of the messages it rewrote (so an unchanged rewrite
    comes back as the same `Message` object, and identity memos downstream keep hitting);
    per-thread state lives in `CanonicalState`.
    """

    def __init__(self, config: CanonicalConfig | None = None) -> None:
        """Create a canonicalizer (the default `CanonicalConfig` when None)."""
        self.config = config or CanonicalConfig()
        self._tools_memo: tuple[tuple[str, ...], list[dict[str, Any]], str] | None = None
        self._rewrites: OrderedDict[int, tuple[Message, Message]] = OrderedDict()
        self._rewrites_lock = threading.Lock()

    def apply(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        state: CanonicalState,
        *,
        maintenance: bool = False,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Canonicalize one request; updates `state` in place, never mutates the inputs.

        Args:
            system: the raw system prompt (pass the original every call, not a canonical one).
            messages: the transcript; only leading system messages and the first user message
                (which carries the block) can change, every other message is returned as is.
            tools: tool schemas in any of the usual shapes.
            state: this thread's state.
            maintenance: this call is a maintenance point (refreshes values with
                ``refresh="maintenance"``).

        Returns:
            ``(system, messages, tools)`` to send. Deterministic for equal inputs and state.
        """
        try:
            return self._apply(system, messages, tools, state, maintenance=maintenance)
        except Exception:  # invariant 6: never crash the agent
            logger.warning(
                "canonicalization failed; request sent unchanged (%d messages, %d tools)",
                len(messages),
                len(tools),
                exc_info=True,
            )
            return system, list(messages), [dict(t) for t in tools if isinstance(t, Mapping)]

    # -- internals ----------------------------------------------------------------------------

    def _stable(self, original: Message, rewritten: Message) -> Message:
        """`rewritten`, or the equal message this canonicalizer returned for `original` before
        (the same object every call while the rewrite does not change)."""
        if rewritten is original:
            return original
        with self._rewrites_lock:
            hit = self._rewrites.get(id(original))
            if hit is not None and hit[0] is original and hit[1] == rewritten:
                self._rewrites.move_to_end(id(original))
                return hit[1]
            # The entry holds `original`, so its id() cannot be reused while it is cached.
            self._rewrites[id(original)] = (original, rewritten)
            while len(self._rewrites) > _CACHE_ENTRIES:
                self._rewrites.popitem(last=False)
        return rewritten

    def _tools(self, tools: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], str]:
        """The tools to send, and their `tool_fingerprint` (memoised with them)."""
        cfg = self.config
        keyed = [(tool_name(t), canonical_json(t), t) for t in tools]
        if cfg.sort_tools:
            keyed.sort(key=lambda item: (item[0], item[1]))
        key = tuple(j for _, j, _ in keyed)
        memo = self._tools_memo
        if memo is not None and memo[0] == key:
            return list(memo[1]), memo[2]
        out = [canonicalize_tool(t) if cfg.canonical_tool_keys else dict(t) for _, _, t in keyed]
        self._tools_memo = (key, out, tool_fingerprint(out))
        return list(out), self._tools_memo[2]

    def _apply(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        state: CanonicalState,
        *,
        maintenance: bool,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        cfg = self.config
        assigner = _Assigner(cfg)
        tools_out, fingerprint = self._tools(tools)
        if cfg.canonicalize_tool_descriptions:
            tools_out = [_canonical_descriptions(t, assigner) for t in tools_out]
            fingerprint = tool_fingerprint(tools_out)
        system_out = assigner.canonicalize(system)[0] if isinstance(system, str) else system
        out = list(messages)
        n_leading = 0
        if cfg.leading_system_messages:
            while n_leading < len(out) and out[n_leading].role == "system":
                out[n_leading] = self._stable(
                    out[n_leading], _canonical_message(out[n_leading], assigner)
                )
                n_leading += 1

        digest = _digest(fingerprint, system_out, out[:n_leading])
        current = assigner.values
        self._update_state(state, current, digest, fingerprint, maintenance=maintenance)

        if current:
            block = render_block(((label, state.values[label]) for label in current), cfg)
            first_user = next((i for i, m in enumerate(out) if m.role == "user"), None)
            if state.placement is None:
                state.placement = cfg.placement if first_user is not None else "system_tail"
            if state.placement == "first_user" and first_user is not None:
                out[first_user] = self._stable(
                    out[first_user], _prepend_block(out[first_user], block)
                )
            elif n_leading:
                out[n_leading - 1] = self._stable(
                    out[n_leading - 1], _append_block(out[n_leading - 1], block)
                )
            else:
                system_out = _append_text(system_out, block)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "canonicalized request: %d spans, %d placeholders, placement=%s, epoch=%d",
                assigner.spans,
                len(current),
                state.placement,
                state.epoch,
            )
        return system_out, out, tools_out

    def _update_state(
        self,
        state: CanonicalState,
        current: dict[str, str],
        digest: str,
        fingerprint: str,
        *,
        maintenance: bool,
    ) -> None:
        cfg = self.config
        first = state.prefix_digest is None
        changed = not first and digest != state.prefix_digest
        if state.tool_fingerprint is not None and fingerprint != state.tool_fingerprint:
            state.tool_changes += 1
            logger.info(
                "tool set changed mid-thread (%s -> %s): the cached prefix breaks at the tools",
                state.tool_fingerprint,
                fingerprint,
            )
        refresh = (
            first
            or cfg.refresh == "always"
            or (cfg.refresh == "maintenance" and maintenance)
            or (changed and cfg.refresh != "never" and cfg.refresh_on_prefix_change)
        )
        if refresh:
            if not first and current and current != state.values:
                state.epoch += 1
            if current:
                state.values = dict(current)
                state.placement = None  # re-resolved below
        else:
            missing = {k: v for k, v in current.items() if k not in state.values}
            if missing:
                state.values = {**state.values, **missing}
        state.prefix_digest = digest
        state.tool_fingerprint = fingerprint
        state.calls += 1


def _digest(fingerprint: str, system: str | None, leading: Sequence[Message]) -> str:
    h = hashlib.sha256()
    h.update(fingerprint.encode())
    h.update(b"\x00" if system is None else b"\x01" + system.encode("utf-8", "surrogatepass"))
    for message in leading:
        h.update(b"\x02" + message.text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def _canonical_descriptions(tool: dict[str, Any], assigner: _Assigner) -> dict[str, Any]:
    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {
                k: assigner.canonicalize(v)[0]
                if k == "description" and isinstance(v, str)
                else walk(v)
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj

    out = walk(tool)
    return out if isinstance(out, dict) else tool


def _canonical_message(message: Message, assigner: _Assigner) -> Message:
    if isinstance(message.content, str):
        text, spans = assigner.canonicalize(message.content)
        return dataclasses.replace(message, content=text) if spans else message
    parts: list[ContentPart] = []
    changed = False
    for part in message.content:
        if isinstance(part, TextPart):
            text, spans = assigner.canonicalize(part.text)
            if spans:
                part = dataclasses.replace(part, text=text)  # noqa: PLW2901
                changed = True
        parts.append(part)
    return dataclasses.replace(message, content=tuple(parts)) if changed else message


def _append_text(text: str | None, block: str) -> str:
    if not text:
        return block
    if text.endswith(block) and text[: -len(block)].endswith("\n\n"):
        return text
    return f"{text}\n\n{block}"


def _append_block(message: Message, block: str) -> Message:
    if isinstance(message.content, str):
        return dataclasses.replace(message, content=_append_text(message.content, block))
    if message.content and message.content[-1] == TextPart(block):
        return message
    return dataclasses.replace(message, content=(*message.content, TextPart(block)))


def _prepend_block(message: Message, block: str) -> Message:
    content = message.content
    if isinstance(content, str):
        if content == block or content.startswith(block + "\n\n"):
            return message  # already carries this block
        return dataclasses.replace(message, content=f"{block}\n\n{content}" if content else block)
    if content and content[0] == TextPart(block):
        return message
    return dataclasses.replace(message, content=(TextPart(block), *content))

"""Canonicalizer settings: volatile kinds, the config model, spans."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

__all__ = [
    "DEFAULT_ID_KEYS",
    "KINDS",
    "CanonicalConfig",
    "Placement",
    "Refresh",
    "VolatileKind",
    "VolatileSpan",
]

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
    move_when_changed: bool = True
    """Keep volatile values in place (the system prompt, leading system messages and tool
    descriptions sent as the client wrote them) until one of them changes within the
    conversation; only then move them into the dynamic-context block (one prefix break, at a
    call whose prompt changed anyway). False: the block from the first call."""
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
    learn_volatile: bool = True
    """Learn per thread the token-like spans seen to change between two calls while the text
    around them stayed (a session id, a build number no pattern knows) and freeze them like
    built-in values from then on (``{{learned_1}}``); see `cachepilot.canonical.volatility`.
    Applies to the system prompt, leading system messages and tool descriptions."""
    learn_max_chars: int = Field(default=400_000, ge=1_000, le=10_000_000)
    """Longest group of texts (system prompt + system messages; all tool descriptions) compared
    for learning; a longer one is never learned from (its changes are passed through)."""
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
    update_header: str = "These placeholders now stand for new values (they replace earlier ones):"
    """First line inside an update note (one line; empty: no header line). A note gives the
    current value of a frozen placeholder after the cached prefix (`cachepilot.canonical.notes`)."""
    clock_resolution_seconds: int = Field(default=300, ge=0, le=86_400)
    """Least movement of a clock (``datetime``, ``time`` placeholders) that gets an update
    note; a clock is shown "as of" when its line was written, so a reading at most this old
    is not re-sent on every call. 0: every change is noted."""

    # The compiled detectors (`cachepilot.canonical.detect`), built on first use.
    _compiled: Any = PrivateAttr(default=None)

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

    @field_validator("block_header", "update_header")
    @classmethod
    def _check_header(cls, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise ValueError("block_header and update_header must be single lines")
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

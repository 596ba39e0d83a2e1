"""Settings of the reduction pipeline and per-tool profiles.

`ReduceConfig` is validated when built (bad values raise `ValueError`). Tools are matched to a
profile by exact name first (`ReduceConfig.profiles`), then by built-in name patterns: shell
tools (`bash`, `execute_*`, `run_*` …), search tools (`grep`, `rg`, `find`, `*search*` …), file
reads (`read`, `read_file`, `view`, `cat`, `open_file`, an editor tool called with
`command="view"` …), else the generic profile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "FILE_READ_VERBATIM",
    "PASS_NAMES",
    "STUB_OVERHEAD",
    "ReduceConfig",
    "ResolvedProfile",
    "ToolKind",
    "ToolProfile",
    "classify_tool",
]

ToolKind: TypeAlias = Literal["generic", "shell", "search", "file_read"]

PASS_NAMES: tuple[str, ...] = (
    "binary",
    "image",
    "loop_stub",
    "superseded_read",
    "duplicate",
    "image_blocks",
    "svg",
    "ansi",
    "progress",
    "whitespace",
    "html",
    "json",
    "line_numbers",
    "repeats",
    "similar_lines",
    "size_gate",
    "invalid_utf8",
    "loop_note",
    "hard_cap",
)
"""Names of the built-in passes, in pipeline order (`reduce.passes.PASSES` holds them)."""

STUB_OVERHEAD = 200
"""Most characters a pass may add to its input (stubs, notes, headers)."""

FILE_READ_VERBATIM: tuple[str, ...] = (
    "image_blocks",
    "svg",
    "ansi",
    "progress",
    "whitespace",
    "html",
    "json",
    "repeats",
    "similar_lines",
)
"""Passes a file-read profile disables by default: the model copies file text into edits, so
the text it sees must be the file's own bytes (line-number prefixes are still stripped)."""

_UNDISABLEABLE = frozenset({"hard_cap"})
_MAX_LOOP = 30


def _check_pass_names(names: tuple[str, ...], what: str) -> tuple[str, ...]:
    unknown = [n for n in names if n not in PASS_NAMES]
    if unknown:
        raise ValueError(
            f"{what}: unknown pass name(s) {unknown}; known passes: {', '.join(PASS_NAMES)}"
        )
    return tuple(dict.fromkeys(names))


class ToolProfile(BaseModel):
    """How the outputs of one tool are reduced (override the built-in profile by tool name)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: ToolKind = "generic"
    """`generic`, `shell`, `search` or `file_read` (first read of a path is exempt from the size
    gate; a re-read is gated and an unchanged re-read becomes a pointer stub)."""
    limit: int | None = None
    """Size-gate limit in characters; `None`: the config's limit for `kind`."""
    head_chars: int | None = None
    """Characters of the head preview kept by the size gate; `None`: the config's value."""
    tail_chars: int | None = None
    """Characters of the tail preview kept by the size gate; `None`: the config's value."""
    salient_chars: int | None = None
    """Characters the size gate's preview adds for the salient lines of the middle; `None`:
    the config's value."""
    disabled: tuple[str, ...] | None = None
    """Pass names not run for this tool; `None`: the kind's defaults (`FILE_READ_VERBATIM` for
    file reads, nothing otherwise). `hard_cap` always runs."""

    @field_validator("limit")
    @classmethod
    def _limit_positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1_000:
            raise ValueError(f"limit must be at least 1000 characters, got {value}")
        return value

    @field_validator("head_chars", "tail_chars", "salient_chars")
    @classmethod
    def _preview_non_negative(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError(f"preview sizes must be >= 0, got {value}")
        return value

    @field_validator("disabled")
    @classmethod
    def _known_disabled(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        names = _check_pass_names(tuple(value), "ToolProfile.disabled")
        if _UNDISABLEABLE & set(names):
            raise ValueError("hard_cap cannot be disabled; raise ReduceConfig.hard_cap instead")
        return names


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    """A tool's profile with every default filled in (what the passes read)."""

    tool_kind: ToolKind
    limit: int
    head_chars: int
    tail_chars: int
    disabled: frozenset[str]
    salient_chars: int = 0


class ReduceConfig(BaseModel):
    """Settings of the reduction pipeline. Every field is validated when the config is built."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: tuple[str, ...] | None = None
    """Pass names to run (in pipeline order); `None`: every built-in pass."""
    disabled: tuple[str, ...] = ()
    """Pass names never run (`hard_cap` cannot be disabled)."""
    profiles: dict[str, ToolProfile] = Field(default_factory=dict)
    """Per-tool profiles by exact tool name; they replace the built-in name patterns."""
    # Limits and previews tuned with `cachepilot bench ../shared/data/traces`: lower limits cut
    # more but lose facts the agent later uses (each one costs a recall round trip).
    default_limit: int = 20_000
    """Size-gate limit (characters) of generic tools."""
    shell_limit: int = 12_000
    """Size-gate limit of shell tools (`bash`, `shell`, `execute*`, `run_*` …)."""
    search_limit: int = 8_000
    """Size-gate limit of search tools (`grep`, `rg`, `search`, `find`, `glob` …)."""
    reread_limit: int = 50_000
    """Size-gate limit of a file read whose path (and arguments) were read before."""
    head_chars: int = 1_500
    """Head preview the size gate keeps (cut back to a line boundary)."""
    tail_chars: int = 1_000
    """Tail preview the size gate keeps (cut forward to a line boundary)."""
    salient_chars: int = 1_500
    """Characters the size gate's preview adds, whatever the output's size, for the lines of
    the omitted middle an agent acts on (errors and their context, run summaries, lines naming
    the call's arguments) and the markers of the stretches left out; 0: head and tail only."""
    values_chars: int = 400
    """Characters the size gate's preview adds for the exact values of the omitted lines
    (field names, paths, dotted and camel-case names, ids and quoted strings a documentation
    page or a log defines, most specific first, see `memory.values.output_values`): an
    agent often uses one of them right away, and a recall round trip costs more than the
    line; 0: none."""
    hard_cap: int = 200_000
    """No output is longer than this, not even a gate-open source or an exempt first read."""
    gate_threshold: int = 1
    """Recalls of a source after which its later outputs skip the lossy passes (τ)."""
    loop_flag_after: int = 3
    """Identical calls (same tool and arguments) in a row that get a loop note."""
    loop_stub_after: int = 5
    """Identical calls in a row with identical output after which the output is a stub."""
    image_max_bytes: int = 100_000
    """Images larger than this are downsampled (Pillow) or replaced by a stub."""
    max_scan_chars: int = 1_000_000
    """Outputs longer than this skip the passes that scan the whole text (straight to the gate)."""
    min_repeat: int = 3
    """Shortest run of identical consecutive lines that is folded."""
    min_similar: int = 8
    """Shortest run of near-identical lines (equal once digits are masked) that is folded."""
    memory_max_entries: int = 256
    """Cap on each table of `IngestMemory` (oldest entries are dropped first)."""

    @field_validator("enabled")
    @classmethod
    def _known_enabled(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else _check_pass_names(tuple(value), "enabled")

    @field_validator("disabled")
    @classmethod
    def _known_disabled(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        names = _check_pass_names(tuple(value), "disabled")
        if _UNDISABLEABLE & set(names):
            raise ValueError("hard_cap cannot be disabled; raise ReduceConfig.hard_cap instead")
        return names

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, value: dict[str, ToolProfile]) -> dict[str, ToolProfile]:
        for name in value:
            if not name.strip():
                raise ValueError("profiles: tool names must be non-empty")
        return value

    @model_validator(mode="after")
    def _check_sizes(self) -> ReduceConfig:
        positive = {
            "gate_threshold": self.gate_threshold,
            "image_max_bytes": self.image_max_bytes,
            "memory_max_entries": self.memory_max_entries,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.head_chars < 0 or self.tail_chars < 0 or self.salient_chars < 0:
            raise ValueError("head_chars, tail_chars and salient_chars must be >= 0")
        if self.values_chars < 0:
            raise ValueError(f"values_chars must be >= 0, got {self.values_chars}")
        if self.loop_flag_after < 2:
            raise ValueError(f"loop_flag_after must be >= 2, got {self.loop_flag_after}")
        if not self.loop_flag_after <= self.loop_stub_after <= _MAX_LOOP:
            raise ValueError(
                f"loop_stub_after must be between loop_flag_after and {_MAX_LOOP}, "
                f"got {self.loop_stub_after}"
            )
        if self.min_repeat < 2 or self.min_similar < 3:
            raise ValueError("min_repeat must be >= 2 and min_similar >= 3")
        limits = {
            "default_limit": self.default_limit,
            "shell_limit": self.shell_limit,
            "search_limit": self.search_limit,
            "reread_limit": self.reread_limit,
        }
        for name, profile in self.profiles.items():
            resolved = self._resolve(profile.kind, profile)
            limits[f"profiles[{name!r}].limit"] = resolved.limit
            preview = resolved.head_chars + resolved.tail_chars + STUB_OVERHEAD
            if preview >= resolved.limit:
                raise ValueError(
                    f"profiles[{name!r}]: head_chars + tail_chars + {STUB_OVERHEAD} must be "
                    f"below its limit {resolved.limit}"
                )
        preview = self.head_chars + self.tail_chars + STUB_OVERHEAD
        for name, limit in limits.items():
            if limit < 1_000:
                raise ValueError(f"{name} must be at least 1000 characters, got {limit}")
            if preview >= limit:
                raise ValueError(
                    f"head_chars + tail_chars + {STUB_OVERHEAD} ({preview}) must be below "
                    f"{name} ({limit})"
                )
        if self.hard_cap < max(limits.values()):
            raise ValueError(
                f"hard_cap ({self.hard_cap}) must be >= every size-gate limit "
                f"({max(limits.values())})"
            )
        if self.hard_cap < self.tail_chars + 2 * STUB_OVERHEAD + 1_000:
            raise ValueError("hard_cap is too small for its own preview")
        if self.image_max_bytes * 4 // 3 + 100 > self.hard_cap:
            raise ValueError(
                f"image_max_bytes ({self.image_max_bytes}) must fit in hard_cap as base64"
            )
        if self.max_scan_chars < self.hard_cap:
            raise ValueError("max_scan_chars must be >= hard_cap")
        return self

    def active_passes(self) -> tuple[str, ...]:
        """Names of the built-in passes this config runs, in pipeline order."""
        chosen = set(PASS_NAMES if self.enabled is None else self.enabled)
        chosen -= set(self.disabled)
        chosen |= _UNDISABLEABLE
        return tuple(n for n in PASS_NAMES if n in chosen)

    def profile_for(self, tool_name: str, args: Mapping[str, Any] | None = None) -> ResolvedProfile:
        """The resolved profile of a tool: an exact-name override, else the built-in pattern."""
        override = self.profiles.get(tool_name)
        if override is not None:
            return self._resolve(override.kind, override)
        return self._resolve(classify_tool(tool_name, args), None)

    def _resolve(self, kind: ToolKind, profile: ToolProfile | None) -> ResolvedProfile:
        base = {
            "generic": self.default_limit,
            "shell": self.shell_limit,
            "search": self.search_limit,
            "file_read": self.reread_limit,
        }[kind]
        disabled: tuple[str, ...] | None = profile.disabled if profile is not None else None
        if disabled is None:
            disabled = FILE_READ_VERBATIM if kind == "file_read" else ()
        return ResolvedProfile(
            tool_kind=kind,
            limit=profile.limit if profile is not None and profile.limit is not None else base,
            head_chars=(
                profile.head_chars
                if profile is not None and profile.head_chars is not None
                else self.head_chars
            ),
            tail_chars=(
                profile.tail_chars
                if profile is not None and profile.tail_chars is not None
                else self.tail_chars
            ),
            disabled=frozenset(disabled),
            salient_chars=(
                profile.salient_chars
                if profile is not None and profile.salient_chars is not None
                else self.salient_chars
            ),
        )


_READ_NAMES = frozenset(
    {
        "read",
        "read_file",
        "readfile",
        "read_text_file",
        "file_read",
        "fs_read",
        "view",
        "view_file",
        "cat",
        "open",
        "open_file",
        "get_file_contents",
    }
)
_EDITOR_NAMES = frozenset(
    {"str_replace_editor", "str_replace_based_edit_tool", "text_editor", "edit_file", "editor"}
)
_SHELL_WORDS = frozenset(
    {"bash", "shell", "sh", "zsh", "terminal", "exec", "execute", "cmd", "powershell", "command"}
)
_SEARCH_WORDS = frozenset({"grep", "search", "rg", "ripgrep", "find", "glob", "ag", "ack"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")


def classify_tool(tool_name: str, args: Mapping[str, Any] | None = None) -> ToolKind:
    """The built-in profile kind of a tool, from its name (and `command` for editor tools)."""
    snake = _CAMEL.sub("_", str(tool_name)).lower().strip()
    if snake in _READ_NAMES or snake.replace("_", "") in {n.replace("_", "") for n in _READ_NAMES}:
        return "file_read"
    if snake in _EDITOR_NAMES:
        command = args.get("command") if args else None
        return "file_read" if command == "view" else "generic"
    words = [w for w in _SPLIT.split(snake) if w]
    if snake.startswith(("run_", "execute_", "exec_")) or (words and words[0] in _SHELL_WORDS):
        return "shell"
    if any(w in _SEARCH_WORDS for w in words):
        return "search"
    if any(w in _SHELL_WORDS for w in words):
        return "shell"
    return "generic"

"""Compression guidelines: what a compressor model must keep, per target and environment.

A guideline is natural-language text given to the compressor model. There are two targets:
`history` (the fold's summarizer, see `fold.ChatModelSummarizer`) and `observation` (the
ingestion-time `ObservationCompressor`). `cachepilot optimize-guideline` improves a guideline
from paired runs and writes a guideline file; both components accept the loaded `Guideline`
(or plain text) through their `guideline=` argument.

Guideline file (JSON, UTF-8)::

    {"format": "cachepilot-guideline", "version": 1, "target": "observation",
     "environment": "swe", "text": "...", "score": 0.93, "history": [...]}

A plain-text or Markdown file is accepted too (its whole content is the text; pass the
target when loading it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cachepilot.fold import DEFAULT_GUIDELINE

__all__ = [
    "DEFAULT_HISTORY_GUIDELINE",
    "DEFAULT_OBSERVATION_GUIDELINE",
    "GUIDELINE_FORMAT",
    "Guideline",
    "GuidelineTarget",
    "default_guideline",
    "guideline_digest",
    "guideline_text",
    "load_guideline",
]

GuidelineTarget: TypeAlias = Literal["history", "observation"]

GUIDELINE_FORMAT = "cachepilot-guideline"
"""The `format` tag of a guideline file."""

DEFAULT_HISTORY_GUIDELINE = DEFAULT_GUIDELINE
"""The history guideline the fold uses by default (`fold.DEFAULT_GUIDELINE`)."""

DEFAULT_OBSERVATION_GUIDELINE = """\
Compress the tool output for an AI agent that continues its task from your version alone \
(the full output stays archived and the agent can recall it).

Keep, verbatim:
- what the call was made for, as the recent history shows: the lines that answer it;
- errors, failures and warnings: the message, the exception type, and the innermost stack \
frames with their file paths and line numbers;
- exact values: file paths, line numbers, identifiers, names, numbers, versions, URLs, \
commands and flags;
- counts and totals (tests passed and failed, matches found, rows returned);
- for code or file content: the signatures and the lines relevant to the task.

Drop: boilerplate, banners, progress output, and content unrelated to the task. Replace a run \
of repeated or near-identical lines by one of them and how many there were.

Never invent, round or paraphrase a value. Answer with the compressed output only, without \
a preamble."""
"""What the observation compressor keeps by default (Acon-style)."""


def default_guideline(target: GuidelineTarget) -> str:
    """The built-in guideline text of a target."""
    if target == "history":
        return DEFAULT_HISTORY_GUIDELINE
    if target == "observation":
        return DEFAULT_OBSERVATION_GUIDELINE
    raise ValueError(f"target must be 'history' or 'observation', not {target!r}")


class Guideline(BaseModel):
    """A compression guideline, as written to and read from a guideline file."""

    model_config = ConfigDict(extra="ignore", frozen=True, use_attribute_docstrings=True)

    format: Literal["cachepilot-guideline"] = "cachepilot-guideline"
    """Format tag (files of another format are refused)."""
    version: int = 1
    """Format version."""
    target: GuidelineTarget
    """`history` (fold summaries) or `observation` (tool-output compression)."""
    text: str
    """The guideline given to the compressor model."""
    environment: str = "default"
    """The environment (agent, task family) the guideline was made for."""
    score: float | None = None
    """The held-out score of the guideline when an optimizer chose it."""
    history: list[dict[str, Any]] = Field(default_factory=list)
    """The optimization steps that produced it (step, candidate scores, kept or not)."""

    @field_validator("text")
    @classmethod
    def _text_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a guideline's text must not be empty")
        return value.strip()

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != 1:
            raise ValueError(f"unsupported guideline file version {value} (expected 1)")
        return value

    @classmethod
    def default(cls, target: GuidelineTarget, environment: str = "default") -> Guideline:
        """The built-in guideline of a target."""
        return cls(target=target, text=default_guideline(target), environment=environment)

    @property
    def digest(self) -> str:
        """A short hash of the text (names the guideline in caches and archive metadata)."""
        return guideline_digest(self.text)

    def to_json(self) -> str:
        """The guideline file's content."""
        return json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"

    def save(self, path: str | Path) -> Path:
        """Write the guideline file (parent folders are created)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.to_json(), encoding="utf-8")
        return target


def guideline_digest(text: str) -> str:
    """The first 12 hex digits of the sha256 of a guideline text."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:12]


def load_guideline(path: str | Path, target: GuidelineTarget | None = None) -> Guideline:
    """Read a guideline file (JSON written by `Guideline.save`, or plain text / Markdown).

    Args:
        path: the file.
        target: the expected target. Required for a plain-text file; for a JSON file, a
            different target raises.

    Raises:
        ValueError: unreadable file, wrong format or target, empty text.
    """
    file = Path(path)
    try:
        raw = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read guideline file {file}: {exc}") from exc
    stripped = raw.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"guideline file {file} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != GUIDELINE_FORMAT:
            raise ValueError(f"{file} is not a guideline file (format {GUIDELINE_FORMAT!r})")
        try:
            loaded = Guideline.model_validate(data)
        except ValidationError as exc:
            raise ValueError(f"invalid guideline file {file}: {exc}") from exc
        if target is not None and loaded.target != target:
            raise ValueError(f"{file} holds a {loaded.target} guideline, not a {target} one")
        return loaded
    if target is None:
        raise ValueError(f"{file} is plain text: say which target it is (history or observation)")
    return Guideline(target=target, text=raw)


def guideline_text(guideline: Guideline | str | None, target: GuidelineTarget) -> str:
    """The text of `guideline` (None: the built-in one), checked against `target`.

    Raises:
        ValueError: empty text, or a `Guideline` made for the other target.
    """
    if guideline is None:
        return default_guideline(target)
    if isinstance(guideline, Guideline):
        if guideline.target != target:
            raise ValueError(f"a {guideline.target} guideline cannot serve as a {target} one")
        return guideline.text
    if not isinstance(guideline, str) or not guideline.strip():
        raise ValueError("guideline must be a non-empty str or a Guideline")
    return guideline.strip()

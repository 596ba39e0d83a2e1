"""What the pipeline remembers per thread: seen outputs, file reads, recent calls, recalls.

`IngestMemory` is a small JSON-serialisable pydantic model kept in the pilot's per-thread
state. Every table is capped (oldest entries dropped first), so it stays small however long
the thread runs. Only `Pipeline.run` and `note_recall` change it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cachepilot.refs import is_ref
from cachepilot.support.redact import redact

__all__ = [
    "KEY_ARGUMENTS",
    "RECENT_CAP",
    "CallRecord",
    "IngestMemory",
    "ReadRecord",
    "call_signature",
    "canonical_args",
    "coerce_args",
    "source_key",
]

_MAX_ID_CHARS = 128
_MAX_KEY_VALUE = 200
_DEFAULT_CAP = 256
RECENT_CAP = 32
"""Calls kept for loop detection (`ReduceConfig.loop_stub_after` may not exceed it)."""

KEY_ARGUMENTS: tuple[tuple[str, ...], ...] = (
    ("file_path", "path", "filepath", "filename", "file", "url", "uri", "target"),
    ("command", "cmd", "script", "code"),
    ("query", "q", "pattern", "regex", "glob", "search", "search_term", "keyword"),
)
"""Groups of key arguments: `source_key` takes the first present argument of each group."""


def coerce_args(args: object) -> dict[str, Any]:
    """Tool arguments as a dict: a mapping, JSON object text, other text as `{"input": …}`."""
    if args is None:
        return {}
    if isinstance(args, Mapping):
        return {str(k): v for k, v in args.items()}
    if isinstance(args, str | bytes):
        text = args.decode("utf-8", "replace") if isinstance(args, bytes) else args
        try:
            value = json.loads(text)
        except ValueError:
            return {"input": text} if text.strip() else {}
        return (
            {str(k): v for k, v in value.items()} if isinstance(value, dict) else {"input": value}
        )
    return {"input": str(args)}


def canonical_args(args: Mapping[str, Any]) -> str:
    """Arguments as canonical JSON (sorted keys, compact; odd values through `str`)."""
    try:
        return json.dumps(
            args, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
        )
    except (TypeError, ValueError, RecursionError):
        return repr(sorted((str(k), repr(v)) for k, v in args.items()))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _key_value(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else canonical_args({"v": value})[5:-1]
    # Source keys are kept in state, stubs and labels: no credential shapes in them.
    text = redact(text.strip())
    if not text:
        return None
    if len(text) > _MAX_KEY_VALUE:
        return f"{text[:120]}…#{_digest(text)}"
    return text


def source_key(tool_name: str, args: Mapping[str, Any] | str | None) -> str:
    """The recall-gate source of a tool call: `tool:key-argument`.

    The key argument is the first present argument of each group of `KEY_ARGUMENTS` (path-like,
    command-like, query-like), joined by ` :: ` (e.g. `Grep:src :: TODO`). Without any, the
    key is `tool:<sha256 prefix of the canonical arguments>`. Total: never raises.
    """
    try:
        mapping = coerce_args(args)
        parts: list[str] = []
        for group in KEY_ARGUMENTS:
            for name in group:
                value = _key_value(mapping.get(name))
                if value is not None:
                    parts.append(value)
                    break
        tool = str(tool_name)
        if parts:
            return f"{tool}:{' :: '.join(parts)}"
        return f"{tool}:{_digest(canonical_args(mapping))}"
    except Exception:
        return f"{tool_name!s}:?"


def call_signature(tool_name: str, args: Mapping[str, Any]) -> str:
    """A short hash of tool name plus canonical arguments (identical calls share it)."""
    return _digest(f"{tool_name}\x00{canonical_args(args)}")


def _clip_id(call_id: str) -> str:
    return call_id[:_MAX_ID_CHARS]


class ReadRecord(BaseModel):
    """The last read of one file (by read key: source plus arguments)."""

    model_config = ConfigDict(extra="ignore")

    ref: str
    """Ref of the content returned."""
    call_id: str
    """Call that returned it."""


class CallRecord(BaseModel):
    """One ingested call, for loop detection."""

    model_config = ConfigDict(extra="ignore")

    signature: str
    """`call_signature` of the call."""
    ref: str
    """Ref of its original output."""
    call_id: str
    """The call's id."""


class IngestMemory(BaseModel):
    """Per-thread memory of the ingestion gate (bounded, JSON-serialisable)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    seen: dict[str, str] = Field(default_factory=dict)
    """Ref of an original output -> call id of the first result with that content."""
    reads: dict[str, ReadRecord] = Field(default_factory=dict)
    """Read key of a file read -> its last read."""
    recent: list[CallRecord] = Field(default_factory=list)
    """The last calls, oldest first."""
    recalls: dict[str, int] = Field(default_factory=dict)
    """Source key -> times the agent recalled an output of that source."""
    recalled_refs: list[str] = Field(default_factory=list)
    """Refs the agent recalled (content recalled once opens the gate for that content)."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Ref -> source key of the call that produced it (a recall by ref counts for its source)."""

    def note_recall(self, key: str) -> None:
        """Count one recall of a source key (`source_key`) or of a ref.

        A ref counts for the content and, when known, for the source that produced it.
        """
        if not isinstance(key, str) or not key:
            return
        if is_ref(key):
            if key not in self.recalled_refs:
                self.recalled_refs.append(key)
                del self.recalled_refs[: max(0, len(self.recalled_refs) - _DEFAULT_CAP)]
            source = self.sources.get(key)
            if source is None:
                return
            key = source
        self.recalls[key] = self.recalls.pop(key, 0) + 1
        _trim(self.recalls, _DEFAULT_CAP)

    def recall_count(self, source: str) -> int:
        """Times a source was recalled."""
        return self.recalls.get(source, 0)

    def gate_open(self, source: str, ref: str, threshold: int) -> bool:
        """True when the source was recalled `threshold` times or this content was recalled."""
        return self.recall_count(source) >= threshold or ref in self.recalled_refs

    def loop_state(self, signature: str, ref: str, call_id: str) -> tuple[int, bool, str | None]:
        """(identical calls in a row including this one, all with this output, last call id)."""
        history = self.recent
        if history and history[-1].call_id == call_id and history[-1].signature == signature:
            history = history[:-1]  # the same call ingested again: do not count it twice
        run = 1
        same = True
        last: str | None = None
        for record in reversed(history):
            if record.signature != signature:
                break
            run += 1
            same = same and record.ref == ref
            if last is None:
                last = record.call_id
        return run, same and run > 1, last

    def remember(
        self,
        *,
        ref: str,
        call_id: str,
        source: str,
        signature: str,
        read_key: str | None,
        max_entries: int = _DEFAULT_CAP,
    ) -> None:
        """Record one ingested result (called by `Pipeline.run` after the passes)."""
        call_id = _clip_id(call_id)
        if ref not in self.seen:
            self.seen[ref] = call_id
        _trim(self.seen, max_entries)
        self.sources.pop(ref, None)
        self.sources[ref] = source
        _trim(self.sources, max_entries)
        if read_key is not None:
            self.reads.pop(read_key, None)
            self.reads[read_key] = ReadRecord(ref=ref, call_id=call_id)
            _trim(self.reads, max_entries)
        record = CallRecord(signature=signature, ref=ref, call_id=call_id)
        if self.recent and self.recent[-1].call_id == call_id:
            self.recent[-1] = record
        else:
            self.recent.append(record)
        del self.recent[: max(0, len(self.recent) - RECENT_CAP)]


def _trim(table: dict[str, Any], cap: int) -> None:
    while len(table) > cap:
        del table[next(iter(table))]

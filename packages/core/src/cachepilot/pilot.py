"""`CachePilot`: the facade the plugins use (DESIGN §5).

`ingest` runs once per tool result (reduce, archive the original when lossy); `prepare` runs
once per model call (canonicalize, apply the plan, order tools with `recall` present from the
first call, check pairing); `recall` serves the recall tool; `record_usage` keeps totals.
Per-thread state (`PilotState`) is small and JSON-serialisable so the plugins can keep it in
their framework's own persistence (graph state, session store).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cachepilot.artifacts import Artifact, ArtifactStore, SQLiteArtifactStore, default_store_path
from cachepilot.canonical import CanonicalConfig, Canonicalizer, CanonicalState, tool_fingerprint
from cachepilot.messages import Message, pairing_issues
from cachepilot.plan import Plan, apply_plan
from cachepilot.recall import RECALL_TOOL_NAME, RECALL_TOOL_SCHEMA, recall
from cachepilot.reduce import IngestMemory, Pipeline, ReduceConfig, normalize_output, source_key
from cachepilot.tokens import DEFAULT_ENCODING
from cachepilot.usage import Usage

__all__ = ["CachePilot", "Config", "IngestReport", "PilotState"]

logger = logging.getLogger(__name__)

_STATE_VERSION = 1
_ARGS_META_LIMIT = 2_000


class Config(BaseModel):
    """Settings of a `CachePilot`. Every field is validated when the config is built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    canonicalize: bool = True
    """Move volatile values (dates, paths, ids) out of the system prompt."""
    reduce: bool = True
    """Reduce tool outputs at ingestion (originals archived, recallable)."""
    recall_tool: bool = True
    """Offer the `recall` tool from the first model call on."""
    canonical: CanonicalConfig = Field(default_factory=CanonicalConfig)
    """Canonicalizer settings."""
    reduction: ReduceConfig = Field(default_factory=ReduceConfig)
    """Reduction pipeline settings (per-tool profiles, limits, gate)."""
    encoding: str = DEFAULT_ENCODING
    """tiktoken encoding for token counts."""
    provider: str = "openai-gpt-5.4-mini"
    """Provider profile (prices, cache TTL) the cost model uses."""

    @field_validator("encoding", "provider")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a non-empty name")
        return value

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str) -> str:
        from cachepilot.sim import get_profile

        get_profile(value)
        return value


class PilotState(BaseModel):
    """Per-thread state: small, JSON-serialisable, owned by the framework's persistence."""

    version: int = _STATE_VERSION
    canonical: CanonicalState = Field(default_factory=CanonicalState)
    """Frozen volatile values and their placeholders."""
    ingest: IngestMemory = Field(default_factory=IngestMemory)
    """What the reduction passes remember (seen outputs, reads, recent calls, recalls)."""
    plan: Plan = Field(default_factory=Plan)
    """Maintenance epochs."""
    usage: dict[str, int] = Field(default_factory=dict)
    """Usage totals (`Usage.to_dict` keys)."""
    calls: int = 0
    """Model calls prepared."""
    last_request_time: float | None = None
    """Unix time of the last prepared call."""
    tools_fingerprint: str | None = None
    """Fingerprint of the tool set of the last call (a change breaks the prefix)."""
    recalls: int = 0
    """Successful recalls served."""


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What `ingest_report` did with one tool result."""

    text: str
    """The text to put in the transcript."""
    ref: str | None
    """Ref of the archived original, when the result was changed."""
    original_chars: int
    steps: tuple[str, ...] = field(default_factory=tuple)
    """Names of the passes that changed the text."""


class CachePilot:
    """Cache-aware context management for one agent (many threads).

    Args:
        config: settings; `Config()` when omitted.
        store: artifact store for archived originals. Default: an SQLite file in the per-user
            cache directory (`$CACHEPILOT_HOME`, else `$XDG_CACHE_HOME/cachepilot`, else
            `~/.cache/cachepilot`), opened on first use, so originals survive restarts.
    """

    def __init__(self, config: Config | None = None, *, store: ArtifactStore | None = None) -> None:
        self.config = config or Config()
        self._store = store
        self._store_lock = threading.Lock()
        self._states: dict[str, PilotState] = {}
        self._lock = threading.RLock()
        self._pipeline = Pipeline(self.config.reduction)
        self._canonicalizer = Canonicalizer(self.config.canonical)
        self._warned_pairing: set[str] = set()

    # --- state -------------------------------------------------------------------------------

    @property
    def store(self) -> ArtifactStore:
        """The artifact store (the default SQLite store is opened here on first use)."""
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = SQLiteArtifactStore(default_store_path())
        return self._store

    def state(self, thread: str = "default") -> PilotState:
        """The live state of a thread (created empty on first use)."""
        _check_thread(thread)
        with self._lock:
            found = self._states.get(thread)
            if found is None:
                found = PilotState()
                self._states[thread] = found
            return found

    def load_state(self, thread: str, state: PilotState | Mapping[str, Any] | str) -> PilotState:
        """Install a thread's state from persistence (model, dict or JSON text)."""
        _check_thread(thread)
        if isinstance(state, str):
            loaded = PilotState.model_validate_json(state)
        elif isinstance(state, PilotState):
            loaded = state.model_copy(deep=True)
        else:
            loaded = PilotState.model_validate(state)
        with self._lock:
            self._states[thread] = loaded
        return loaded

    def export_state(self, thread: str = "default") -> dict[str, Any]:
        """A JSON-ready copy of a thread's state."""
        return self.state(thread).model_dump(mode="json")

    # --- ingestion ---------------------------------------------------------------------------

    def ingest(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        output: object,
        call_id: str,
        thread: str = "default",
    ) -> str:
        """Reduce one tool result at the ingestion gate; archive the original when lossy.

        Never raises on bad output (binary, huge, empty, non-UTF-8, odd types): the original is
        archived whenever the returned text differs from it, and problems are logged.
        """
        return self.ingest_report(tool_name, args, output, call_id, thread).text

    def ingest_report(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        output: object,
        call_id: str,
        thread: str = "default",
    ) -> IngestReport:
        """`ingest` with details (ref, passes that fired)."""
        _check_thread(thread)
        parsed_args = _parse_args(args)
        result = normalize_output(output)
        original_chars = len(result.text)
        state = self.state(thread)
        if not self.config.reduce:
            return IngestReport(result.text, None, original_chars)
        try:
            with self._lock:
                reduction = self._pipeline.run(
                    tool_name, parsed_args, call_id, result, state.ingest
                )
        except Exception:
            logger.warning(
                "reduction failed for tool %r call %s; output kept as is",
                tool_name,
                call_id,
                exc_info=True,
            )
            return IngestReport(result.text, None, original_chars)
        steps = tuple(s.pass_name for s in reduction.steps if s.chars_after != s.chars_before)
        if not reduction.lossy:
            return IngestReport(reduction.text, None, original_chars, steps)
        meta = {
            "tool": tool_name,
            "args": _clip_args(parsed_args),
            "call_id": call_id,
            "source": source_key(tool_name, parsed_args),
            "original_chars": original_chars,
            "reduced_chars": len(reduction.text),
            "reason": reduction.reason or (steps[-1] if steps else "reduced"),
            "kind": result.kind,
        }
        try:
            ref = self.store.put(thread, result.original, meta=meta, media_type=result.media_type)
        except Exception:
            # Nothing may be lost: if the original cannot be archived, the model gets it whole.
            logger.error(
                "could not archive the original of tool %r call %s; passing it through unreduced",
                tool_name,
                call_id,
                exc_info=True,
            )
            return IngestReport(result.text, None, original_chars)
        if reduction.ref is not None and ref != reduction.ref:
            logger.error(
                "artifact ref mismatch (%s != %s); passing output through", ref, reduction.ref
            )
            return IngestReport(result.text, None, original_chars)
        return IngestReport(reduction.text, ref, original_chars, steps)

    async def aingest(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        output: object,
        call_id: str,
        thread: str = "default",
    ) -> str:
        """Async twin of `ingest` (runs the work in a worker thread)."""
        return await asyncio.to_thread(self.ingest, tool_name, args, output, call_id, thread)

    # --- model calls -------------------------------------------------------------------------

    def prepare(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Build the request of one model call: (system, messages, tools).

        Deterministic: the same transcript and state give a byte-identical request. Inputs are
        never mutated; unchanged messages are returned as the same objects.
        """
        _check_thread(thread)
        state = self.state(thread)
        with self._lock:
            if self.config.canonicalize:
                system, canon_messages, canon_tools = self._canonicalizer.apply(
                    system, messages, tools, state.canonical
                )
            else:
                canon_messages, canon_tools = list(messages), [dict(t) for t in tools]
            view = apply_plan(canon_messages, state.plan)
            out_tools = self._with_recall(canon_tools)
            fingerprint = tool_fingerprint(out_tools)
            if state.tools_fingerprint is not None and fingerprint != state.tools_fingerprint:
                logger.info("thread %s: tool set changed (the cached prefix breaks here)", thread)
            state.tools_fingerprint = fingerprint
            state.calls += 1
            state.last_request_time = time.time() if now is None else now
        self._check_pairing(view, thread)
        return system, view, out_tools

    async def aprepare(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Async twin of `prepare` (pure CPU work: runs inline)."""
        return self.prepare(system, messages, tools, thread, now=now)

    def _with_recall(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from cachepilot.canonical import order_tools

        names = {_tool_name(t) for t in tools}
        if self.config.recall_tool and RECALL_TOOL_NAME not in names:
            tools = [*tools, json.loads(json.dumps(RECALL_TOOL_SCHEMA))]
        if self.config.canonicalize and self.config.canonical.sort_tools:
            return order_tools(tools)
        return tools

    def _check_pairing(self, view: Sequence[Message], thread: str) -> None:
        issues = pairing_issues(view, allow_pending_tail=True)
        if issues and thread not in self._warned_pairing:
            self._warned_pairing.add(thread)
            logger.warning(
                "thread %s: the history breaks tool-call pairing (%s); sent as is, the provider "
                "may reject it",
                thread,
                "; ".join(str(i) for i in issues[:3]),
            )

    # --- recall ------------------------------------------------------------------------------

    def recall(
        self,
        ref: str,
        lines: str | None = None,
        grep: str | None = None,
        max_chars: int = 20_000,
        thread: str = "default",
    ) -> str:
        """Serve the recall tool: the archived original (or a slice), as model-facing text."""
        _check_thread(thread)
        state = self.state(thread)

        def on_access(artifact: Artifact) -> None:
            source = artifact.meta.get("source") if isinstance(artifact.meta, dict) else None
            with self._lock:
                state.recalls += 1
                if isinstance(source, str):
                    state.ingest.note_recall(source)

        result = recall(
            self.store,
            thread,
            ref,
            lines=lines,
            grep=grep,
            max_chars=max_chars,
            on_access=on_access,
        )
        return result.render()

    async def arecall(
        self,
        ref: str,
        lines: str | None = None,
        grep: str | None = None,
        max_chars: int = 20_000,
        thread: str = "default",
    ) -> str:
        """Async twin of `recall`."""
        return await asyncio.to_thread(self.recall, ref, lines, grep, max_chars, thread)

    # --- usage -------------------------------------------------------------------------------

    def record_usage(self, usage: Usage, thread: str = "default") -> None:
        """Add one call's provider usage to the thread's totals."""
        state = self.state(thread)
        with self._lock:
            for key, value in usage.to_dict().items():
                state.usage[key] = state.usage.get(key, 0) + value


def _check_thread(thread: object) -> None:
    if not isinstance(thread, str) or not thread:
        raise ValueError(f"thread must be a non-empty string, not {thread!r}")


def _parse_args(args: Mapping[str, Any] | str | None) -> dict[str, Any]:
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            value = json.loads(args)
        except ValueError:
            return {"input": args}
        return value if isinstance(value, dict) else {"input": value}
    return dict(args)


def _clip_args(args: Mapping[str, Any]) -> dict[str, Any]:
    text = json.dumps(args, default=str, ensure_ascii=False, sort_keys=True)
    if len(text) <= _ARGS_META_LIMIT:
        loaded: dict[str, Any] = json.loads(text)
        return loaded
    return {"_truncated": text[:_ARGS_META_LIMIT]}


def _tool_name(tool: Mapping[str, Any]) -> str:
    fn = tool.get("function")
    if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
        return str(fn["name"])
    name = tool.get("name")
    return name if isinstance(name, str) else ""

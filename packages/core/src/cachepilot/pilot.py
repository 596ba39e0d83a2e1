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
import operator
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cachepilot.artifacts import Artifact, ArtifactStore, SQLiteArtifactStore, default_store_path
from cachepilot.artifacts.base import check_thread
from cachepilot.breakpoints import CacheAnchors, advance_anchors, plan_breakpoints
from cachepilot.canonical import (
    CanonicalConfig,
    Canonicalizer,
    CanonicalState,
    canonical_json,
    canonicalize_tool,
    tool_fingerprint,
)
from cachepilot.canonical import tool_name as schema_name
from cachepilot.events import LoopEvent, LoopHook
from cachepilot.fold import Summarizer, cut_before, emergency_fold, fold_start, plan_fold
from cachepilot.lifecycle import Estimator, LifecycleRegistry, RuleEstimator, SegmentState
from cachepilot.maintenance import (
    Candidate,
    Decision,
    FoldEstimate,
    MaintenanceConfig,
    argument_plan,
    build_edits,
    decide,
    fold_estimate,
    prune_candidates,
    stub_text,
    task_fold_estimate,
)
from cachepilot.messages import (
    ImagePart,
    KeyTracker,
    Message,
    PairingIssue,
    PairingScanner,
    missing_results,
)
from cachepilot.plan import Edit, Epoch, Plan, PlanRenderer, PlanView
from cachepilot.pricing import Price
from cachepilot.recall import RECALL_TOOL_NAME, RECALL_TOOL_SCHEMA, recall
from cachepilot.reduce import (
    IngestMemory,
    Pipeline,
    ReduceConfig,
    Reduction,
    ToolResult,
    coerce_args,
    normalize_output,
    source_key,
)
from cachepilot.reduce.images import image_replacement
from cachepilot.reduce.memory import canonical_args
from cachepilot.reduce.passes.size import unarchived_preview
from cachepilot.reduce.stubs import invalid_utf8_note, pointer, recall_call
from cachepilot.refs import make_ref
from cachepilot.settle import settle
from cachepilot.sim import Request, get_profile, render_request
from cachepilot.tokens import DEFAULT_ENCODING, TokenCounter, get_counter
from cachepilot.usage import Usage
from cachepilot.views import ResultViews, views_meta

if TYPE_CHECKING:
    from cachepilot.compress import ObservationCompressor
    from cachepilot.compress.observation import Compressed

__all__ = ["CachePilot", "Config", "IngestReport", "PilotState"]

logger = logging.getLogger(__name__)

_STATE_VERSION = 1
_MAX_DECISIONS = 50
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
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    """When and how already-sent history is rewritten (pruning, eviction, scheduler)."""
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
    lifecycle: LifecycleRegistry = Field(default_factory=LifecycleRegistry)
    """Tasks and work units with their states (what may be evicted)."""
    decisions: list[Decision] = Field(default_factory=list)
    """The latest scheduler decisions (bounded), for explanations."""
    views: dict[str, str] = Field(default_factory=dict)
    """Tool results already ingested: view key -> ref of the archived reduced view (`""` when
    the model reads the result unchanged). See `cachepilot.views`."""
    archive_failures: int = 0
    """Tool results whose original could not be archived (the store failed): they reached the
    model whole when under the size limit, else as a head/tail preview with the middle lost."""
    anchors: CacheAnchors = Field(default_factory=CacheAnchors)
    """Stable cache anchors for explicit-breakpoint providers (see `cache_breakpoints`)."""
    revision: int = 0
    """Bumped by every change (ingest, prepare, recall, usage): of two copies of a thread's
    state, the one with the higher revision is the newer (plugins merge parallel updates by
    it)."""


class _ViewCache:
    """One thread's memory of its last view, so that a call costs O(new messages).

    Holds the incremental renderer, each view message's token count (with their sum), the
    pairing scan of the view so far, and the plan's edited keys and the lifecycle's
    evictable results as of their last change. Everything is rebuilt whenever the render was
    not an extension of the previous one. Never persisted: `PilotState` stays the truth.
    """

    def __init__(self) -> None:
        self.renderer = PlanRenderer()
        self._sized: list[Message] = []
        """The view messages `_sizes` counts (held, so their ids stay theirs)."""
        self._sizes: list[int] = []
        self._total = 0
        self._counter: TokenCounter | None = None
        self._stale: tuple[list[Message], list[int]] | None = None
        """The previous view's messages and sizes after a full render, for the messages the
        new view shares with it."""
        self._pairing = PairingScanner()
        self._edited_plan: Plan | None = None
        self._edited_epochs: list[Epoch] = []
        self._edited_counts: list[int] = []
        self._edited: set[str] = set()
        self._registry: LifecycleRegistry | None = None
        self._transitions = -1
        self._evictable: dict[str, str] = {}
        self.view: PlanView | None = None
        """The last rendered view."""
        self._rewritable: int | None = None
        self._rewritable_scanned = 0

    def render(self, messages: Sequence[Message], plan: Plan, keys: Sequence[str]) -> PlanView:
        """`render_plan(messages, plan, keys)`, extending the previous view when it can."""
        view = self.renderer.render(messages, plan, keys)
        if self.renderer.extended_from is None:
            if self._sizes:
                self._stale = (self._sized, self._sizes)
            self._sized, self._sizes, self._total = [], [], 0
            self._pairing = PairingScanner()
            self._rewritable, self._rewritable_scanned = None, 0
        self.view = view
        return view

    def forget_rewritable(self) -> None:
        """Scan for the first rewritable message again (positions in the view moved)."""
        self._rewritable, self._rewritable_scanned = None, 0

    def first_rewritable(
        self, plan: Plan, counter: TokenCounter, config: MaintenanceConfig
    ) -> int | None:
        """Index in the last view of the first message a maintenance point could rewrite: a
        tool result not edited yet and large enough to stub, or an assistant message with
        long arguments not reduced yet. Scans new messages only until one is found."""
        view = self.view
        if view is None:
            return None
        if self._rewritable is None:
            edited = self.edited_keys(plan)
            start = self._rewritable_scanned
            for index in range(start, len(view.messages)):
                message, key = view.messages[index], view.keys[index]
                if key in edited:
                    continue
                if message.role == "tool":
                    found = counter.count_message(message) >= config.min_result_tokens
                else:
                    found = config.reduce_arguments and any(
                        len(c.arguments) > config.argument_min_chars for c in message.tool_calls
                    )
                if found:
                    self._rewritable = index
                    break
            self._rewritable_scanned = len(view.messages)
        return self._rewritable

    def sizes(self, view: Sequence[Message], counter: TokenCounter) -> tuple[list[int], int]:
        """Tokens of each message of the last rendered `view`, and their sum (read-only)."""
        if counter is not self._counter:
            self._sized, self._sizes, self._total = [], [], 0
            self._stale, self._counter = None, counter
        known = len(self._sizes)
        if known < len(view):
            fresh = view[known:]
            stale, self._stale = self._stale, None
            if stale is not None:
                # After an epoch most of the view is the same objects: reuse their sizes
                # (`stale` holds those objects, so an id found here is still theirs).
                old = dict(zip(map(id, stale[0]), stale[1], strict=True))
                new = [old.get(id(m), -1) for m in fresh]
                for i, size in enumerate(new):
                    if size < 0:
                        new[i] = counter.count_message(fresh[i])
            else:
                new = [counter.count_message(m) for m in fresh]
            self._sized.extend(fresh)
            self._sizes.extend(new)
            self._total += sum(new)
        return self._sizes, self._total

    def pairing_issues(self, view: Sequence[Message]) -> list[PairingIssue]:
        """`pairing_issues(view)` of the last rendered `view`, scanning its new part only."""
        try:
            self._pairing.feed(view[self._pairing.fed :])
        except Exception:
            self._pairing = PairingScanner()  # half-fed: start over next time
            raise
        return self._pairing.issues(allow_pending_tail=True)

    def edited_keys(self, plan: Plan) -> set[str]:
        """`plan.edited_keys()` (read-only); appended epochs add their keys only."""
        known = len(self._edited_epochs)
        if (
            plan is not self._edited_plan
            or len(plan.epochs) < known
            or (known and plan.epochs[known - 1] is not self._edited_epochs[-1])
            or (known and len(plan.epochs[known - 1].edits) != self._edited_counts[-1])
        ):
            self._edited_plan, self._edited_epochs, self._edited_counts = plan, [], []
            self._edited = set()
        for epoch in plan.epochs[len(self._edited_epochs) :]:
            self._edited |= epoch.edited_keys()
            self._edited_epochs.append(epoch)
            self._edited_counts.append(len(epoch.edits))
        return self._edited

    def evictable(self, registry: LifecycleRegistry) -> dict[str, str]:
        """Keys of evictable tool results with why (read-only), kept until a transition."""
        if registry is not self._registry or registry.transitions != self._transitions:
            out: dict[str, str] = {}
            for unit in registry.evictable():
                why = (unit.reason or "finished work")[:60]
                for key in unit.keys:
                    out[key] = why
            self._evictable = out
            self._registry, self._transitions = registry, registry.transitions
        return self._evictable


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What `ingest_report` did with one tool result."""

    text: str
    """The text to put in the transcript."""
    ref: str | None
    """Ref of the archived original, when the result was changed."""
    original_chars: int
    steps: tuple[str, ...] = field(default_factory=tuple)
    """Names of the passes that changed the text, in order."""
    chars_saved: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    """(pass name, characters it removed) for each of `steps` (negative when a pass added a
    note)."""
    loop: LoopEvent | None = None
    """Set when the call repeats the previous ones (see `CachePilot(on_loop=…)`)."""


class CachePilot:
    """Cache-aware context management for one agent (many threads).

    Args:
        config: settings; `Config()` when omitted.
        store: artifact store for archived originals. Default: an SQLite file in the per-user
            cache directory (`$CACHEPILOT_HOME`, else `$XDG_CACHE_HOME/cachepilot`, else
            `~/.cache/cachepilot`), opened on first use, so originals survive restarts.
        estimator: lifecycle estimator; the rule estimator when omitted (an `LLMEstimator`
            asks a chat model which work is finished).
        summarizer: what writes fold summaries; the zero-LLM resume block when omitted
            (`fold.ChatModelSummarizer` wraps any LangChain chat model or OpenAI client).
        compressor: optional `compress.ObservationCompressor`: a model compresses large tool
            outputs at ingestion (never already-sent history); the rule passes apply when it
            is absent, declines or fails.
        on_loop: called with a `LoopEvent` when a tool result extends a run of identical
            calls (`ReduceConfig.loop_flag_after` or more in a row), once per result, so the
            host can act on a doom loop (stop, escalate, change strategy). Its errors are
            logged, never raised.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        store: ArtifactStore | None = None,
        estimator: Estimator | None = None,
        summarizer: Summarizer | None = None,
        compressor: ObservationCompressor | None = None,
        on_loop: LoopHook | None = None,
    ) -> None:
        self.config = config or Config()
        self._on_loop = on_loop
        self._store = store
        self._store_lock = threading.Lock()
        self._states: dict[str, PilotState] = {}
        self._lock = threading.RLock()
        self._pipeline = Pipeline(self.config.reduction)
        self._canonicalizer = Canonicalizer(self.config.canonical)
        self._warned_pairing: set[str] = set()
        # Per-thread caches that make a call cost O(new messages); never part of the state.
        self._trackers: dict[str, KeyTracker] = {}
        self._views: dict[str, _ViewCache] = {}
        self._tool_tokens: dict[str, int] = {}
        self._fingerprints: dict[tuple[int, ...], tuple[tuple[Mapping[str, Any], ...], str]] = {}
        self._estimator: Estimator = estimator or RuleEstimator()
        self._summarizer = summarizer
        self._compressor = compressor
        self._archive_down = False  # the last archive attempt failed (logged once per outage)
        # The recall tool's schema with sorted keys, one object per pilot (sent every call).
        self._recall_tool: dict[str, Any] = canonicalize_tool(RECALL_TOOL_SCHEMA)
        self._result_views = ResultViews(skip=(RECALL_TOOL_NAME,))

    # --- state -------------------------------------------------------------------------------

    @property
    def store(self) -> ArtifactStore:
        """The artifact store (the default SQLite store is opened here on first use)."""
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = SQLiteArtifactStore(default_store_path())
        return self._store

    @property
    def has_store(self) -> bool:
        """True when a store was given or the default one has been opened."""
        return self._store is not None

    def use_store_if_unset(self, store: ArtifactStore) -> bool:
        """Install `store` unless the pilot already has one (given or opened).

        Plugins call it to route artifacts to their framework's own store (e.g. a LangGraph
        `BaseStore`) when the user did not choose one. Returns True when `store` was installed.
        """
        with self._store_lock:
            if self._store is not None:
                return False
            self._store = store
            return True

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

    def drop_thread(self, thread: str, *, artifacts: bool = True) -> None:
        """Forget a thread: its live state and caches, and (by default) its archived data.

        For scopes that end with their run (a request without a thread of its own) and for a
        user deleting a conversation. Persisted copies of the state (graph state, sessions)
        belong to the framework and are not touched. Never raises on a store failure (logged).
        """
        _check_thread(thread)
        with self._lock:
            self._states.pop(thread, None)
            self._trackers.pop(thread, None)
            self._views.pop(thread, None)
            self._warned_pairing.discard(thread)
        self._result_views.forget(thread)
        if artifacts and self.has_store:
            try:
                self.store.delete_thread(thread)
            except Exception:
                logger.warning("thread %s: archived data not deleted", thread, exc_info=True)

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
        parsed_args = coerce_args(args)  # total: a mapping, JSON text, other text or junk
        result = normalize_output(output)
        original_chars = len(result.text)
        state = self.state(thread)
        if not self.config.reduce:
            if result.exact or result.kind == "empty":
                return IngestReport(result.text, None, original_chars)
            # Binary or invalid UTF-8: the text is a lossy decoding, so archive the original
            # and tell the model where it is.
            ref = make_ref(result.original)
            shown = ref if self.config.recall_tool else None
            return self._archive(
                thread,
                result,
                f"{result.text}\n{invalid_utf8_note(shown)}",
                tool_name=tool_name,
                args=parsed_args,
                call_id=call_id,
                reason="decoded",
                saved=(),
            )
        compressed = None
        if self._compressor is not None:
            try:  # outside the lock: a model call must not hold up other threads
                compressed = self._compressor.compress(
                    tool_name, parsed_args, call_id, result, thread=thread,
                    memory=state.ingest, reduce_config=self.config.reduction, store=self.store,
                )  # fmt: skip
            except Exception:
                logger.warning("observation compressor unavailable; rule passes apply")
        try:
            # The passes run outside the pilot's lock (only the thread's memory is read and
            # updated under it): a huge output never holds up other threads' calls.
            reduction = self._pipeline.run(
                tool_name, parsed_args, call_id, result, state.ingest,
                compressed=compressed.text if compressed is not None else None,
                memory_lock=self._lock, recall=self.config.recall_tool,
            )  # fmt: skip
            with self._lock:
                state.revision += 1
        except Exception:
            logger.warning(
                "reduction failed for tool %r call %s; output kept as is",
                tool_name,
                call_id,
                exc_info=True,
            )
            return IngestReport(result.text, None, original_chars)
        loop = self._loop_event(thread, tool_name, call_id, reduction)
        report = self._ingest_reduced(
            thread,
            tool_name,
            parsed_args,
            call_id,
            result,
            reduction=reduction,
            compressed=compressed,
        )
        return report if loop is None else replace(report, loop=loop)

    def _loop_event(
        self, thread: str, tool_name: str, call_id: str, reduction: Reduction
    ) -> LoopEvent | None:
        """The loop event of a result that extends a run of identical calls, sent to the
        host's hook (whose errors are logged)."""
        run = reduction.loop_run
        if run < self.config.reduction.loop_flag_after:
            return None
        event = LoopEvent(thread, tool_name, call_id, run, reduction.loop_same_output)
        logger.info(
            "thread %s: tool %r called identically %d times in a row", thread, tool_name, run
        )
        if self._on_loop is not None:
            try:
                self._on_loop(event)
            except Exception:
                logger.warning("thread %s: the on_loop hook failed", thread, exc_info=True)
        return event

    def _ingest_reduced(
        self,
        thread: str,
        tool_name: str,
        parsed_args: dict[str, Any],
        call_id: str,
        result: ToolResult,
        *,
        reduction: Reduction,
        compressed: Compressed | None,
    ) -> IngestReport:
        """The report of a reduced result: archived when the reduction is lossy."""
        original_chars = len(result.text)
        steps = tuple(s.pass_name for s in reduction.steps)
        saved = tuple((s.pass_name, s.chars_before - s.chars_after) for s in reduction.steps)
        if not reduction.lossy:
            return IngestReport(reduction.text, None, original_chars, steps, saved)
        text = reduction.text
        lossy_steps = [s.pass_name for s in reduction.steps if not s.lossless]
        ref = reduction.ref or make_ref(result.original)
        shown = ref if self.config.recall_tool else None
        # Every stub names the recall call of `ref`, or (no recall tool) ends "… elided]".
        named = recall_call(ref) if shown is not None else " elided]"
        if (lossy_steps or not result.exact) and named not in text:
            # A pass left content out without naming the ref (e.g. folded similar lines, slimmed
            # JSON): the model could not get it back. Name it, unless the whole output is shorter.
            note = f"[output shortened ({', '.join(lossy_steps) or result.kind}); "
            note += f"{pointer(shown)}]"
            if result.exact and len(text) + len(note) + 1 >= len(result.text):
                return IngestReport(result.text, None, original_chars)
            text = f"{text}\n{note}"
        report = self._archive(
            thread,
            result,
            text,
            tool_name=tool_name,
            args=parsed_args,
            call_id=call_id,
            reason=reduction.reason or (steps[-1] if steps else "reduced"),
            saved=saved,
            extra_meta=compressed.meta if compressed is not None else None,
        )
        if report.ref is not None and reduction.ref is not None and report.ref != reduction.ref:
            logger.error(
                "artifact ref mismatch (%s != %s); passing output through",
                report.ref,
                reduction.ref,
            )
            return IngestReport(result.text, None, original_chars)
        return report

    def _archive(
        self,
        thread: str,
        result: ToolResult,
        text: str,
        *,
        tool_name: str,
        args: dict[str, Any],
        call_id: str,
        reason: str,
        saved: tuple[tuple[str, int], ...],
        extra_meta: Mapping[str, Any] | None = None,
    ) -> IngestReport:
        """Archive `result.original`; the report of `text` naming its ref (or, when the store
        fails, of the output as `_unarchived` bounds it)."""
        original_chars = len(result.text)
        steps = tuple(name for name, _ in saved)
        meta = {
            "tool": tool_name,
            "args": _clip_args(args),
            "call_id": call_id,
            "source": source_key(tool_name, args),
            "original_chars": original_chars,
            "reduced_chars": len(text),
            "reason": reason,
            "kind": result.kind,
            **(extra_meta or {}),
        }
        try:
            ref = self.store.put(thread, result.original, meta=meta, media_type=result.media_type)
        except Exception:
            return self._unarchived(thread, result, tool_name, args, call_id)
        if self._archive_down:
            self._archive_down = False
            logger.warning("the artifact archive accepts originals again")
        return IngestReport(text, ref, original_chars, steps, saved)

    def _unarchived(
        self,
        thread: str,
        result: ToolResult,
        tool_name: str,
        args: dict[str, Any],
        call_id: str,
    ) -> IngestReport:
        """The store failed: the output whole when under the tool's size limit (nothing is
        lost), else a head/tail preview that says the middle was not kept. Counted in the
        thread's `archive_failures`; logged with a traceback once per outage."""
        with self._lock:
            state = self.state(thread)
            state.archive_failures += 1
            state.revision += 1
        first, self._archive_down = not self._archive_down, True
        logger.log(
            logging.ERROR if first else logging.WARNING,
            "could not archive the original of tool %r call %s; outputs over the size limit "
            "are cut to a preview until the archive is back",
            tool_name,
            call_id,
            exc_info=first,
        )
        profile = self.config.reduction.profile_for(tool_name, args)
        text = result.text
        if len(text) > min(profile.limit, self.config.reduction.hard_cap):
            text = unarchived_preview(text, profile.head_chars, profile.tail_chars)
        return IngestReport(text, None, len(result.text))

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

    # --- the model's view of tool results ----------------------------------------------------

    def reduce_results(
        self,
        messages: Sequence[Message],
        thread: str = "default",
        *,
        recall: bool | None = None,
        native: Collection[str] = (),
    ) -> list[Message]:
        """The transcript as the model reads it: each tool result shown as its reduced view.

        The framework keeps the plain transcript; call this on it before `prepare`, once per
        model call. Each result is ingested the first time it is seen (reduced, the original
        archived when the reduction is lossy) and shows the same text on every later call,
        including in a new process that loaded the thread's state. Results of the recall tool
        are shown as they are. Inputs are never mutated; unchanged messages are returned as
        the same objects.

        Args:
            messages: the plain transcript.
            thread: the scope.
            recall: whether the model can call `recall` (default: `Config.recall_tool`).
                Without it no result is reduced: a ref the model cannot follow is never shown.
            native: call ids of results a native context manager (e.g. LangChain's
                `ContextEditingMiddleware`) already cleared: shown as they are, never
                ingested or archived (the placeholder is not a tool output).
        """
        _check_thread(thread)
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise ValueError("messages must be a sequence of cachepilot Message objects")
        offer = self.config.recall_tool if recall is None else bool(recall)
        if not offer or not self.config.reduce:
            return list(messages)
        state = self.state(thread)

        def ingest(name: str, arguments: str, output: object, call_id: str, key: str) -> str:
            report = self.ingest_report(name, arguments, output, call_id, thread)
            ref = ""
            if report.text != output:
                try:
                    ref = self.store.put(
                        thread,
                        report.text,
                        meta=views_meta(key, report.ref, call_id),
                        media_type="text/plain; charset=utf-8",
                    )
                except Exception:  # the view still holds in this process
                    logger.warning(
                        "thread %s: the reduced view of call %s could not be archived; a new "
                        "process will reduce it again",
                        thread,
                        call_id,
                        exc_info=True,
                    )
                    return report.text
            with self._lock:
                state.views[key] = ref
                state.revision += 1
            return report.text

        def load(ref: str) -> str | None:
            try:
                found = self.store.get(thread, ref)
            except Exception:
                logger.warning("thread %s: the archive is unavailable", thread, exc_info=True)
                return None
            return None if found is None else found.text

        def shrink(part: ImagePart, key: str) -> str | None:
            replacement = image_replacement(part, self.config.reduction.image_max_bytes)
            ref = ""
            if replacement is not None:
                try:  # the original first: nothing may be lost
                    original = self.store.put(
                        thread, part.url, meta={"kind": "image", "reason": "image over the limit"}
                    )
                    ref = self.store.put(thread, replacement, meta=views_meta(key, original, ""))
                except Exception:
                    logger.warning("thread %s: an image could not be archived; kept", thread)
                    return None
            with self._lock:
                state.views[key] = ref
                state.revision += 1
            return replacement

        return self._result_views.apply(
            thread,
            messages,
            state.views,
            ingest=ingest,
            load=load,
            shrink=shrink,
            native=frozenset(native),
        )

    async def areduce_results(
        self,
        messages: Sequence[Message],
        thread: str = "default",
        *,
        recall: bool | None = None,
        native: Collection[str] = (),
    ) -> list[Message]:
        """Async twin of `reduce_results` (ingestion runs in a worker thread)."""
        return await asyncio.to_thread(
            self.reduce_results, messages, thread, recall=recall, native=native
        )

    # --- model calls -------------------------------------------------------------------------

    def prepare(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        maintain: bool = True,
        recall: bool | None = None,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Build the request of one model call: (system, messages, tools).

        Deterministic: the same transcript, state and `now` give a byte-identical request
        (`now` matters only for the cold-cache rule; pass the framework's request time to
        replay exactly, else the wall clock is used). Inputs are never mutated; unchanged
        messages are returned as the same objects, and the returned tool dicts are shared
        between calls: treat them as read-only. With `maintain=False` the scheduler is not
        asked (a graph whose maintenance node already called `maintain` for this call).
        `recall` says whether the recall tool is offered (default: `Config.recall_tool`); a
        plugin keeps it the same for the whole thread, so the tool list never changes.
        """
        _check_thread(thread)
        _check_request(system, messages, tools)
        state = self.state(thread)
        if self._compressor is not None:
            self._compressor.note_history(thread, messages)  # context for later compressions
        with self._lock:
            # The recall tool joins before canonicalization: it is ordered and key-sorted like
            # every other tool, and part of the tool set from the first call on.
            in_tools = self._with_recall(tools, recall)
            offer = self.config.recall_tool if recall is None else bool(recall)
            request = self._canonical(system, messages, in_tools, state.canonical)
            keys = self._trackers.setdefault(thread, KeyTracker()).keys(messages)
            cache = self._views.setdefault(thread, _ViewCache())
            clock = time.time() if now is None else now
            rendered = None
            if maintain:
                refreshed, rendered = self._schedule(
                    thread=thread,
                    state=state,
                    raw_system=system,
                    messages=messages,
                    in_tools=in_tools,
                    request=request,
                    keys=keys,
                    clock=clock,
                    recall=offer,
                )
                request = refreshed or request
            system, canon_messages, out_tools = request
            if rendered is None:  # no scheduler, or an epoch was appended: render (again)
                rendered = cache.render(canon_messages, state.plan, keys)
            view = rendered.messages
            issues, missing = self._pairing_issues(cache, view, thread)
            if missing:
                view = _with_missing(cache, rendered, missing)
            fingerprint = self._fingerprint(out_tools)
            changed = state.tools_fingerprint is not None and fingerprint != state.tools_fingerprint
            if changed and not self.config.canonicalize:  # the canonicalizer logs it otherwise
                logger.info("thread %s: tool set changed (the cached prefix breaks here)", thread)
            state.tools_fingerprint = fingerprint
            state.calls += 1
            state.revision += 1
            state.last_request_time = clock
        if issues:
            logger.warning(
                "thread %s: the history breaks tool-call pairing (%s); calls without a result "
                "get a synthetic error result in the request, anything else is sent as is",
                thread,
                "; ".join(str(i) for i in issues[:3]),
            )
        return system, view, out_tools

    def maintain(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        recall: bool | None = None,
    ) -> bool:
        """Ask the scheduler only: append a maintenance epoch if this call should be one.

        For graphs with a maintenance step before the model step: call `maintain` there and
        `prepare(..., maintain=False)` for the model call itself. Returns True when an epoch
        was appended. Never raises on a scheduler failure (it is logged).
        """
        _check_thread(thread)
        _check_request(system, messages, tools)
        state = self.state(thread)
        with self._lock:
            in_tools = self._with_recall(tools, recall)
            # A scratch copy: the real frozen values change only with an epoch.
            scratch = state.canonical.model_copy(deep=True)
            refreshed, _ = self._schedule(
                thread=thread,
                state=state,
                raw_system=system,
                messages=messages,
                in_tools=in_tools,
                request=self._canonical(system, messages, in_tools, scratch),
                keys=self._trackers.setdefault(thread, KeyTracker()).keys(messages),
                clock=time.time() if now is None else now,
                recall=self.config.recall_tool if recall is None else bool(recall),
            )
            appended = refreshed is not None
            state.revision += 1  # decisions and the lifecycle change even without an epoch
            return appended

    def _canonical(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        frozen: CanonicalState,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """The request canonicalized against `frozen` (as given when canonicalization is off)."""
        if self.config.canonicalize:
            return self._canonicalizer.apply(system, messages, tools, frozen)
        return system, list(messages), tools

    def _schedule(
        self,
        *,
        thread: str,
        state: PilotState,
        raw_system: str | None,
        messages: Sequence[Message],
        in_tools: list[dict[str, Any]],
        request: tuple[str | None, list[Message], list[dict[str, Any]]],
        keys: Sequence[str],
        clock: float,
        recall: bool,
    ) -> tuple[tuple[str | None, list[Message], list[dict[str, Any]]] | None, PlanView | None]:
        """Ask the scheduler about `request` (canonical).

        Returns:
            (None, the view of `request` under the plan, when the scheduler rendered one) when
            no epoch is appended, else (the request canonicalized again with the frozen values
            refreshed, None).
        """
        system, canon_messages, out_tools = request
        idle = None if state.last_request_time is None else clock - state.last_request_time
        appended, rendered = self._maintain(
            thread=thread,
            state=state,
            messages=messages,
            canon_messages=canon_messages,
            keys=keys,
            system=system,
            tools=out_tools,
            idle=idle,
            recall=recall,
        )
        if not appended:
            return None, rendered
        if not self.config.canonicalize:
            return request, None
        # Frozen volatile values refresh at maintenance points only.
        return self._canonicalizer.apply(
            raw_system, messages, in_tools, state.canonical, maintenance=True
        ), None

    def _maintain(
        self,
        *,
        thread: str,
        state: PilotState,
        messages: Sequence[Message],
        canon_messages: Sequence[Message],
        keys: Sequence[str],
        system: str | None,
        tools: Sequence[Mapping[str, Any]],
        idle: float | None,
        recall: bool,
    ) -> tuple[bool, PlanView | None]:
        """Ask the scheduler whether this call is a maintenance point; append the epoch if so.

        Prune and evict come first; the fold runs only when the context is still above the
        fold trigger after them. Returns whether an epoch was appended, and the view it
        judged (None when it rendered none, or when an epoch made it stale). `recall`: the
        model is offered the recall tool (else no stub or summary names a recall call).
        Never raises: a failure skips maintenance for this call.
        """
        cfg = self.config.maintenance
        if not cfg.enabled or not messages:
            return False, None
        try:
            counter = get_counter(self.config.encoding)
            profile = get_profile(self.config.provider)
            cache = self._views.setdefault(thread, _ViewCache())
            rendered = cache.render(canon_messages, state.plan, keys)
            view, view_keys = rendered.messages, rendered.keys
            sizes, view_tokens = cache.sizes(view, counter)
            ttl = profile.ttl_seconds
            cold = ttl is not None and idle is not None and idle > ttl
            # A cold cache makes this rewrite free: evaluate the lifecycle now, so everything
            # finished by now goes in this epoch rather than breaking a warm prefix later.
            evictable = (
                self._evictable(state, messages, keys, cache, force=cold) if cfg.evict else {}
            )
            candidates = prune_candidates(
                view,
                view_keys,
                counter,
                cfg,
                already=cache.edited_keys(state.plan),
                evictable=evictable,
                sizes=sizes,
            )
            context = view_tokens + counter.count(system or "")
            context += self._tools_tokens(tools, counter)
            window = cfg.context_window or profile.context_window
            decision, chosen = decide(
                call=state.calls,
                messages=view,
                candidates=candidates,
                counter=counter,
                config=cfg,
                price=profile.price,
                ttl_seconds=profile.ttl_seconds,
                idle_seconds=idle,
                context_tokens=context,
                context_window=window,
                stub_tokens=_stub_tokens,
                sizes=sizes,
            )
            prune_decision = decision
            edits: list[Edit] = []
            if decision.apply and chosen:
                edits = self._stub_edits(thread, view, chosen, counter, recall=recall)
            remaining = context - (decision.removed_tokens if edits else 0)
            fold_reason = None
            keep_from: str | None = None
            task_fold = (
                self._finished_task_fold(state, rendered, counter, profile.price, sizes, cold=cold)
                if cfg.fold and cfg.fold_finished_tasks
                else None
            )
            cost_fold = (
                fold_estimate(view, counter, cfg, profile.price, state.calls, sizes=sizes)
                if cfg.fold and cfg.fold_by_cost and not edits and task_fold is None
                else None
            )
            if cfg.fold and remaining >= cfg.fold_trigger * window:
                fold_reason = "fold-trigger"
            elif task_fold is not None:
                fold_reason = "finished-task-fold"
                keep_from, estimate, span = task_fold
                decision = estimate.decision(state.calls, fold_reason, context, span)
            elif cost_fold is not None and cost_fold.pays:
                fold_reason = "cost-model-fold"
                decision = cost_fold.decision(state.calls, fold_reason, context, 0)
            if fold_reason is not None:
                folded = self._fold_edits(
                    thread=thread,
                    state=state,
                    canon_messages=canon_messages,
                    keys=keys,
                    pending=edits,
                    system=system,
                    counter=counter,
                    keep_from=keep_from,
                    recall=recall,
                )
                edits += folded
                if not folded and fold_reason != "fold-trigger":
                    # No safe range after all: the record says what was done, not the plan.
                    decision = (
                        prune_decision
                        if prune_decision.apply
                        else prune_decision.model_copy(
                            update={"reason": f"{fold_reason}: no safe range to fold"}
                        )
                    )
                elif edits and not decision.apply:
                    decision = decision.model_copy(update={"apply": True, "reason": fold_reason})
            if edits:
                state.plan.epochs.append(
                    Epoch(index=len(state.plan.epochs), reason=decision.reason, edits=edits)
                )
                settle(state.plan, state.lifecycle, canon_messages, keys)  # state stays small
            if decision.apply or decision.candidates:
                state.decisions.append(decision)
                del state.decisions[:-_MAX_DECISIONS]
            if edits:
                logger.info(
                    "thread %s: maintenance at call %d (%s): %d edits",
                    thread,
                    decision.call,
                    decision.reason,
                    len(edits),
                )
                return True, None
            return False, rendered
        except Exception:
            logger.warning("thread %s: maintenance skipped after an error", thread, exc_info=True)
            return False, None  # the plan may have changed half-way: render it afresh

    def _fingerprint(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """`tool_fingerprint`, memoised for the very tool objects the canonicalizer reuses."""
        memo_key = tuple(id(t) for t in tools)
        hit = self._fingerprints.get(memo_key)
        if hit is not None and all(a is b for a, b in zip(hit[0], tools, strict=True)):
            return hit[1]
        fingerprint = tool_fingerprint(tools)
        self._fingerprints[memo_key] = (tuple(tools), fingerprint)
        if len(self._fingerprints) > 64:
            self._fingerprints.pop(next(iter(self._fingerprints)))
        return fingerprint

    def _tools_tokens(self, tools: Sequence[Mapping[str, Any]], counter: TokenCounter) -> int:
        fingerprint = self._fingerprint(tools)
        known = self._tool_tokens.get(fingerprint)
        if known is None:
            known = sum(counter.count(canonical_json(t)) for t in tools)
            self._tool_tokens[fingerprint] = known
        return known

    def _fold_edits(
        self,
        *,
        thread: str,
        state: PilotState,
        canon_messages: Sequence[Message],
        keys: Sequence[str],
        pending: Sequence[Edit],
        system: str | None,
        counter: TokenCounter,
        emergency: bool = False,
        keep_from: str | None = None,
        recall: bool = True,
    ) -> list[Edit]:
        """A fold of everything before the protected tail (or before the message keyed
        `keep_from`), as seen after `pending` edits."""
        trial = state.plan.model_copy(deep=True)
        if pending:
            trial.epochs.append(
                Epoch(index=len(trial.epochs), reason="pending", edits=list(pending))
            )
        args: dict[str, Any] = {
            "plan": trial,
            "store": self.store,
            "thread": thread,
            "summarizer": self._summarizer,
            "counter": counter,
            "epoch_index": len(state.plan.epochs),
            "system": system,
            "recall": recall,
        }
        if emergency:
            del args["system"]  # the emergency summary request is always standalone
            edit = emergency_fold(canon_messages, keys, **args)
        else:
            edit = plan_fold(
                canon_messages,
                keys,
                protect_tail_tokens=self.config.maintenance.fold_protect_tokens,
                summary_tokens=self.config.maintenance.fold_summary_tokens,
                keep_from=keep_from,
                **args,
            )
        return [edit] if edit is not None else []

    def emergency_fold(
        self,
        system: str | None,
        messages: Sequence[Message],
        thread: str = "default",
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        recall: bool | None = None,
    ) -> bool:
        """Fold hard after a provider context-length error; call `prepare` again afterwards.

        Pass the same system prompt, transcript, tools and `recall` as to `prepare` (without
        recall the summary's header names no recall call). Returns True when a fold was added
        to the plan, False when nothing could be folded (or the fold failed, which is logged):
        the thread's state is untouched then.
        """
        _check_thread(thread)
        _check_request(system, messages, tools)
        state = self.state(thread)
        with self._lock:
            try:
                # A scratch copy: the real frozen values change only with an epoch.
                scratch = state.canonical.model_copy(deep=True)
                system, canon_messages, _ = self._canonical(
                    system, messages, self._with_recall(tools, recall), scratch
                )
                keys = self._trackers.setdefault(thread, KeyTracker()).keys(messages)
                counter = get_counter(self.config.encoding)
                edits = self._fold_edits(
                    thread=thread,
                    state=state,
                    canon_messages=canon_messages,
                    keys=keys,
                    pending=[],
                    system=system,
                    counter=counter,
                    emergency=True,
                    recall=self.config.recall_tool if recall is None else bool(recall),
                )
            except Exception:
                logger.warning("thread %s: emergency fold failed", thread, exc_info=True)
                return False
            if not edits:
                return False
            state.plan.epochs.append(
                Epoch(index=len(state.plan.epochs), reason="context-length-error", edits=edits)
            )
            state.revision += 1
            logger.warning("thread %s: emergency fold after a context-length error", thread)
            return True

    def _finished_task_fold(
        self,
        state: PilotState,
        rendered: PlanView,
        counter: TokenCounter,
        price: Price,
        sizes: Sequence[int],
        *,
        cold: bool = False,
    ) -> tuple[str, FoldEstimate, int] | None:
        """A fold of the leading finished tasks, when the cost model says it pays (or, on a
        cold cache, whenever it removes tokens: the rewrite is free then): (key of the first
        message kept, the estimate, messages folded), else None.

        The run of tasks from the first one that the lifecycle marks evictable is folded; the
        first task not evictable (the current one at the latest) is kept whole. The current
        task is expected to run as long as the finished ones did on average.
        """
        registry = state.lifecycle
        tasks = registry.tasks()
        run = 0
        while run < len(tasks) and tasks[run].state is SegmentState.EVICTABLE:
            run += 1
        if run == 0 or run == len(tasks) or not tasks[run].keys:
            return None
        keep_from = tasks[run].keys[0]
        start = fold_start(rendered.messages, rendered.folds)
        cut = cut_before(rendered, keep_from, start)
        if cut is None:
            return None
        cfg = self.config.maintenance
        estimate = task_fold_estimate(
            sizes,
            start,
            cut,
            config=cfg,
            price=price,
            expected_calls=_expected_task_calls(registry, cfg.horizon),
        )
        pays = estimate.pays or (cold and estimate.removed_tokens > 0)
        return (keep_from, estimate, cut - start) if pays else None

    def _evictable(
        self,
        state: PilotState,
        messages: Sequence[Message],
        keys: Sequence[str],
        cache: _ViewCache,
        *,
        force: bool = False,
    ) -> dict[str, str]:
        """Keys of tool results whose work unit the lifecycle marks evictable, with why.

        The lifecycle reads the transcript as ingested (not the view: stubs hide outputs) and
        is evaluated every `maintenance.every` calls (and whenever `force`).
        """
        registry = state.lifecycle
        every = self.config.maintenance.every
        applied = registry.update(messages, keys, self._estimator, every=every, force=force)
        # States move one step per evaluation (active -> completed -> evictable); a forced
        # evaluation settles them, so a free rewrite takes everything finished by now.
        for _ in range(2):
            if not (force and applied):
                break
            applied = registry.update(messages, keys, self._estimator, every=every, force=True)
        return cache.evictable(registry)

    def _stub_edits(
        self,
        thread: str,
        view: Sequence[Message],
        chosen: Sequence[Candidate],
        counter: TokenCounter,
        *,
        recall: bool = True,
    ) -> list[Edit]:
        """Archive each chosen result as it stands, then stub it (nothing is lost); without
        `recall` the stubs name no recall call."""
        texts: list[str] = []
        refs: list[str] = []
        stubbed: list[Candidate] = []
        arguments: list[Edit] = []
        for cand in chosen:
            message = view[cand.index]
            if cand.kind == "args":
                arguments.extend(self._argument_edits(thread, message, cand, recall=recall))
                continue
            stubbed.append(cand)
            # Parts (images, reasoning) are archived whole, as the message's JSON.
            content = (
                message.content
                if isinstance(message.content, str)
                else json.dumps(message.to_dict(), ensure_ascii=False)
            )
            ref = self.store.put(
                thread,
                content,
                meta={
                    "tool": message.name or "tool",
                    "call_id": message.tool_call_id,
                    "reason": "evicted" if cand.kind == "evict" else "pruned",
                    "source": f"call:{message.tool_call_id}",
                },
            )
            refs.append(ref)
            texts.append(
                stub_text(cand.kind, message, cand.tokens, ref, cand.reason, recall=recall)
            )
        edits = build_edits(stubbed, texts, refs)
        if not arguments:
            return edits
        order = {c.key: c.index for c in chosen}
        return sorted([*edits, *arguments], key=lambda e: order.get(e.key, -1))

    def _argument_edits(
        self, thread: str, message: Message, cand: Candidate, *, recall: bool = True
    ) -> list[Edit]:
        """Archive the arguments of the candidate's calls (each whole, and each long value on
        its own, which is what the preview names), then reduce them. A call whose values
        cannot all be archived keeps its arguments."""
        cfg = self.config.maintenance
        out: list[Edit] = []
        for call in message.tool_calls:
            if call.id not in cand.calls:
                continue
            reduced = argument_plan(call.arguments, cfg, recall=recall)
            if reduced is None:
                continue
            meta = {"tool": call.name, "call_id": call.id, "source": f"call:{call.id}:args"}
            try:
                whole = self.store.put(thread, call.arguments, meta={**meta, "reason": "arguments"})
                stored = [
                    self.store.put(thread, value, meta={**meta, "reason": "argument"})
                    for value, _ in reduced.values
                ]
            except Exception:
                logger.warning(
                    "thread %s: arguments of call %s could not be archived; kept as they are",
                    thread,
                    call.id,
                    exc_info=True,
                )
                continue
            if stored != [ref for _, ref in reduced.values]:
                logger.error("thread %s: argument ref mismatch; call %s kept", thread, call.id)
                continue
            out.append(
                Edit(kind="args", key=cand.key, text=reduced.text, ref=whole, call_id=call.id)
            )
        return out

    async def aprepare(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        maintain: bool = True,
        recall: bool | None = None,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Async twin of `prepare`, run in a worker thread.

        A maintenance point may fold with the configured summarizer, which can call a model:
        running it off the event loop keeps the loop free (summarizers are called through
        their sync `summarize`).
        """
        return await asyncio.to_thread(
            self.prepare, system, messages, tools, thread, now=now, maintain=maintain, recall=recall
        )

    async def amaintain(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        recall: bool | None = None,
    ) -> bool:
        """Async twin of `maintain` (a fold may call a model: run off the event loop)."""
        return await asyncio.to_thread(
            self.maintain, system, messages, tools, thread, now=now, recall=recall
        )

    def _with_recall(
        self, tools: Sequence[Mapping[str, Any]], recall: bool | None = None
    ) -> list[dict[str, Any]]:
        """Shallow copies of `tools`, plus the recall tool when it is offered and not there."""
        out = [dict(t) for t in tools]
        offer = self.config.recall_tool if recall is None else recall
        if offer and RECALL_TOOL_NAME not in {schema_name(t) for t in out}:
            out.append(self._recall_tool)
        return out

    def _pairing_issues(
        self, cache: _ViewCache, view: Sequence[Message], thread: str
    ) -> tuple[list[PairingIssue], list[tuple[int, Message]]]:
        """The pairing issues of `view` to report (once per thread: none after that), and
        the synthetic results its unanswered calls need (`missing_results`)."""
        try:
            issues = cache.pairing_issues(view)  # incremental: the new messages only
        except Exception:  # a check must never cost the turn
            logger.warning("thread %s: pairing check failed", thread, exc_info=True)
            return [], []
        missing = missing_results(view, issues) if issues else []
        if thread in self._warned_pairing:
            return [], missing
        if issues:
            self._warned_pairing.add(thread)
        return issues, missing

    # --- provider cache marks ------------------------------------------------------------

    def cache_breakpoints(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        client: Sequence[int] = (),
        profile: str | None = None,
        hidden_prefix_tokens: int = 0,
    ) -> list[int]:
        """Where to add explicit cache marks (Anthropic `cache_control`) to a prepared request.

        Call it once per model call with the request `prepare` just returned. The marks go on
        the last message, on a bridge to the previous call's end when a wide turn would put
        it out of the provider's lookback window, on the stable anchor (the last message
        before the first one a maintenance point could rewrite, so a later rewrite still
        reads the prefix before it) and on the end of tools + system; see
        `cachepilot.breakpoints`. Deterministic: the anchor is kept in the thread's state.

        Args:
            system, messages, tools: the request as `prepare` returned it.
            thread: the scope.
            client: the caller's own marks (message indices, -1 for tools + system): kept,
                and counted against the provider's limit.
            profile: the provider profile whose rules apply (default: `Config.provider` when
                it is an explicit-breakpoint profile, else `anthropic`).
            hidden_prefix_tokens: tokens the provider puts before the tools that are not in
                the request (they count towards the minimum cacheable length).

        Returns:
            Message indices to mark (-1: the end of tools + system), sorted, none of them in
            `client`.
        """
        _check_thread(thread)
        _check_request(system, messages, tools)
        chosen = get_profile(profile or self.config.provider)
        if chosen.match != "breakpoints":
            chosen = get_profile("anthropic")
        counter = get_counter(self.config.encoding)
        state = self.state(thread)
        with self._lock:
            stable = self._anchors(state, self._views.get(thread), messages, counter)
            rendered = render_request(
                Request(system=system, messages=messages, tools=tools),
                counter,
                hidden_prefix_tokens=hidden_prefix_tokens,
            )
        return plan_breakpoints(rendered, client, None, chosen, stable=stable)

    def _anchors(
        self,
        state: PilotState,
        cache: _ViewCache | None,
        messages: Sequence[Message],
        counter: TokenCounter,
    ) -> list[int]:
        """This call's stable anchors (view indices): the one in force before the call, then
        the one for the calls to come (the same message between maintenance points)."""
        view = cache.view if cache is not None else None
        if (
            cache is None
            or view is None
            or len(view.messages) != len(messages)
            or not all(map(operator.is_, view.messages, messages))
        ):
            return []  # not the view `prepare` returned
        first = cache.first_rewritable(state.plan, counter, self.config.maintenance)
        anchors, out = advance_anchors(state.anchors, state.calls, view.keys, first)
        if anchors is not state.anchors:
            state.anchors = anchors
            state.revision += 1
        return out

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
                state.revision += 1
                memory = state.ingest
                known = artifact.ref in memory.sources
                # The ref opens the gate for this content, and for its source when the memory
                # still knows it; else the source recorded in the artifact's metadata counts.
                memory.note_recall(artifact.ref)
                if not known and isinstance(source, str):
                    memory.note_recall(source)

        try:
            store = self.store
        except Exception:
            logger.error("recall: the artifact store cannot be opened", exc_info=True)
            return (
                f"[recall {str(ref)[:40]}: the archive is unavailable right now "
                "(the artifact store could not be opened); the original cannot be shown]"
            )
        result = recall(
            store,
            thread,
            ref,
            lines=lines,
            grep=grep,
            max_chars=max_chars,
            on_access=on_access,
            # Recalled content is not reduced again, but capped like any tool output.
            max_chars_cap=self.config.reduction.hard_cap,
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
        if not isinstance(usage, Usage):
            raise ValueError(
                f"usage must be a cachepilot Usage (see Usage.from_openai_chat etc.), "
                f"not {type(usage).__name__}"
            )
        state = self.state(thread)
        with self._lock:
            for key, value in usage.to_dict().items():
                state.usage[key] = state.usage.get(key, 0) + value
            state.revision += 1


def _with_missing(
    cache: _ViewCache, rendered: PlanView, missing: Sequence[tuple[int, Message]]
) -> list[Message]:
    """The view with the synthetic results inserted (the view cache is told, so the cache
    anchors of `cache_breakpoints` address the request as sent)."""
    messages, keys = list(rendered.messages), list(rendered.keys)
    for offset, (position, message) in enumerate(missing):
        messages.insert(position + offset, message)
        keys.insert(position + offset, f"missing:{message.tool_call_id}")
    cache.view = PlanView(messages, keys, [(k, k) for k in keys], [None] * len(keys))
    cache.forget_rewritable()  # positions moved
    return messages


def _expected_task_calls(registry: LifecycleRegistry, horizon: float) -> int:
    """Calls the current task is expected to run from now: as long as the finished tasks ran
    on average, and at least `horizon` × the calls it has run so far."""
    total, finished = registry.finished_task_calls()
    current = registry.segments.get(registry.current_task or "")
    elapsed = registry.calls - current.created_at_call if current is not None else 0
    mean = total / finished if finished else 0.0
    return max(round(mean - elapsed), round(elapsed * horizon))


def _stub_tokens(candidate: Candidate) -> int:
    # A stub is about 30 tokens whatever it names (its exact text needs the ref); reduced
    # arguments were counted when the candidate was found.
    return candidate.kept_tokens


def _check_thread(thread: object) -> None:
    check_thread(thread)  # the stores' rule: a non-empty str, encodable as UTF-8


def _check_request(system: object, messages: object, tools: object) -> None:
    """Fail fast on API misuse (wrong types), with a `ValueError` that says what is wrong."""
    if system is not None and not isinstance(system, str):
        raise ValueError(f"system must be a str or None, not {type(system).__name__}")
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a sequence of Message, not {type(messages).__name__}")
    if all(map(isinstance, messages, repeat(Message))):
        messages = ()  # all fine, checked at C speed: skip the loop that names the culprit
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise ValueError(
                f"messages[{index}] is a {type(message).__name__}, not a cachepilot Message "
                "(convert provider dicts with cachepilot.to_messages)"
            )
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ValueError(f"tools must be a sequence of tool schemas, not {type(tools).__name__}")
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ValueError(f"tools[{index}] is a {type(tool).__name__}, not a mapping")


def _clip_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as JSON-ready metadata (total: odd values through `str`, cycles `repr`)."""
    text = canonical_args(args)
    if len(text) <= _ARGS_META_LIMIT:
        try:
            loaded = json.loads(text)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            return loaded
    return {"_truncated": text[:_ARGS_META_LIMIT]}

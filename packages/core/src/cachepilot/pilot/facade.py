"""`CachePilot`: the facade the plugins use (DESIGN §5).

`ingest` runs once per tool result (reduce, archive the original when lossy); `prepare` runs
once per model call (canonicalize, apply the plan, order tools with `recall` present from the
first call, check pairing); `recall` serves the recall tool; `record_usage` keeps totals.
Per-thread state (`PilotState`) is small and JSON-serialisable so the plugins can keep it in
their framework's own persistence (graph state, session store).

The class holds no policy; each step is its own module: `cachepilot.pilot.ingest` (the ingestion
gate), `cachepilot.pilot.prepare` (one model call's request, cache breakpoints),
`cachepilot.pilot.maintain` (maintenance points: the scheduler and the rewrites of an epoch),
`cachepilot.pilot.base` (settings, store, per-thread state and caches), with `Config`
(`cachepilot.config`), `PilotState` (`cachepilot.pilot.state`) and the per-thread view cache
(`cachepilot.maintenance.view_cache`).
"""

from __future__ import annotations

import asyncio
import logging

from cachepilot.artifacts import Artifact
from cachepilot.config import Config
from cachepilot.pilot.base import check_pilot_thread
from cachepilot.pilot.ingest import Ingestion, IngestReport
from cachepilot.pilot.prepare import Preparation
from cachepilot.pilot.state import PilotState
from cachepilot.recall.tool import recall
from cachepilot.usage import Usage

__all__ = ["CachePilot", "Config", "IngestReport", "PilotState"]

logger = logging.getLogger(__name__)


class CachePilot(Ingestion, Preparation):
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

    def recall(
        self,
        ref: str,
        lines: str | None = None,
        grep: str | None = None,
        max_chars: int = 20_000,
        thread: str = "default",
    ) -> str:
        """Serve the recall tool: the archived original (or a slice), as model-facing text."""
        check_pilot_thread(thread)
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

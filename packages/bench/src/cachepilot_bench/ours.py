"""cachepilot itself as a bench strategy, and its ablations.

The strategy drives a real `CachePilot` the way the plugins do: every tool result goes through
`ingest` once, when it first arrives, and every model call through `prepare`.
"""

from __future__ import annotations

from dataclasses import replace

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.compress import (
    CompressorCall,
    CompressorConfig,
    ObservationCompressor,
    StandInCompressor,
)
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.sim import get_profile
from cachepilot_bench.strategy import (
    CallContext,
    ExtraCall,
    PreparedCall,
    SessionContext,
    StatefulStrategy,
)

LOGICAL_STEP_SECONDS = 10.0

__all__ = [
    "CachePilotLLM",
    "CachePilotNoCanonical",
    "CachePilotNoEvict",
    "CachePilotNoReduce",
    "CachePilotNoSchedule",
    "CachePilotStrategy",
]


class CachePilotStrategy(StatefulStrategy):
    """Ingestion-time reduction, canonical prefixes and the recall tool."""

    name = "cachepilot"
    can_recall = True

    def __init__(self, config: Config | None = None) -> None:
        super().__init__()
        self.config = config or Config()
        self.pilot = self._make_pilot()
        self._calls: dict[str, tuple[str, str]] = {}
        self._stats: dict[str, float] = {}
        self._now = -LOGICAL_STEP_SECONDS
        self._explicit_marks = False

    def start(self, session: SessionContext) -> None:
        super().start(session)
        self._explicit_marks = get_profile(session.provider).kind == "anthropic"
        self.pilot = self._make_pilot()
        self._calls = {}
        self._stats = {}
        self._now = -LOGICAL_STEP_SECONDS

    def _make_pilot(self) -> CachePilot:
        """A fresh pilot for a session (subclasses add components)."""
        return CachePilot(self._session_config(), store=InMemoryArtifactStore())

    def _session_config(self) -> Config:
        """The config with the session's provider (its prices and TTL drive the cost model)."""
        if self.session is None or self.session.provider == self.config.provider:
            return self.config
        return self.config.model_copy(update={"provider": self.session.provider})

    def _clock(self, timestamp: float | None) -> float:
        # Calls without a time follow the previous one by 10 s, as in the simulator.
        self._now = timestamp if timestamp is not None else self._now + LOGICAL_STEP_SECONDS
        return self._now

    def stats(self) -> dict[str, float]:
        """Tool-output tokens before/after ingestion, and per pass the tokens it removed.

        A pass's share of one output's saving is its share of the characters removed.
        """
        return dict(self._stats)

    def _count(self, key: str, value: float) -> None:
        self._stats[key] = self._stats.get(key, 0.0) + value

    def prepare(self, call: CallContext) -> PreparedCall:
        thread = self.ctx.session_id
        archived: list[str] = []
        for arrived in call.new_messages:
            for tool_call in arrived.tool_calls:
                self._calls[tool_call.id] = (tool_call.name, tool_call.arguments)
            if arrived.role == "tool" and isinstance(arrived.content, str):
                self.state.append(self._ingest(arrived, thread, archived))
            else:
                self.state.append(arrived)
        return self.view(call, archived)

    def _ingest(self, message: Message, thread: str, archived: list[str]) -> Message:
        name, args = self._calls.get(message.tool_call_id or "", (message.name or "tool", "{}"))
        report = self.pilot.ingest_report(
            name, args, message.content, message.tool_call_id or "", thread
        )
        if report.ref is not None:
            archived.append(message.text)
        counter = self.ctx.counter
        before, after = counter.count(message.text), counter.count(report.text)
        self._count("tool_tokens_in", before)
        self._count("tool_tokens_out", after)
        removed = sum(max(0, saved) for _, saved in report.chars_saved)
        for pass_name, saved in report.chars_saved:
            if saved > 0 and removed > 0:
                self._count(f"tokens_removed.{pass_name}", (before - after) * saved / removed)
        if report.text == message.content:
            return message
        return replace(message, content=report.text)

    def view(self, call: CallContext, archived: list[str] | None = None) -> PreparedCall:
        epochs = len(self.pilot.state(self.ctx.session_id).plan.epochs)
        system, messages, tools = self.pilot.prepare(
            self.system_for(call),
            self.state,
            self.ctx.tools,
            self.ctx.session_id,
            now=self._clock(call.timestamp),
        )
        state = self.pilot.state(self.ctx.session_id)
        maintenance = len(state.plan.epochs) > epochs
        archived = list(archived or ())
        if maintenance:
            # What the new epoch stubbed was archived first: it stays recallable.
            for edit in state.plan.epochs[-1].edits:
                found = self.pilot.store.get(self.ctx.session_id, edit.ref or "")
                if found is not None:
                    archived.append(found.text)
            self._count("maintenance_epochs", 1)
            self._count("maintenance_edits", len(state.plan.epochs[-1].edits))
        marks: list[int] | None = None
        if self._explicit_marks:
            # The agent's own marks stay; cachepilot adds its own in the slots left.
            client = self.ctx.client_breakpoints(len(messages))
            added = self.pilot.cache_breakpoints(
                system,
                messages,
                tools,
                self.ctx.session_id,
                client=client,
                hidden_prefix_tokens=self.ctx.hidden_prefix_tokens,
            )
            marks = sorted({*client, *added})
        return PreparedCall(
            system=system,
            messages=messages,
            tools=tools,
            archived=tuple(archived),
            maintenance=maintenance,
            cache_breakpoints=marks,
        )


class CachePilotNoCanonical(CachePilotStrategy):
    """Ablation: no prefix canonicalization."""

    name = "cachepilot-no-canonical"

    def __init__(self) -> None:
        super().__init__(Config(canonicalize=False))


class CachePilotNoReduce(CachePilotStrategy):
    """Ablation: no ingestion-time reduction."""

    name = "cachepilot-no-reduce"

    def __init__(self) -> None:
        super().__init__(Config(reduce=False))


class CachePilotNoEvict(CachePilotStrategy):
    """Ablation: maintenance prunes and folds by cost but never evicts lifecycle-finished
    work (no eviction stubs, no finished-task folds)."""

    name = "cachepilot-no-evict"

    def __init__(self) -> None:
        super().__init__(
            Config(maintenance=MaintenanceConfig(evict=False, fold_finished_tasks=False))
        )


class CachePilotNoSchedule(CachePilotStrategy):
    """Ablation: maintenance on a fixed every-B-calls schedule instead of the cost model."""

    name = "cachepilot-no-schedule"

    def __init__(self) -> None:
        super().__init__(Config(maintenance=MaintenanceConfig(schedule="fixed")))


class CachePilotLLM(CachePilotStrategy):
    """cachepilot with the observation compressor on (`compress.ObservationCompressor`).

    The compressor model is `StandInCompressor` (deterministic, offline); every compression
    prompt and answer is billed as an `ExtraCall` (purpose `compress`) before the call that
    follows the ingestion, through the same simulated provider, so the cost of compression
    is part of the comparison.
    """

    name = "cachepilot-llm"

    def __init__(
        self, config: Config | None = None, compressor_config: CompressorConfig | None = None
    ) -> None:
        self.compressor_config = compressor_config or CompressorConfig()
        self._pending: list[CompressorCall] = []
        super().__init__(config)

    def _make_pilot(self) -> CachePilot:
        self._pending = []
        counter = self.session.counter if self.session is not None else None
        compressor = ObservationCompressor(
            StandInCompressor(counter=counter),
            config=self.compressor_config,
            on_call=self._pending.append,
        )
        return CachePilot(
            self._session_config(), store=InMemoryArtifactStore(), compressor=compressor
        )

    def prepare(self, call: CallContext) -> PreparedCall:
        prepared = super().prepare(call)
        if not self._pending:
            return prepared
        counter = self.ctx.counter
        extra = [
            ExtraCall(
                system=c.system,
                messages=(Message(role="user", content=c.prompt),),
                output_tokens=max(1, counter.count(c.answer)),
                purpose="compress",
            )
            for c in self._pending
        ]
        self._count("compressor_calls", len(extra))
        self._count("compressor_output_tokens", sum(e.output_tokens for e in extra))
        self._pending.clear()
        return replace(prepared, extra_calls=(*prepared.extra_calls, *extra))

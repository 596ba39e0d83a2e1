"""Per-call and per-thread cache metrics, and where they go: memory, logs, OpenTelemetry,
LangSmith run metadata (Agents SDK trace spans: `cachepilot_agents.tracing`).

```python
from cachepilot.diagnose.metrics import Metrics, OTelSink, call_metrics, langsmith_metadata

metrics = Metrics([OTelSink()])                      # needs the `otel` extra
record = call_metrics(usage, thread="t1", call=7, provider="openai-gpt-5.4-mini",
                      bytes_reduced=report_chars_saved, recalls=1,
                      epoch=2, epoch_reason="cost-model")
metrics.record(record)                               # counters, histograms and one span
langsmith_metadata(record, metrics.thread("t1"))     # flat dict for run metadata
```

Nothing here imports OpenTelemetry at module import: `OTelSink` imports it when used (install
`cachepilot[otel]`). No agent framework is imported at all.
Metric attributes never carry payload text, only counts, names and reasons. Thread ids go on
spans, not on metric attributes (they would make every metric series unbounded).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from cachepilot.sim import ProviderProfile, get_profile
from cachepilot.usage import Usage

__all__ = [
    "CallMetrics",
    "InMemorySink",
    "LoggingSink",
    "Metrics",
    "MetricsSink",
    "OTelSink",
    "ThreadMetrics",
    "call_metrics",
    "langsmith_metadata",
    "thread_metrics",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CallMetrics:
    """What one model call cost and what cachepilot did for it.

    Attributes:
        thread: the thread (conversation) id.
        call: ordinal of the call in its thread.
        prompt_tokens: every prompt token (cache reads and writes included).
        cached_tokens: prompt tokens read from the provider cache.
        cache_write_tokens: prompt tokens written to the cache (billed by some providers).
        output_tokens: completion tokens.
        cost_usd: the call's cost under the provider profile.
        input_cost_usd: the prompt part of it.
        bytes_reduced: tool-output characters removed at ingestion since the previous call.
        recalls: recalls served since the previous call.
        epoch: index of the maintenance epoch appended at this call, if any.
        epoch_reason: why it was appended (`cost-model`, `fold-trigger`, `cold-cache`…).
        model: model name, when known.
        provider: provider profile the cost comes from.
        archive_failures: tool results since the previous call whose original could not be
            archived (an unreachable artifact store: their middle was cut, not kept).
    """

    thread: str
    call: int
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    input_cost_usd: float = 0.0
    bytes_reduced: int = 0
    recalls: int = 0
    epoch: int | None = None
    epoch_reason: str | None = None
    model: str | None = None
    provider: str | None = None
    archive_failures: int = 0

    def __post_init__(self) -> None:
        for name in (
            "prompt_tokens",
            "cached_tokens",
            "cache_write_tokens",
            "output_tokens",
            "archive_failures",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"CallMetrics.{name} must be >= 0")
        if self.call < 0:
            raise ValueError("CallMetrics.call must be >= 0")

    @property
    def hit_rate(self) -> float:
        """Cached share of the prompt."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (hit rate included)."""
        out = asdict(self)
        out["hit_rate"] = self.hit_rate
        return out

    def attributes(self, *, with_thread: bool = True) -> dict[str, str | int | float]:
        """Flat `cachepilot.*` attributes (None values left out), for spans and metadata."""
        out: dict[str, str | int | float] = {}
        for key, value in self.to_dict().items():
            if value is None or (key == "thread" and not with_thread):
                continue
            out[f"cachepilot.{key}"] = value
        return out


@dataclass(slots=True)
class ThreadMetrics:
    """Totals of one thread."""

    thread: str
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    input_cost_usd: float = 0.0
    bytes_reduced: int = 0
    recalls: int = 0
    epochs: list[tuple[int, str]] = field(default_factory=list)
    """(epoch index, reason) of every maintenance epoch."""
    archive_failures: int = 0
    """Tool results whose original could not be archived (an artifact-store outage)."""

    @property
    def hit_rate(self) -> float:
        """Cached share of all prompt tokens."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def add(self, call: CallMetrics) -> None:
        """Fold one call into the totals."""
        self.calls += 1
        self.prompt_tokens += call.prompt_tokens
        self.cached_tokens += call.cached_tokens
        self.cache_write_tokens += call.cache_write_tokens
        self.output_tokens += call.output_tokens
        self.cost_usd += call.cost_usd
        self.input_cost_usd += call.input_cost_usd
        self.bytes_reduced += call.bytes_reduced
        self.recalls += call.recalls
        self.archive_failures += call.archive_failures
        if call.epoch is not None:
            self.epochs.append((call.epoch, call.epoch_reason or ""))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = asdict(self)
        out["epochs"] = [{"index": i, "reason": r} for i, r in self.epochs]
        out["hit_rate"] = self.hit_rate
        return out


def _profile(provider: ProviderProfile | str | None) -> ProviderProfile | None:
    if provider is None:
        return None
    return get_profile(provider) if isinstance(provider, str) else provider


def call_metrics(
    usage: Usage,
    *,
    thread: str,
    call: int,
    provider: ProviderProfile | str | None = None,
    bytes_reduced: int = 0,
    recalls: int = 0,
    epoch: int | None = None,
    epoch_reason: str | None = None,
    model: str | None = None,
    archive_failures: int = 0,
) -> CallMetrics:
    """A `CallMetrics` from normalized usage, priced with the provider profile (if given).

    Raises:
        ValueError: on an unknown profile or negative counts.
    """
    profile = _profile(provider)
    cost = profile.cost(usage) if profile is not None else None
    if bytes_reduced < 0 or recalls < 0:
        raise ValueError("bytes_reduced and recalls must be >= 0")
    return CallMetrics(
        thread=thread,
        call=call,
        prompt_tokens=usage.input_tokens,
        cached_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=cost.total_usd if cost else 0.0,
        input_cost_usd=cost.input_usd if cost else 0.0,
        bytes_reduced=bytes_reduced,
        recalls=recalls,
        epoch=epoch,
        epoch_reason=epoch_reason,
        model=model,
        provider=profile.name if profile else None,
        archive_failures=archive_failures,
    )


def thread_metrics(
    state: Any, thread: str, *, provider: ProviderProfile | str | None = None
) -> ThreadMetrics:
    """Thread totals from a `PilotState` (model or its JSON dict): usage, recalls, epochs,
    archive failures.

    `bytes_reduced` is not kept in the state (it is per call): 0 here.
    """
    data: Mapping[str, Any] = (
        state.model_dump(mode="json") if hasattr(state, "model_dump") else state
    )
    usage = Usage.from_dict(data.get("usage") or {})
    profile = _profile(provider)
    cost = profile.cost(usage) if profile else None
    epochs = [
        (int(e.get("index", n)), str(e.get("reason", "")))
        for n, e in enumerate((data.get("plan") or {}).get("epochs") or ())
        if isinstance(e, Mapping)
    ]
    return ThreadMetrics(
        thread=thread,
        calls=int(data.get("calls") or 0),
        prompt_tokens=usage.input_tokens,
        cached_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=cost.total_usd if cost else 0.0,
        input_cost_usd=cost.input_usd if cost else 0.0,
        recalls=int(data.get("recalls") or 0),
        epochs=epochs,
        archive_failures=int(data.get("archive_failures") or 0),
    )


# --------------------------------------------------------------------------------------------
# Sinks


@runtime_checkable
class MetricsSink(Protocol):
    """Receives every call's metrics."""

    def record_call(self, call: CallMetrics, thread: ThreadMetrics) -> None:
        """One call, with its thread's totals after it."""
        ...


class InMemorySink:
    """Keeps every call (tests, notebooks)."""

    def __init__(self) -> None:
        self.calls: list[CallMetrics] = []

    def record_call(self, call: CallMetrics, thread: ThreadMetrics) -> None:
        """Append the call."""
        self.calls.append(call)


class LoggingSink:
    """One INFO line per call: counts, hit rate, cost, maintenance (no payload)."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logger

    def record_call(self, call: CallMetrics, thread: ThreadMetrics) -> None:
        """Log the call."""
        epoch = f" epoch {call.epoch} ({call.epoch_reason})" if call.epoch is not None else ""
        if call.archive_failures:
            epoch += f"; {call.archive_failures} outputs could not be archived"
        self.log.info(
            "thread %s call %d: prompt %d cached %d (%.1f%%) written %d output %d $%.5f; "
            "thread hit rate %.1f%%%s",
            call.thread,
            call.call,
            call.prompt_tokens,
            call.cached_tokens,
            100 * call.hit_rate,
            call.cache_write_tokens,
            call.output_tokens,
            call.cost_usd,
            100 * thread.hit_rate,
            epoch,
        )


class OTelSink:
    """OpenTelemetry: counters and a hit-rate histogram per call, and one span per call.

    Instruments (meter `cachepilot`): `cachepilot.tokens` (attribute `kind`: prompt, cached,
    written, output), `cachepilot.cost` (USD), `cachepilot.bytes_reduced`,
    `cachepilot.recalls`, `cachepilot.maintenance_epochs` (attribute `reason`),
    `cachepilot.archive_failures`, histogram `cachepilot.hit_rate`. Span
    `cachepilot.model_call` carries every `CallMetrics` field.

    Args:
        meter_provider: an OpenTelemetry `MeterProvider` (default: the global one).
        tracer_provider: a `TracerProvider` (default: the global one).
        spans: emit a span per call.

    Raises:
        ImportError: when `opentelemetry-api` is not installed (`pip install cachepilot[otel]`).
    """

    def __init__(
        self, *, meter_provider: Any = None, tracer_provider: Any = None, spans: bool = True
    ) -> None:
        try:
            from opentelemetry import metrics as otel_metrics
            from opentelemetry import trace as otel_trace
        except ImportError as exc:
            raise ImportError(
                "OTelSink needs OpenTelemetry: pip install 'cachepilot[otel]'"
            ) from exc
        meter = otel_metrics.get_meter("cachepilot", meter_provider=meter_provider)
        self._tracer = (
            otel_trace.get_tracer("cachepilot", tracer_provider=tracer_provider) if spans else None
        )
        self._tokens = meter.create_counter("cachepilot.tokens", unit="{token}")
        self._cost = meter.create_counter("cachepilot.cost", unit="USD")
        self._bytes = meter.create_counter("cachepilot.bytes_reduced", unit="By")
        self._recalls = meter.create_counter("cachepilot.recalls", unit="{recall}")
        self._epochs = meter.create_counter("cachepilot.maintenance_epochs", unit="{epoch}")
        self._archive = meter.create_counter("cachepilot.archive_failures", unit="{output}")
        self._hit = meter.create_histogram("cachepilot.hit_rate", unit="1")

    def record_call(self, call: CallMetrics, thread: ThreadMetrics) -> None:
        """Update the instruments and emit the span."""
        base: dict[str, str] = {}
        if call.model:
            base["model"] = call.model
        if call.provider:
            base["provider"] = call.provider
        for kind, value in (
            ("prompt", call.prompt_tokens),
            ("cached", call.cached_tokens),
            ("written", call.cache_write_tokens),
            ("output", call.output_tokens),
        ):
            self._tokens.add(value, {**base, "kind": kind})
        self._cost.add(call.cost_usd, base)
        self._bytes.add(call.bytes_reduced, base)
        self._recalls.add(call.recalls, base)
        if call.archive_failures:
            self._archive.add(call.archive_failures, base)
        if call.epoch is not None:
            self._epochs.add(1, {**base, "reason": call.epoch_reason or ""})
        if call.prompt_tokens:
            self._hit.record(call.hit_rate, base)
        if self._tracer is not None:
            attributes = call.attributes()
            attributes["cachepilot.thread_hit_rate"] = thread.hit_rate
            with self._tracer.start_as_current_span("cachepilot.model_call", attributes=attributes):
                pass


class Metrics:
    """Per-thread aggregation plus fan-out to sinks (thread-safe).

    A sink that raises is logged and skipped: metrics never break the agent.
    """

    def __init__(self, sinks: Iterable[MetricsSink] = ()) -> None:
        self.sinks: list[MetricsSink] = list(sinks)
        self._threads: dict[str, ThreadMetrics] = {}
        self._lock = threading.Lock()

    def record(self, call: CallMetrics) -> ThreadMetrics:
        """Record one call; returns its thread's totals."""
        with self._lock:
            totals = self._threads.setdefault(call.thread, ThreadMetrics(call.thread))
            totals.add(call)
            snapshot = ThreadMetrics(**{**asdict(totals), "epochs": list(totals.epochs)})
        for sink in self.sinks:
            try:
                sink.record_call(call, snapshot)
            except Exception:
                logger.warning("metrics sink %r failed; skipped", sink, exc_info=True)
        return snapshot

    def thread(self, thread: str) -> ThreadMetrics:
        """Totals of one thread (empty when it has no call yet)."""
        with self._lock:
            found = self._threads.get(thread)
            if found is None:
                return ThreadMetrics(thread)
            return ThreadMetrics(**{**asdict(found), "epochs": list(found.epochs)})

    def threads(self) -> Sequence[str]:
        """Ids of the threads seen."""
        with self._lock:
            return list(self._threads)


# --------------------------------------------------------------------------------------------
# Framework helpers


def langsmith_metadata(
    call: CallMetrics | None = None, thread: ThreadMetrics | None = None
) -> dict[str, Any]:
    """Flat run metadata for LangSmith: `cachepilot_<field>` for the call and
    `cachepilot_thread_<field>` for the thread totals (numbers and short strings only).

    LangGraph: merge it into the model run's metadata, e.g. from a middleware
    (`langsmith.get_current_run_tree().metadata.update(...)`) or through
    `RunnableConfig(metadata=...)` on the next step.
    """
    out: dict[str, Any] = {}
    if call is not None:
        for key, value in call.to_dict().items():
            if value is not None:
                out[f"cachepilot_{key}"] = value
    if thread is not None:
        doc = thread.to_dict()
        epochs = doc.pop("epochs")
        for key, value in doc.items():
            if key != "thread":
                out[f"cachepilot_thread_{key}"] = value
        out.setdefault("cachepilot_thread", thread.thread)
        out["cachepilot_thread_epochs"] = len(epochs)
        if epochs:
            out["cachepilot_thread_last_epoch_reason"] = epochs[-1]["reason"]
    return out

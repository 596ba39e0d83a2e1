"""Metrics: records, thread totals, the OpenTelemetry sink (real SDK, in-memory readers),
LangSmith metadata and Agents SDK custom spans (real SDK tracing processor)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cachepilot import CachePilot
from cachepilot.diagnose.metrics import (
    CallMetrics,
    InMemorySink,
    LoggingSink,
    Metrics,
    OTelSink,
    call_metrics,
    langsmith_metadata,
    thread_metrics,
)
from cachepilot.usage import Usage
from cachepilot_agents.tracing import agents_custom_span


def sample(call: int, epoch: int | None = None) -> CallMetrics:
    usage = Usage(input_tokens=10_000, cached_tokens=8_000, output_tokens=200)
    return call_metrics(
        usage,
        thread="t1",
        call=call,
        provider="openai-gpt-5.4-mini",
        bytes_reduced=1_234,
        recalls=1 if call == 1 else 0,
        epoch=epoch,
        epoch_reason="cost-model" if epoch is not None else None,
        model="gpt-5.4-mini",
    )


def test_call_metrics_priced_and_validated() -> None:
    m = sample(0)
    assert m.hit_rate == 0.8
    # 8,000 hits at $0.075/M + 2,000 misses at $0.75/M + 200 output at $4.50/M
    assert m.input_cost_usd == pytest.approx((8_000 * 0.075 + 2_000 * 0.75) / 1e6)
    assert m.cost_usd == pytest.approx(m.input_cost_usd + 200 * 4.5 / 1e6)
    assert m.attributes()["cachepilot.thread"] == "t1"
    assert "cachepilot.epoch" not in m.attributes()
    with pytest.raises(ValueError):
        CallMetrics(thread="t", call=0, prompt_tokens=-1, cached_tokens=0)
    with pytest.raises(ValueError):
        call_metrics(Usage(), thread="t", call=0, provider="nope")


def test_metrics_aggregate_and_survive_a_failing_sink(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def record_call(self, call: CallMetrics, thread: Any) -> None:
            raise RuntimeError("down")

    memory = InMemorySink()
    metrics = Metrics([Broken(), memory, LoggingSink()])
    with caplog.at_level(logging.INFO, logger="cachepilot.diagnose.metrics"):
        for n in range(3):
            metrics.record(sample(n, epoch=0 if n == 2 else None))
    totals = metrics.thread("t1")
    assert totals.calls == 3 and totals.prompt_tokens == 30_000 and totals.recalls == 1
    assert totals.bytes_reduced == 3 * 1_234 and totals.epochs == [(0, "cost-model")]
    assert len(memory.calls) == 3 and metrics.threads() == ["t1"]
    assert "sink" in caplog.text and "thread t1 call 2" in caplog.text
    assert metrics.thread("other").calls == 0


def test_otel_sink_counters_histogram_and_spans() -> None:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = OTelSink(
        meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider
    )
    metrics = Metrics([sink])
    metrics.record(sample(0))
    metrics.record(sample(1, epoch=0))
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points[metric.name] = list(metric.data.data_points)
    tokens = {p.attributes["kind"]: p.value for p in points["cachepilot.tokens"]}
    assert tokens == {"prompt": 20_000, "cached": 16_000, "written": 0, "output": 400}
    assert points["cachepilot.maintenance_epochs"][0].attributes["reason"] == "cost-model"
    assert points["cachepilot.hit_rate"][0].count == 2
    assert "thread" not in points["cachepilot.tokens"][0].attributes  # bounded cardinality
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["cachepilot.model_call"] * 2
    assert spans[1].attributes["cachepilot.epoch"] == 0
    assert spans[1].attributes["cachepilot.thread_hit_rate"] == pytest.approx(0.8)


def test_langsmith_metadata_is_flat() -> None:
    metrics = Metrics()
    metrics.record(sample(0, epoch=0))
    meta = langsmith_metadata(sample(1), metrics.thread("t1"))
    assert meta["cachepilot_hit_rate"] == 0.8 and meta["cachepilot_thread_calls"] == 1
    assert meta["cachepilot_thread_epochs"] == 1
    assert meta["cachepilot_thread_last_epoch_reason"] == "cost-model"
    assert all(isinstance(v, str | int | float) for v in meta.values())


def test_thread_metrics_from_pilot_state() -> None:
    pilot = CachePilot()
    pilot.record_usage(Usage(input_tokens=5_000, cached_tokens=4_000, output_tokens=10), "t9")
    totals = thread_metrics(pilot.state("t9"), "t9", provider="openai-gpt-5.4-mini")
    assert totals.cached_tokens == 4_000 and totals.cost_usd > 0
    again = thread_metrics(pilot.export_state("t9"), "t9")
    assert again.prompt_tokens == 5_000 and again.cost_usd == 0.0


def test_agents_custom_span_in_a_real_trace() -> None:
    from agents.tracing import (
        TracingProcessor,
        get_trace_provider,
        set_trace_provider,
        trace,
    )
    from agents.tracing.provider import DefaultTraceProvider

    seen: list[Any] = []

    class Collect(TracingProcessor):
        def on_trace_start(self, t: Any) -> None: ...
        def on_trace_end(self, t: Any) -> None: ...
        def on_span_start(self, span: Any) -> None: ...
        def on_span_end(self, span: Any) -> None:
            seen.append(span.span_data.export())

        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    # A provider of our own: other tests disable tracing globally; no exporter goes online.
    previous = get_trace_provider()
    provider = DefaultTraceProvider()
    provider.register_processor(Collect())
    set_trace_provider(provider)
    try:
        metrics = Metrics()
        record = sample(3, epoch=1)
        with trace("cachepilot-test"), agents_custom_span(record, metrics.record(record)) as span:
            assert span is not None
    finally:
        set_trace_provider(previous)
    exported = [s for s in seen if s.get("name") == "cachepilot"]
    assert exported and exported[0]["data"]["cached_tokens"] == 8_000
    assert exported[0]["data"]["thread_totals"]["epochs"] == [{"index": 1, "reason": "cost-model"}]

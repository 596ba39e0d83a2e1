"""An unreachable archive is visible in the metrics and bounded at the size gate."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.diagnose.metrics import LoggingSink, Metrics, OTelSink, call_metrics, thread_metrics
from cachepilot.usage import Usage


class DownStore(InMemoryArtifactStore):
    def put(self, *args: Any, **kwargs: Any) -> str:
        raise ConnectionError("server closed the connection unexpectedly")


def test_outage_counts_in_thread_metrics_and_caps_a_huge_output() -> None:
    pilot = CachePilot(Config(), store=DownStore())
    huge = "".join(f"line {i} of a very long build log\n" for i in range(1_500_000))  # ~48 MB
    text = pilot.ingest("bash", {"command": "make"}, huge, "c1", "t")
    assert len(text) < 5_000
    assert "the archive is unavailable" in text
    totals = thread_metrics(pilot.state("t"), "t")
    assert totals.archive_failures == 1
    assert thread_metrics(pilot.export_state("t"), "t").archive_failures == 1


def test_otel_and_logging_sinks_report_archive_failures(caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    metrics = Metrics(
        [
            OTelSink(meter_provider=MeterProvider(metric_readers=[reader]), spans=False),
            LoggingSink(),
        ]
    )
    usage = Usage(input_tokens=2_000, cached_tokens=1_000, output_tokens=10)
    with caplog.at_level(logging.INFO, logger="cachepilot.diagnose.metrics"):
        metrics.record(call_metrics(usage, thread="t", call=1, archive_failures=3))
        totals = metrics.record(call_metrics(usage, thread="t", call=2))
    assert totals.archive_failures == 3
    points = {
        metric.name: list(metric.data.data_points)
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    assert sum(p.value for p in points["cachepilot.archive_failures"]) == 3
    assert "3 outputs could not be archived" in caplog.records[0].getMessage()
    with pytest.raises(ValueError):
        call_metrics(usage, thread="t", call=3, archive_failures=-1)

"""`cachepilot.metrics`: the documented path of `cachepilot.diagnose.metrics`, re-exported.

The module lives in `cachepilot.diagnose.metrics`; this path stays because the docs name it.
"""

from __future__ import annotations

from cachepilot.diagnose.metrics import (
    CallMetrics,
    InMemorySink,
    LoggingSink,
    Metrics,
    MetricsSink,
    OTelSink,
    ThreadMetrics,
    call_metrics,
    langsmith_metadata,
    thread_metrics,
)

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

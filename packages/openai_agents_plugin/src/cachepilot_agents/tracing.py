"""Cache metrics in OpenAI Agents SDK traces: a custom span per model call.

```python
from cachepilot.diagnose.metrics import call_metrics
from cachepilot_agents.tracing import agents_custom_span

with agents_custom_span(record, thread_totals):  # inside a run: attached to its trace
    ...
```

The span carries counts, names and reasons only (`CallMetrics.to_dict`), never payload text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from agents.tracing import custom_span

from cachepilot.diagnose.metrics import CallMetrics, ThreadMetrics

__all__ = ["agents_custom_span"]


@contextlib.contextmanager
def agents_custom_span(
    call: CallMetrics, thread: ThreadMetrics | None = None, *, name: str = "cachepilot"
) -> Iterator[Any]:
    """A custom span in the OpenAI Agents SDK trace carrying the call's metrics.

    Yields the SDK span. Use inside a run (the SDK attaches it to the current trace).
    """
    data: dict[str, Any] = call.to_dict()
    if thread is not None:
        data["thread_totals"] = thread.to_dict()
    with custom_span(name, data=data) as span:
        yield span

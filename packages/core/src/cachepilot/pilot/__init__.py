"""The facade and its steps: `CachePilot` (`facade`), ingestion (`ingest`), the request of
a model call (`prepare`), maintenance points that grow the plan by epochs (`maintain`), cache
breakpoints (`breakpoints`), a thread's state (`state`), events for the host (`events`) and the
shared settings and caches (`base`).

Part `pilot` of the core (docs/architecture.md). May import: `artifacts`, `canonical`,
`compress`, `config`, `fold`, `lifecycle`, `maintenance`, `memory`, `messages`, `plan`,
`pricing`, `recall`, `reduce`, `refs`, `sim`, `support`, `tokens`, `usage`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

__all__: list[str] = []

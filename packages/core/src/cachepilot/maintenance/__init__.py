"""Maintenance policy: which history edits to make and whether now is the time (the cost
model, `policy`), what folds and stubs made irrelevant for good (`settle`), and one thread's
memory of its last view (`view_cache`). The pilot's `maintain` step drives it.

Part `maintenance` of the core (docs/architecture.md). May import: `fold`, `lifecycle`,
`messages`, `plan`, `pricing`, `reduce`, `support`, `tokens`; tests/layout/test_parts.py checks
it.
"""

from __future__ import annotations

__all__: list[str] = []

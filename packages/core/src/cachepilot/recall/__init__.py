"""The recall tool, framework-neutral: an archived original or a slice of it (`tool`),
the model's arguments parsed and clamped (`args`), line ranges and bounded grep (`slicing`,
`grep`), and how a result is shown to the model (`result`).

Part `recall` of the core (docs/architecture.md). May import: `artifacts`, `reduce`, `refs`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

__all__: list[str] = []

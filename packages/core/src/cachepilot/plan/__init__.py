"""The plan of history edits: ordered epochs of edits (stubs, folds, reduced arguments),
applied deterministically to a transcript. The data the rewriting parts share.

Part `plan` of the core (docs/architecture.md). May import: `messages`, `reduce`, `refs`,
`support`; tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

__all__: list[str] = []

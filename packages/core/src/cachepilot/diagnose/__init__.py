"""Read-only diagnostics: why a cache missed between two requests (`breaks`, `difference`),
per-call and per-thread metrics and where they go (`metrics`), and `cachepilot inspect`
(`inspect`). Recorded runs are audited by `cachepilot.audit`, on top of this part.

Part `diagnose` of the core (docs/architecture.md). May import: `artifacts`, `canonical`,
`messages`, `pilot`, `plan`, `sim`, `state`, `support`, `tokens`, `usage`, `wire`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.diagnose.breaks import CAUSES, PREFIX_BREAK_CAUSES, CauseKind, Explanation, explain

__all__ = [
    "CAUSES",
    "PREFIX_BREAK_CAUSES",
    "CauseKind",
    "Explanation",
    "explain",
]

"""Small utilities every part may use: an identity-keyed memo, log labels of threads,
credential redaction and logging set-up, per-user paths.

Part `support` of the core (docs/architecture.md). May import: no other part;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

__all__: list[str] = []

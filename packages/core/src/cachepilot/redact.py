"""`cachepilot.redact`: the documented path of `cachepilot.support.redact`, re-exported.

The module lives in `cachepilot.support.redact`; this path stays because the docs name it.
"""

from __future__ import annotations

from cachepilot.support.redact import (
    MARKER_PREFIX,
    RedactingFilter,
    contains_secret,
    install_logging,
    marker,
    redact,
    redact_slice,
)

__all__ = [
    "MARKER_PREFIX",
    "RedactingFilter",
    "contains_secret",
    "install_logging",
    "marker",
    "redact",
    "redact_slice",
]

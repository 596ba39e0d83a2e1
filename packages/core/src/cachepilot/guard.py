"""`cachepilot.guard`: the documented path of `cachepilot.audit.guard`, re-exported.

The module lives in `cachepilot.audit.guard`; this path stays because the docs name it.
"""

from __future__ import annotations

from cachepilot.audit.guard import (
    CacheAuditError,
    CassetteAudit,
    CassetteRecorder,
    assert_cache_stable,
    audit_cassettes,
)

__all__ = [
    "CacheAuditError",
    "CassetteAudit",
    "CassetteRecorder",
    "assert_cache_stable",
    "audit_cassettes",
]

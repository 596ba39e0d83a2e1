"""Expected differences: host tests that assert exactly what cachepilot changes by design.

Each entry is a host test (node id, `*` and `?` wildcards allowed) that checks the exact tool
list or the exact request a model receives, with a one-line reason. Nothing else belongs here:
a test that fails for any other reason is a regression to fix.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import NamedTuple

__all__ = ["ALLOWED", "Allowed", "reason"]


class Allowed(NamedTuple):
    """One expected difference."""

    framework: str
    nodeid: str
    why: str
    positions: tuple[str, ...] = ("first", "last")


ALLOWED: tuple[Allowed, ...] = ()


def reason(framework: str, nodeid: str, position: str) -> str | None:
    """Why this test may fail injected, or None when it must not."""
    for entry in ALLOWED:
        if (
            entry.framework == framework
            and position in entry.positions
            and fnmatchcase(nodeid, entry.nodeid)
        ):
            return entry.why
    return None

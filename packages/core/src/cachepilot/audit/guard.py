"""Guard an agent's prompt-cache behaviour from any test runner (or none).

`assert_cache_stable(report_or_path, ...)` fails with `CacheAuditError` (an `AssertionError`)
when recorded requests broke their cached prefix more often than a budget allows. A
`CassetteRecorder` remembers the vcrpy cassettes loaded while it is active, so a test can
audit what it used (`CassetteAudit`). Nothing here imports pytest; the pytest plugin built
on it is `cachepilot.testing` (opt in with `-p cachepilot.testing`).

```python
from cachepilot.audit.guard import assert_cache_stable

assert_cache_stable("tests/cassettes/agent.yaml", max_breaks=0, allow=["history_rewrite"])
```
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachepilot.diagnose.breaks import CAUSES, PREFIX_BREAK_CAUSES

__all__ = [
    "CacheAuditError",
    "CassetteAudit",
    "CassetteRecorder",
    "assert_cache_stable",
    "audit_cassettes",
]


class CacheAuditError(AssertionError):
    """The audited requests broke their cached prefix beyond the budget."""


def _check_budget(
    max_breaks: int, allow: Sequence[str], min_hit_rate: float | None
) -> tuple[int, frozenset[str], float | None]:
    if not isinstance(max_breaks, int) or max_breaks < 0:
        raise ValueError(f"max_breaks must be an int >= 0, not {max_breaks!r}")
    unknown = sorted(set(allow) - set(CAUSES))
    if unknown:
        raise ValueError(f"unknown cause(s) in allow: {unknown}; known: {list(CAUSES)}")
    if min_hit_rate is not None and not 0.0 <= min_hit_rate <= 1.0:
        raise ValueError(f"min_hit_rate must be in [0, 1], not {min_hit_rate!r}")
    return max_breaks, frozenset(allow), min_hit_rate


def assert_cache_stable(
    report: Any,
    *,
    max_breaks: int = 0,
    allow: Sequence[str] = (),
    min_hit_rate: float | None = None,
    provider: str | None = None,
) -> Any:
    """Fail when an audit shows more prefix breaks than allowed (or a low hit rate).

    Args:
        report: a `cachepilot.audit.AuditReport`, or a cassette / request-log path.
        max_breaks: prefix breaks allowed (causes in `allow` are not counted).
        allow: cause classes to ignore (e.g. `history_rewrite`).
        min_hit_rate: simulated hit rate the requests must reach, when set.
        provider: profile to audit a path with (default: by API).

    Returns:
        The audit report.

    Raises:
        CacheAuditError: when the budget is exceeded (the message lists every break).
        ValueError: on a bad budget or an unreadable file.
    """
    from cachepilot.audit import AuditReport, audit_file, format_report

    max_breaks, allowed, min_hit_rate = _check_budget(max_breaks, allow, min_hit_rate)
    if not isinstance(report, AuditReport):
        report = audit_file(os.fspath(report), provider=provider)
    counted = [
        c
        for c in report.breaks
        if c.explanation is not None
        and c.explanation.cause in PREFIX_BREAK_CAUSES
        and c.explanation.cause not in allowed
    ]
    problems: list[str] = []
    if len(counted) > max_breaks:
        problems.append(f"{len(counted)} prefix break(s), budget {max_breaks}")
    hit_rate = report.totals["hit_rate"]
    if min_hit_rate is not None and hit_rate < min_hit_rate:
        problems.append(f"hit rate {hit_rate:.1%} below {min_hit_rate:.1%}")
    if problems:
        detail = format_report(report, calls=False)
        raise CacheAuditError("cache audit failed: " + "; ".join(problems) + "\n" + detail)
    return report


# --------------------------------------------------------------------------------------------
# Capturing the cassettes a test uses


def _interactions(cassette: Any) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """A vcrpy cassette's (request, response) pairs as plain dicts."""
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = []
    for request, response in list(getattr(cassette, "data", ())):
        plain: dict[str, Any] = {
            "method": getattr(request, "method", "POST"),
            "uri": getattr(request, "uri", ""),
            "body": getattr(request, "body", None),
            "headers": dict(getattr(request, "headers", {}) or {}),
        }
        pairs.append((plain, response if isinstance(response, Mapping) else None))
    return pairs


@dataclass(slots=True)
class CassetteRecorder:
    """Remembers every vcrpy cassette loaded while it is active."""

    cassettes: list[Any] = field(default_factory=list)
    _original: Any = None

    def start(self) -> None:
        """Wrap `vcr.cassette.Cassette.load` (no-op when vcrpy is not installed)."""
        try:
            # By name: vcrpy is the user's test dependency, not one of the core.
            cassette_class: Any = importlib.import_module("vcr.cassette").Cassette
        except ImportError:
            return
        if self._original is not None:
            return
        original = cassette_class.__dict__["load"]
        recorder = self

        def load(cls: Any, /, **kwargs: Any) -> Any:
            cassette = original.__func__(cls, **kwargs)
            recorder.cassettes.append(cassette)
            return cassette

        self._original = original
        # Patched for the duration of one test, restored in `stop`.
        cassette_class.load = classmethod(load)

    def stop(self) -> None:
        """Restore vcrpy."""
        if self._original is None:
            return
        cassette_class: Any = importlib.import_module("vcr.cassette").Cassette
        cassette_class.load = self._original
        self._original = None

    def calls(self) -> list[Any]:
        """Every model call of the captured cassettes, in order."""
        from cachepilot.audit import calls_from_interactions

        out: list[Any] = []
        for cassette in self.cassettes:
            label = os.path.basename(str(getattr(cassette, "_path", "cassette")))
            out.extend(calls_from_interactions(_interactions(cassette), label=label))
        return out


def audit_cassettes(cassettes: Sequence[Any], *, provider: str | None = None) -> Any:
    """Audit in-memory vcrpy cassettes (their recorded and replayed interactions).

    Raises:
        ValueError: when they hold no model call.
    """
    from cachepilot.audit import audit_calls

    recorder = CassetteRecorder(list(cassettes))
    calls = recorder.calls()
    if not calls:
        raise ValueError("the cassettes hold no model request")
    return audit_calls(calls, provider=provider, path="(cassettes)")


@dataclass(slots=True)
class CassetteAudit:
    """What the `cachepilot_audit` fixture returns: audit what the test used, on demand."""

    recorder: CassetteRecorder

    @property
    def cassettes(self) -> list[Any]:
        """vcrpy cassettes loaded so far in this test."""
        return list(self.recorder.cassettes)

    def report(
        self, path: str | os.PathLike[str] | None = None, *, provider: str | None = None
    ) -> Any:
        """The audit of `path`, or of the cassettes the test loaded so far."""
        from cachepilot.audit import audit_file

        if path is not None:
            return audit_file(os.fspath(path), provider=provider)
        return audit_cassettes(self.recorder.cassettes, provider=provider)

    def check(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_breaks: int = 0,
        allow: Sequence[str] = (),
        min_hit_rate: float | None = None,
        provider: str | None = None,
    ) -> Any:
        """`assert_cache_stable` on `report(path)`; returns the report."""
        return assert_cache_stable(
            self.report(path, provider=provider),
            max_breaks=max_breaks,
            allow=allow,
            min_hit_rate=min_hit_rate,
        )

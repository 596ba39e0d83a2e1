"""Pytest plugin: record every test's outcome, duration and failure text into a JSON file.

Loaded with `-p collect` into a host test run; the file is `$CACHEPILOT_COMPAT_RESULTS`. Under
xdist the controller receives every worker's reports, so only the controller writes. With
`$CACHEPILOT_COMPAT_ONLY` (a file of node ids, one a line) only those tests run.

The file maps node ids to `{"outcome", "duration", "error", "text"}`:
`outcome` is `passed`, `failed` (setup, call or teardown failed), `skipped` or `xfailed`/
`xpassed`; `error` is the exception line (`Type: message`), `text` the end of the report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ENV_ONLY",
    "ENV_RESULTS",
    "pytest_collection_modifyitems",
    "pytest_collectreport",
    "pytest_runtest_logreport",
    "pytest_sessionfinish",
]

ENV_RESULTS = "CACHEPILOT_COMPAT_RESULTS"
ENV_ONLY = "CACHEPILOT_COMPAT_ONLY"
_TEXT_TAIL = 4000

_results: dict[str, dict[str, Any]] = {}


def _error_line(report: pytest.TestReport) -> str:
    """The `E   Type: message` line of a failure (the first one), or the crash message."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message).splitlines()[0][:500] if crash.message else ""
    text = str(report.longrepr or "")
    for line in text.splitlines():
        if line.startswith("E "):
            return line[1:].strip()[:500]
    return text.strip().splitlines()[-1][:500] if text.strip() else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the node ids listed in `$CACHEPILOT_COMPAT_ONLY` (a file), when it is set."""
    listed = os.environ.get(ENV_ONLY)
    if not listed:
        return
    wanted = set(Path(listed).read_text(encoding="utf-8").splitlines())
    kept = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold the setup / call / teardown reports of one test into one outcome."""
    entry = _results.setdefault(
        report.nodeid, {"outcome": "passed", "duration": 0.0, "error": "", "text": ""}
    )
    entry["duration"] = round(entry["duration"] + float(report.duration), 4)
    if entry["outcome"] == "failed":
        return  # the first failure is the one that explains the test
    if report.failed:
        entry["outcome"] = "failed"
        entry["error"] = _error_line(report)
        entry["text"] = str(report.longrepr or "")[-_TEXT_TAIL:]
        entry["when"] = report.when
    elif report.skipped:
        if hasattr(report, "wasxfail"):
            entry["outcome"] = "xfailed"
        elif report.when in ("setup", "call"):
            entry["outcome"] = "skipped"
    elif report.when == "call" and hasattr(report, "wasxfail"):
        entry["outcome"] = "xpassed"


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module that fails to import counts as one failed entry named after the module."""
    if report.failed:
        _results[report.nodeid or "<collection>"] = {
            "outcome": "failed",
            "duration": 0.0,
            "error": "collection error",
            "text": str(report.longrepr or "")[-_TEXT_TAIL:],
            "when": "collect",
        }


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the results (controller only under xdist)."""
    if hasattr(session.config, "workerinput"):
        return
    target = os.environ.get(ENV_RESULTS)
    if not target:
        return
    Path(target).write_text(json.dumps(_results, indent=0, sort_keys=True), encoding="utf-8")

"""pytest plugin: guard an agent's prompt-cache behaviour in CI with the cassettes it records.

Opt in per run (`pytest -p cachepilot.testing`), in `pytest.ini` / `pyproject.toml`
(`addopts = "-p cachepilot.testing"`) or in a `conftest.py`
(`pytest_plugins = ["cachepilot.testing"]`). Mark a vcrpy test and the cassettes it used
(recorded or replayed) are audited after the test body; the test fails when the requests
broke their cached prefix more often than the budget allows:

```python
import pytest, vcr

@pytest.mark.cachepilot_audit(max_breaks=0, allow=["history_rewrite"])
def test_agent_keeps_its_prefix():
    with vcr.use_cassette("tests/cassettes/agent.yaml"):
        run_my_agent()
```

Marker arguments: `max_breaks` (prefix breaks allowed, default 0), `allow` (cause classes
not counted, e.g. `history_rewrite` for an agent that compacts on purpose), `min_hit_rate`
(simulated hit rate over the cassette, optional), `provider` (profile name; default by API),
`cassette` (audit this file too, e.g. when the cassette is opened outside the test body).
Prefix breaks are changes of the request itself: volatile values, tool and system changes,
history rewrites, model and parameter changes (`cachepilot.diagnose.breaks.PREFIX_BREAK_CAUSES`).

The `cachepilot_audit` fixture does the same on demand (`cachepilot_audit.check(...)`).
Cassettes are found by wrapping vcrpy's `Cassette.load` while a marked test runs, so
`vcr.use_cassette`, a `VCR` instance and pytest-recording's `@pytest.mark.vcr` all work.
`assert_cache_stable` needs no pytest: it lives in `cachepilot.audit.guard` (and is re-exported
here). The hooks are classic hook wrappers, so any pytest from 7 on can load the plugin.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any

import pytest

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
    "cachepilot_audit",
]

_MARKER = "cachepilot_audit"
_RECORDER_KEY = pytest.StashKey[CassetteRecorder]()


@pytest.fixture
def cachepilot_audit(request: pytest.FixtureRequest) -> Iterator[CassetteAudit]:
    """Audit the vcrpy cassettes this test loads (see the module docstring)."""
    recorder = request.node.stash.get(_RECORDER_KEY, None)
    own = recorder is None
    if recorder is None:
        recorder = CassetteRecorder()
        recorder.start()
    try:
        yield CassetteAudit(recorder)
    finally:
        if own:
            recorder.stop()


# --------------------------------------------------------------------------------------------
# Hooks


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker."""
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(max_breaks=0, allow=(), min_hit_rate=None, provider=None, cassette=None): "
        "audit the vcrpy cassettes the test used and fail on prefix breaks beyond the budget "
        "(cachepilot)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, None]:
    """Start capturing cassettes before the fixtures of a marked test load any."""
    if item.get_closest_marker(_MARKER) is not None:
        recorder = CassetteRecorder()
        recorder.start()
        item.stash[_RECORDER_KEY] = recorder
    yield


def _audit_failure(item: pytest.Item) -> str | None:
    """Why a marked test's cassettes fail the audit, or None when they pass (or no marker)."""
    marker = item.get_closest_marker(_MARKER)
    recorder = item.stash.get(_RECORDER_KEY, None)
    if marker is None or recorder is None:
        return None
    options = dict(marker.kwargs)
    unknown = set(options) - {"max_breaks", "allow", "min_hit_rate", "provider", "cassette"}
    if unknown or marker.args:
        return f"{_MARKER}: unexpected argument(s) {sorted(unknown) or marker.args}"
    from cachepilot.audit import audit_calls, load_calls

    calls = recorder.calls()
    if options.get("cassette") is not None:
        calls.extend(load_calls(os.fspath(options["cassette"])))
    if not calls:
        return f"{_MARKER}: the test used no vcrpy cassette with a model request"
    report = audit_calls(calls, provider=options.get("provider"), path=item.nodeid)
    try:
        assert_cache_stable(
            report,
            max_breaks=options.get("max_breaks", 0),
            allow=options.get("allow", ()),
            min_hit_rate=options.get("min_hit_rate"),
        )
    except CacheAuditError as exc:
        return str(exc)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    """After a marked test's body passed: audit what it used; fail on a budget overrun."""
    outcome = yield
    if outcome.excinfo is not None:
        return  # the body failed already; its error is the one to see
    failure = _audit_failure(item)
    if failure is not None:
        # Raised from the wrapper's teardown: the call phase fails with this message.
        pytest.fail(failure, pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, Any, None]:
    """Stop capturing after the test's fixtures are torn down."""
    try:
        yield
    finally:
        recorder = item.stash.get(_RECORDER_KEY, None)
        if recorder is not None:
            recorder.stop()
            del item.stash[_RECORDER_KEY]

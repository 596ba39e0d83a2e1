"""The pytest plugin (`cachepilot.testing`, opted into with `-p cachepilot.testing`) in a
real inner pytest run: a vcrpy test replaying a cassette with two tool-set changes; and
`cachepilot.audit.guard`, which needs no pytest."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

# Imported here so the in-process inner run does not import (and then unload) them: PyYAML's
# C extension cannot be loaded twice in one process.
import vcr  # noqa: F401
import yaml  # noqa: F401

from cachepilot.audit import audit_file
from cachepilot.testing import CacheAuditError, assert_cache_stable

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent / "cassettes"

INNER = '''
import json
import urllib.request

import pytest
import vcr

CASSETTE = "tool_changes.json"


def replay_agent():
    """Post the cassette's requests again (vcrpy answers them; no network)."""
    data = json.load(open(CASSETTE))
    recorder = vcr.VCR(serializer="json", record_mode="none", match_on=["method", "path"])
    with recorder.use_cassette(CASSETTE):
        for item in data["interactions"]:
            request = urllib.request.Request(
                item["request"]["uri"],
                data=item["request"]["body"].encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request).read()


@pytest.mark.cachepilot_audit(max_breaks=0)
def test_strict():
    replay_agent()


@pytest.mark.cachepilot_audit(max_breaks=0, allow=["tool_change"])
def test_tool_changes_allowed():
    replay_agent()


@pytest.mark.cachepilot_audit(max_breaks=2)
def test_within_budget():
    replay_agent()


def test_fixture(cachepilot_audit):
    replay_agent()
    report = cachepilot_audit.report()
    assert len(report.calls) == 3
    cachepilot_audit.check(max_breaks=5)
    with pytest.raises(AssertionError, match="budget 1"):
        cachepilot_audit.check(max_breaks=1)


@pytest.mark.cachepilot_audit(cassette=CASSETTE, max_breaks=0)
def test_explicit_file():
    pass


@pytest.mark.cachepilot_audit
def test_no_cassette():
    pass
'''


def test_plugin_in_a_real_pytest_run(pytester: pytest.Pytester) -> None:
    shutil.copy(HERE / "tool_changes.json", pytester.path / "tool_changes.json")
    pytester.makepyfile(test_agent=INNER)
    result = pytester.runpytest("-p", "cachepilot.testing", "-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(passed=3, failed=3)
    text = result.stdout.str()
    assert "2 prefix break(s), budget 0" in text
    assert "tools reordered" in text and "tools added: search" in text
    assert "used no vcrpy cassette" in text
    # The marker is registered (no unknown-marker warning under --strict-markers).
    strict = pytester.runpytest(
        "-p", "cachepilot.testing", "--strict-markers", "-k", "allowed", "-p", "no:xdist"
    )
    strict.assert_outcomes(passed=1)


def test_plugin_is_opt_in(pytester: pytest.Pytester) -> None:
    """Installing cachepilot does not load the plugin into every pytest run."""
    assert not [ep for ep in entry_points(group="pytest11") if ep.value.startswith("cachepilot")]
    shutil.copy(HERE / "tool_changes.json", pytester.path / "tool_changes.json")
    pytester.makepyfile(test_agent=INNER)
    # In a subprocess: an in-process run would see the marker the outer run registered.
    result = pytester.runpytest_subprocess("--strict-markers", "-k", "allowed", "-p", "no:xdist")
    assert "'cachepilot_audit' not found in `markers`" in result.stdout.str()
    result.assert_outcomes(errors=1)
    # A conftest line opts in as well as `-p`.
    pytester.makeconftest('pytest_plugins = ["cachepilot.testing"]')
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:xdist")
    result.assert_outcomes(passed=3, failed=3)


def test_assert_cache_stable_without_pytest() -> None:
    """`cachepilot.audit.guard` works in a process where pytest cannot be imported."""
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "from cachepilot.audit.guard import CacheAuditError, assert_cache_stable\n"
        f"path = {str(HERE / 'tool_changes.json')!r}\n"
        "assert_cache_stable(path, allow=['tool_change'])\n"
        "try:\n"
        "    assert_cache_stable(path)\n"
        "except CacheAuditError as exc:\n"
        "    print(str(exc).splitlines()[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "cache audit failed: 2 prefix break(s), budget 0"


def test_assert_cache_stable_directly() -> None:
    report = audit_file(HERE / "tool_changes.json")
    with pytest.raises(CacheAuditError, match="2 prefix break"):
        assert_cache_stable(report)
    assert assert_cache_stable(report, allow=["tool_change"]) is report
    assert_cache_stable(HERE / "clean_stream.yaml", min_hit_rate=0.5)
    with pytest.raises(CacheAuditError, match="hit rate"):
        assert_cache_stable(HERE / "clean_stream.yaml", min_hit_rate=0.9)
    with pytest.raises(ValueError, match="unknown cause"):
        assert_cache_stable(report, allow=["typo"])
    with pytest.raises(ValueError, match="max_breaks"):
        assert_cache_stable(report, max_breaks=-1)

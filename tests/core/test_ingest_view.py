"""`CachePilot.ingest_view` / `view_of`: a result ingested before the model call (a host that
keeps its own copy of an output, deepagents' evicted files) shows the view `reduce_results`
would show, under an alias the host can find it by."""

from __future__ import annotations

import re

import pytest

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot.facade import CachePilot, Config

REF = re.compile(r'recall\(ref="([0-9a-f]{12})"\)')
BIG = "\n".join(f"line {i}: {'x' * 60}" for i in range(3_000))
CONFIG = Config(maintenance=MaintenanceConfig(enabled=False))


def _pilot() -> CachePilot:
    return CachePilot(CONFIG, store=InMemoryArtifactStore())


def _transcript(output: str) -> list[Message]:
    return [
        Message("user", "go", id="u0"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "bash", '{"command": "x"}'),)),
        Message("tool", output, tool_call_id="c1", name="bash"),
    ]


def test_ingest_view_records_the_view_reduce_results_shows() -> None:
    early, late = _pilot(), _pilot()
    key = early.ingest_view("bash", {"command": "x"}, BIG, "c1", "t", alias="evicted:c1")
    found = early.view_of("t", "evicted:c1")
    assert found is not None and found[0] == key and found[1]
    text = early.store.get("t", found[1])
    assert text is not None
    # The same text as a pilot that first sees the result at the model call.
    assert late.reduce_results(_transcript(BIG), "t")[2].content == text.text
    before = early.state("t").revision
    assert early.reduce_results(_transcript(BIG), "t")[2].content == text.text
    assert early.state("t").revision == before  # nothing ingested again
    ref = REF.search(text.text)
    assert ref is not None
    assert "line 1500:" in early.recall(ref.group(1), lines="1501-1501", thread="t")


def test_an_unreduced_result_has_an_empty_view_ref() -> None:
    pilot = _pilot()
    pilot.ingest_view("bash", None, "short", "c1", "t", alias="a")
    found = pilot.view_of("t", "a")
    assert found is not None and found[1] == ""


def test_view_of_an_unknown_alias_is_none_and_threads_are_separate() -> None:
    pilot = _pilot()
    assert pilot.view_of("t", "nothing") is None
    pilot.ingest_view("bash", None, BIG, "c1", "t", alias="a")
    assert pilot.view_of("other", "a") is None


def test_ingest_view_checks_its_thread() -> None:
    with pytest.raises(ValueError):
        _pilot().ingest_view("bash", None, BIG, "c1", "")

"""A ref the archive dropped (retention, size caps) is reported as removed, not as unknown."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore, SQLiteArtifactStore
from cachepilot.artifacts.base import REMOVED_BY_RETENTION, REMOVED_BY_SIZE, BaseArtifactStore
from cachepilot_langgraph.store import LangGraphArtifactStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def _log(i: int) -> str:
    return "\n".join(f"build {i}: step {j} of 6000" for j in range(6_000))  # ~130 KB


def _stores(tmp_path: Path, clock: Clock, **limits: Any) -> dict[str, BaseArtifactStore]:
    return {
        "memory": InMemoryArtifactStore(clock=clock, **limits),
        "sqlite": SQLiteArtifactStore(tmp_path / "a.sqlite", clock=clock, **limits),
        "langgraph": LangGraphArtifactStore(InMemoryStore(), clock=clock, **limits),
    }


@pytest.mark.parametrize("kind", ["memory", "sqlite", "langgraph"])
def test_size_cap_eviction_is_named_in_the_recall(tmp_path: Path, kind: str) -> None:
    clock = Clock()
    store = _stores(tmp_path, clock, max_bytes_per_thread=250_000)[kind]
    pilot = CachePilot(Config(), store=store)
    texts = [
        pilot.ingest("bash", {"command": f"build {i}"}, _log(i), f"c{i}", "t") for i in range(4)
    ]
    refs = [t.split('recall(ref="', 1)[1][:12] for t in texts]
    assert store.get("t", refs[0]) is None and store.get("t", refs[-1]) is not None
    answer = pilot.recall(refs[0], thread="t")
    assert "was removed from this conversation's archive by its size limit" in answer
    assert "not found" not in answer
    assert store.removed("t", refs[0]) == REMOVED_BY_SIZE
    assert store.removed("t", refs[-1]) is None
    assert store.removed("other", refs[0]) is None  # per thread
    assert "was not found" in pilot.recall("0123456789ab", thread="t")
    assert asyncio.run(pilot.arecall(refs[0], thread="t")) == answer
    # Archived again: found again.
    pilot.ingest("bash", {"command": "build 0"}, _log(0), "again", "t")
    assert pilot.recall(refs[0], lines="1", thread="t").endswith("build 0: step 0 of 6000")


@pytest.mark.parametrize("kind", ["memory", "sqlite", "langgraph"])
def test_retention_is_named_in_the_recall(tmp_path: Path, kind: str) -> None:
    clock = Clock()
    store = _stores(tmp_path, clock, retention_seconds=3_600)[kind]
    ref = store.put("t", "an old output")
    clock.now += 7_200
    assert store.prune() == 1
    assert store.removed("t", ref) == REMOVED_BY_RETENTION
    assert asyncio.run(store.aremoved("t", ref)) == REMOVED_BY_RETENTION
    store.delete_thread("t")
    assert store.removed("t", ref) is None  # forgotten with the thread

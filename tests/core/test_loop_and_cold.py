"""The doom-loop hook, and the configurable cold-cache threshold."""

from __future__ import annotations

import pytest

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.maintenance.policy import Candidate, MaintenanceConfig, decide
from cachepilot.messages import Message
from cachepilot.pilot.events import LoopEvent
from cachepilot.sim import get_profile
from cachepilot.tokens import get_counter


def test_loop_hook_called_once_per_looping_result() -> None:
    events: list[LoopEvent] = []
    pilot = CachePilot(store=InMemoryArtifactStore(), on_loop=events.append)
    for n in range(1, 5):
        report = pilot.ingest_report("bash", {"command": "make"}, "error 2", f"c{n}", "t")
        assert (report.loop is not None) == (n >= 3)
    assert events == [
        LoopEvent("t", "bash", "c3", 3, True),
        LoopEvent("t", "bash", "c4", 4, True),
    ]
    pilot.ingest_report("bash", {"command": "make test"}, "ok", "c5", "t")
    assert len(events) == 2  # a different call ends the run


def test_a_failing_hook_never_costs_the_turn() -> None:
    def boom(event: LoopEvent) -> None:
        raise RuntimeError("host bug")

    pilot = CachePilot(store=InMemoryArtifactStore(), on_loop=boom)
    for n in range(4):
        text = pilot.ingest("bash", {"command": "make"}, "error 2", f"c{n}", "t")
    assert "identical bash call #4" in text


def _decide(config: MaintenanceConfig, idle: float) -> str:
    messages = [Message("user", "x" * 4_000)] * 30
    counter = get_counter()
    profile = get_profile("openai-gpt-5.4-mini")
    candidate = Candidate(1, "k", "stub", 5_000, "old tool output")
    decision, _ = decide(
        call=2,
        messages=messages,
        candidates=[candidate],
        counter=counter,
        config=config,
        price=profile.price,
        ttl_seconds=profile.ttl_seconds,
        idle_seconds=idle,
        context_tokens=50_000,
        context_window=400_000,
        stub_tokens=lambda c: 30,
    )
    return decision.reason


def test_cache_cold_after_defaults_to_the_ttl_and_can_be_cautious() -> None:
    assert _decide(MaintenanceConfig(), idle=400.0) == "cold-cache"  # TTL 300 s
    cautious = MaintenanceConfig(cache_cold_after=900.0)
    assert _decide(cautious, idle=400.0) != "cold-cache"
    assert _decide(cautious, idle=1_000.0) == "cold-cache"


@pytest.mark.parametrize("value", [0.0, -5.0, 31 * 86_400.0])
def test_cache_cold_after_is_validated(value: float) -> None:
    with pytest.raises(ValueError, match="cache_cold_after"):
        MaintenanceConfig(cache_cold_after=value)
    with pytest.raises(ValueError):
        Config(maintenance={"cache_cold_after": value})  # type: ignore[arg-type]

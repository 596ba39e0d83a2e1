"""Bounded memory: per-thread caches (and the states a caller keeps elsewhere) leave memory
least recently used first, and a thread that comes back sends the same bytes as if they had
never left."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot.facade import CachePilot, Config

MAINTENANCE: dict[str, Any] = {
    "prune": True,
    "protect_tool_tokens": 400,
    "protect_results": 1,
    "min_prune_tokens": 100,
    "schedule": "fixed",
}
SYSTEM = "You are a coding agent. Today is 2026-11-21, cwd /home/dev/app."


def _transcript(thread: str, turns: int) -> list[Message]:
    messages: list[Message] = [Message("user", f"Fix the build of {thread}.", id=f"{thread}u")]
    for turn in range(turns):
        call = ToolCall(f"{thread}c{turn}", "bash", json.dumps({"command": f"make t{turn}"}))
        messages.append(Message("assistant", "", tool_calls=(call,), id=f"{thread}a{turn}"))
        body = "\n".join(
            hashlib.sha256(f"{thread}/{turn}/{i}".encode()).hexdigest() for i in range(60)
        )
        messages.append(
            Message("tool", body, tool_call_id=call.id, name="bash", id=f"{thread}t{turn}")
        )
    return messages


def _sent(prepared: tuple[str | None, list[Message], list[dict[str, Any]]]) -> str:
    system, messages, tools = prepared
    return json.dumps([system, [m.to_dict() for m in messages], tools])


def _pilot(**limits: Any) -> CachePilot:
    return CachePilot(Config(maintenance=MAINTENANCE, **limits), store=InMemoryArtifactStore())


def _run(pilot: CachePilot, order: list[str], *, persisted: dict[str, str] | None) -> list[str]:
    """Drive the threads call by call in `order`, as a framework does: with `persisted`, the
    state is saved after each call and given back whenever the pilot no longer holds it."""
    turns: dict[str, int] = {}
    out = []
    for n, thread in enumerate(order):
        turns[thread] = turns.get(thread, 0) + 1
        if persisted is not None:
            pilot.mark_persisted(thread)
            if not pilot.holds(thread) and thread in persisted:
                pilot.load_state(thread, persisted[thread])
        transcript = _transcript(thread, turns[thread])
        out.append(_sent(pilot.prepare(SYSTEM, transcript, thread=thread, now=1_000.0 + n)))
        if persisted is not None:
            persisted[thread] = pilot.state(thread).model_dump_json()
    return out


ORDER = [t for _ in range(8) for t in ("a", "b", "c", "d")] + ["a"] * 6 + ["d", "c", "b"] * 3


def test_evicted_caches_and_states_come_back_with_the_same_bytes() -> None:
    unbounded = _run(_pilot(), ORDER, persisted=None)
    bounded = _pilot(max_threads_in_memory=1, state_idle_seconds=0)
    persisted: dict[str, str] = {}
    assert _run(bounded, ORDER, persisted=persisted) == unbounded
    # The bounds held: one thread's caches and state in memory, the others in `persisted`.
    assert len(bounded._views) == len(bounded._trackers) == 1
    assert len(bounded._states) == 1 and set(persisted) == {"a", "b", "c", "d"}
    assert any(bounded.state("b").plan.epochs for _ in [0])  # maintenance happened


def test_states_nobody_keeps_stay_in_memory() -> None:
    pilot = _pilot(max_threads_in_memory=1, state_idle_seconds=0)
    out = _run(pilot, ORDER, persisted=None)
    assert out == _run(_pilot(), ORDER, persisted=None)
    assert len(pilot._views) == 1  # caches go all the same
    assert set(pilot._states) == {"a", "b", "c", "d"}


def test_a_busy_state_is_not_dropped() -> None:
    pilot = _pilot(max_threads_in_memory=1)  # default idle time: nothing is idle here
    persisted: dict[str, str] = {}
    _run(pilot, ORDER, persisted=persisted)
    assert set(pilot._states) == {"a", "b", "c", "d"} and len(pilot._views) == 1


def test_the_byte_budget_evicts_caches() -> None:
    pilot = CachePilot(Config(max_cache_bytes=1024 * 1024), store=InMemoryArtifactStore())
    for thread in "abcdefgh":  # no maintenance: the whole transcript is the view
        pilot.prepare(SYSTEM, _transcript(thread, 40), thread=thread, now=1e3, maintain=False)
        assert pilot._cache_bytes == sum(v.approx_bytes for v in pilot._views.values())
        assert pilot._cache_bytes <= 1024 * 1024
    held = list(pilot._views)
    assert 1 < len(held) < 8 and held[-1] == "h"  # the most recent ones stay
    # A transcript's text is held twice (transcript and view), each ~156 KB here.
    assert pilot._views["h"].approx_bytes > 2 * 150_000


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        Config(max_threads_in_memory=0)
    with pytest.raises(ValueError):
        Config(max_cache_bytes=10)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from("abc"), min_size=1, max_size=18), st.integers(1, 3))
def test_any_order_sends_what_an_unbounded_pilot_sends(order: list[str], limit: int) -> None:
    bounded = _pilot(max_threads_in_memory=limit, state_idle_seconds=0)
    assert _run(bounded, order, persisted={}) == _run(_pilot(), order, persisted=None)
    assert len(bounded._views) <= limit

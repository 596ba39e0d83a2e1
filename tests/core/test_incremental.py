"""The per-thread caches that make `prepare` cost O(new messages) change nothing it returns.

Each cache is checked against the full computation it replaces: the incremental renderer
against `render_plan`, the pairing scanner against `pairing_issues`, the scheduler's
precomputed sizes against counting, and a long-lived pilot against pilots that start from
the exported state on every call (so every cache starts empty).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.fold_cost import fold_pays
from cachepilot.maintenance.policy import MaintenanceConfig, decide, prune_candidates
from cachepilot.messages import (
    Message,
    PairingScanner,
    ToolCall,
    message_keys,
    pairing_issues,
)
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.plan.epochs import Edit, Epoch, Plan, PlanRenderer, render_plan
from cachepilot.pricing import Price
from cachepilot.tokens import get_counter

SYSTEM = "You are a coding agent. Today is 2026-03-17 14:05:09 UTC. cwd: /home/dev/project."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    },
]
MAINTENANCE: dict[str, Any] = {
    "protect_tool_tokens": 300,
    "protect_results": 1,
    "min_prune_tokens": 150,
    "min_result_tokens": 20,
    "fold_protect_tokens": 400,
    "fold_min_tokens": 600,
    "fold_summary_tokens": 50,
    "context_window": 4_000,
    "every": 2,
}
EVICTING: dict[str, Any] = {
    **MAINTENANCE,
    "prune": True,
    "fold_by_cost": False,
    "context_window": 30_000,
    "protect_tool_tokens": 2_500,
    "min_prune_tokens": 2_000,
}
"""Leaves the lifecycle time to mark superseded reads evictable before they are pruned."""

# --- transcripts ---------------------------------------------------------------------------

# One step of a session: (kind, size, id?) drawn by hypothesis, turned into messages below.
_STEP = st.tuples(
    st.sampled_from(["tools", "tools", "tools", "user", "answer", "orphan", "unanswered"]),
    st.integers(min_value=0, max_value=3),
    st.booleans(),
)


def _output(n: int, size: int) -> str:
    lines = 5 + 25 * size
    return "\n".join(f"src/mod_{n % 4}.py:{i}: v{n}_{i} = f({i}, {n})" for i in range(lines))


def _messages(steps: list[tuple[str, int, bool]]) -> list[Message]:
    """A transcript from drawn steps: tool turns (one or two calls), user turns, answers,
    and the odd broken pairing (an orphan result, an unanswered call)."""
    out: list[Message] = [Message("user", "Fix the failing test in /home/dev/project.")]
    for n, (kind, size, with_id) in enumerate(steps):
        mid = f"m{n}" if with_id else None
        if kind == "user":
            text = "continue" if size == 0 else f"Now look at module {size}."
            out.append(Message("user", text, id=mid))
        elif kind == "answer":
            out.append(Message("assistant", f"Done with step {size}.", id=mid))
        elif kind == "orphan":
            out.append(Message("tool", "stray", tool_call_id=f"ghost{n}", name="bash"))
        else:
            count = 1 + size % 2
            calls = tuple(
                ToolCall(
                    f"c{n}_{j}",
                    "bash" if j == 0 else "read",
                    json.dumps({"command": f"cat src/mod_{(n + j) % 4}.py"}),
                )
                for j in range(count)
            )
            out.append(Message("assistant", f"Step {n}.", tool_calls=calls, id=mid))
            answered = calls[:-1] if kind == "unanswered" else calls
            for j, call in enumerate(answered):
                out.append(
                    Message("tool", _output(n + j, size), tool_call_id=call.id, name=call.name)
                )
    return out


def _request_json(prepared: tuple[str | None, list[Message], list[dict[str, Any]]]) -> str:
    system, messages, tools = prepared
    return json.dumps([system, [m.to_dict() for m in messages], tools], sort_keys=True)


# --- the pilot -----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(_STEP, min_size=4, max_size=28),
    growth=st.lists(st.integers(min_value=1, max_value=4), min_size=40, max_size=40),
    idle=st.lists(st.booleans(), min_size=40, max_size=40),
    maintenance=st.sampled_from([MAINTENANCE, EVICTING]),
)
def test_long_lived_pilot_matches_fresh_pilots(
    steps: list[tuple[str, int, bool]],
    growth: list[int],
    idle: list[bool],
    maintenance: dict[str, Any],
) -> None:
    transcript = _messages(steps)
    config = Config(maintenance=maintenance)
    long_lived = CachePilot(config, store=InMemoryArtifactStore())
    fresh_store = InMemoryArtifactStore()
    state: dict[str, Any] | None = None
    now = 1_000.0
    size = 1
    for call, (step, cold) in enumerate(zip(growth, idle, strict=True)):
        if size > len(transcript):
            break
        history = transcript[:size]
        now += 4_000.0 if cold else 5.0  # a cold cache makes the call a maintenance point
        fresh = CachePilot(config, store=fresh_store)
        if state is not None:
            fresh.load_state("t", state)
        expected = fresh.prepare(SYSTEM, history, TOOLS, thread="t", now=now)
        got = long_lived.prepare(SYSTEM, history, TOOLS, thread="t", now=now)
        assert _request_json(got) == _request_json(expected), f"call {call}"
        state = fresh.export_state("t")
        assert long_lived.export_state("t") == state, f"call {call}"
        size += step


@pytest.mark.parametrize(("maintenance", "kind"), [(MAINTENANCE, "fold"), (EVICTING, "evict")])
def test_long_lived_pilot_matches_fresh_pilots_through_epochs(
    maintenance: dict[str, Any], kind: str
) -> None:
    steps = [("tools", 3, i % 3 == 0) for i in range(30)]
    steps[10] = ("user", 2, False)
    steps[20] = ("answer", 1, True)
    transcript = _messages(steps)
    config = Config(maintenance=maintenance)
    long_lived = CachePilot(config, store=InMemoryArtifactStore())
    fresh_store = InMemoryArtifactStore()
    state: dict[str, Any] | None = None
    for size in range(1, len(transcript) + 1):
        fresh = CachePilot(config, store=fresh_store)
        if state is not None:
            fresh.load_state("t", state)
        now = 1_000.0 + 5 * size
        expected = fresh.prepare(SYSTEM, transcript[:size], TOOLS, thread="t", now=now)
        got = long_lived.prepare(SYSTEM, transcript[:size], TOOLS, thread="t", now=now)
        assert _request_json(got) == _request_json(expected), f"size {size}"
        state = fresh.export_state("t")
    plan = long_lived.state("t").plan
    assert len(plan.epochs) >= 3
    assert kind in {edit.kind for epoch in plan.epochs for edit in epoch.edits}
    assert long_lived.state("t").calls == len(transcript)


def test_reloaded_state_is_picked_up_by_a_long_lived_pilot() -> None:
    """`load_state` between calls (another process moved the thread on) drops the caches."""
    transcript = _messages([("tools", 3, False) for _ in range(16)])
    config = Config(maintenance=MAINTENANCE)
    main = CachePilot(config, store=InMemoryArtifactStore())
    other = CachePilot(config, store=InMemoryArtifactStore())
    for size in range(1, 20):
        main.prepare(SYSTEM, transcript[:size], TOOLS, thread="t", now=float(size))
    other.load_state("t", main.export_state("t"))
    for size in range(20, len(transcript) + 1):
        other.prepare(SYSTEM, transcript[:size], TOOLS, thread="t", now=float(size))
    main.load_state("t", other.export_state("t"))
    size = len(transcript)
    check = CachePilot(config, store=InMemoryArtifactStore())
    check.load_state("t", main.export_state("t"))
    expected = check.prepare(SYSTEM, transcript[:size], TOOLS, thread="t", now=99.0)
    got = main.prepare(SYSTEM, transcript[:size], TOOLS, thread="t", now=99.0)
    assert _request_json(got) == _request_json(expected)


# --- the renderer --------------------------------------------------------------------------


@st.composite
def _plans(draw: st.DrawFn, keys: list[str]) -> Plan:
    """Epochs of stubs and folds over keys of the whole transcript (some not sent yet)."""
    epochs: list[Epoch] = []
    for index in range(draw(st.integers(min_value=0, max_value=3))):
        edits: list[Edit] = []
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            a = draw(st.integers(min_value=0, max_value=len(keys) - 1))
            if draw(st.booleans()):
                edits.append(Edit(kind="stub", key=keys[a], text=f"[stub {a}]", ref="ab12"))
            else:
                b = draw(st.integers(min_value=0, max_value=len(keys) - 1))
                lo, hi = sorted((a, b))
                edits.append(
                    Edit(kind="fold", key=keys[lo], end_key=keys[hi], text=f"[fold {lo}-{hi}]")
                )
        epochs.append(Epoch(index=index, reason="test", edits=edits))
    return Plan(epochs=epochs)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)
@given(data=st.data(), steps=st.lists(_STEP, min_size=2, max_size=20))
def test_renderer_matches_render_plan(data: st.DataObject, steps: list[Any]) -> None:
    messages = _messages(steps)
    keys = message_keys(messages)
    plan = data.draw(_plans(keys))
    renderer = PlanRenderer()
    size = 0
    while size < len(messages):
        size = min(len(messages), size + data.draw(st.integers(min_value=0, max_value=3)))
        if data.draw(st.integers(min_value=0, max_value=9)) == 0:
            # A maintenance point: a new epoch on the same plan object.
            extra = data.draw(_plans(keys))
            plan.epochs.extend(
                e.model_copy(update={"index": len(plan.epochs) + i})
                for i, e in enumerate(extra.epochs)
            )
        if data.draw(st.integers(min_value=0, max_value=14)) == 0:
            plan = plan.model_copy(deep=True)  # state reloaded
        got = renderer.render(messages[:size], plan, keys[:size])
        expected = render_plan(messages[:size], plan, keys[:size])
        assert got == expected
        assert all(a is b for a, b in zip(got.messages, expected.messages, strict=True))
    # A transcript that is not an extension (a message replaced) renders in full.
    if len(messages) > 2:
        changed = [*messages[:1], Message("user", "edited"), *messages[2:]]
        changed_keys = message_keys(changed)
        got = renderer.render(changed, plan, changed_keys)
        assert renderer.extended_from is None
        assert got == render_plan(changed, plan, changed_keys)


def test_renderer_falls_back_when_a_folded_call_is_answered_late() -> None:
    call = ToolCall("late", "bash", "{}")
    messages = [
        Message("user", "go"),
        Message("assistant", "a", tool_calls=(call,)),
        Message("user", "meanwhile"),
        Message("assistant", "b"),
        Message("tool", "late result", tool_call_id="late", name="bash"),
    ]
    keys = message_keys(messages)
    fold = Edit(kind="fold", key=keys[1], end_key=keys[3], text="[summary]")
    plan = Plan(epochs=[Epoch(index=0, reason="fold", edits=[fold])])
    renderer = PlanRenderer()
    before = renderer.render(messages[:4], plan, keys[:4])
    assert before.folds[1] is fold  # closed so far: folded
    after = renderer.render(messages, plan, keys)
    assert renderer.extended_from is None
    assert after == render_plan(messages, plan, keys)
    assert all(f is None for f in after.folds)  # the late answer splits the range: skipped


def test_renderer_extends_and_returns_fresh_lists() -> None:
    messages = _messages([("tools", 1, False) for _ in range(6)])
    keys = message_keys(messages)
    plan = Plan(
        epochs=[Epoch(index=0, reason="x", edits=[Edit(kind="stub", key=keys[2], text="s")])]
    )
    renderer = PlanRenderer()
    first = renderer.render(messages[:5], plan, keys[:5])
    first.messages.clear()  # the caller owns what it got
    second = renderer.render(messages, plan, keys)
    assert renderer.extended_from == 5
    assert second == render_plan(messages, plan, keys)


# --- pairing and sizes ---------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(_STEP, min_size=1, max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=6),
)
def test_pairing_scanner_matches_pairing_issues(steps: list[Any], cuts: list[int]) -> None:
    messages = _messages(steps)
    scanner = PairingScanner()
    at = 0
    for cut in sorted(cuts):
        scanner.feed(messages[at:cut])
        at = max(at, cut)
        seen = messages[: min(at, len(messages))]
        assert scanner.issues() == pairing_issues(seen)
    scanner.feed(messages[at:])
    for pending_tail in (True, False):
        assert scanner.issues(allow_pending_tail=pending_tail) == pairing_issues(
            messages, allow_pending_tail=pending_tail
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_STEP, min_size=2, max_size=24), call=st.integers(1, 400))
def test_scheduler_with_sizes_matches_counting(steps: list[Any], call: int) -> None:
    counter = get_counter()
    config = MaintenanceConfig(**MAINTENANCE)
    price = Price(model="t", hit_per_m=0.075, miss_per_m=0.75, output_per_m=4.5)
    messages = _messages(steps)
    keys = message_keys(messages)
    sizes = [counter.count_message(m) for m in messages]
    args: dict[str, Any] = {"already": set(keys[:2]), "evictable": {keys[-1]: "done"}}
    candidates = prune_candidates(messages, keys, counter, config, **args)
    assert prune_candidates(messages, keys, counter, config, sizes=sizes, **args) == candidates
    assert fold_pays(messages, counter, config, price, call, sizes=sizes) == fold_pays(
        messages, counter, config, price, call
    )
    common: dict[str, Any] = {
        "call": call,
        "messages": messages,
        "candidates": candidates,
        "counter": counter,
        "config": config,
        "price": price,
        "ttl_seconds": None,
        "idle_seconds": None,
        "context_tokens": sum(sizes),
        "context_window": 1_000_000,
        "stub_tokens": lambda c: 30,
    }
    assert decide(**common, sizes=sizes) == decide(**common)

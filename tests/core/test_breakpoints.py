"""Explicit cache breakpoints (`cachepilot.pilot.breakpoints`, `CachePilot.cache_breakpoints`).

Sizes are hand-computable with a one-token-per-character encoding: a message renders to its
characters plus 4 template tokens. Every placement is checked against the simulator: a mark
is right when the request it is on reads more from the provider's cache.
"""

from __future__ import annotations

import json

import pytest

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot.breakpoints import (
    HEADER,
    CacheAnchors,
    advance_anchors,
    plan_breakpoints,
    request_breakpoints,
)
from cachepilot.sim import CacheSimulator, Request, get_profile, render_request
from cachepilot.tokens import TokenCounter
from cachepilot_bench import BenchConfig, run_bench
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.report import summarize

OVERHEAD = 4
ANTHROPIC = get_profile("anthropic")


class CharEncoding:
    """One token per character."""

    name = "chars"

    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter(CharEncoding())


def text(n: int, char: str = "x") -> str:
    return char * (n - OVERHEAD)


def turn(index: int, calls: int, size: int = 40) -> list[Message]:
    """An assistant message with `calls` parallel tool calls and their results."""
    ids = [f"t{index}_{k}" for k in range(calls)]
    out = [Message("assistant", "", tool_calls=tuple(ToolCall(i, "read", "{}") for i in ids))]
    out += [Message("tool", f"{i}:" + "r" * size, tool_call_id=i, name="read") for i in ids]
    return out


def marks(request: Request, counter: TokenCounter, **kwargs: object) -> list[int]:
    rendered = render_request(request, counter)
    return plan_breakpoints(rendered, profile=ANTHROPIC, **kwargs)  # type: ignore[arg-type]


def test_last_message_and_header_marked(counter: TokenCounter) -> None:
    request = Request("s" * 1996, [Message("user", text(600)), Message("user", text(300))])
    assert marks(request, counter) == [HEADER, 1]


def test_nothing_below_the_minimum(counter: TokenCounter) -> None:
    short = Request("s" * 100, [Message("user", text(500))])
    assert marks(short, counter) == []
    # The header alone is short, the whole request is not: only the last message.
    request = Request("s" * 100, [Message("user", text(1500))])
    assert marks(request, counter) == [0]


def test_client_marks_kept_and_the_limit_never_exceeded(counter: TokenCounter) -> None:
    messages = [Message("user", text(1500)), *turn(0, 1), *turn(1, 12)]
    request = Request("s" * 1996, messages)
    for client in ([], [0], [0, 1], [HEADER, 0, 1], [0, 1, 2, 3]):
        added = marks(request, counter, client=client)
        assert not set(added) & set(client)
        assert len(set(added) | set(client)) <= 4
    assert marks(request, counter, client=[0, 1, 2, 3]) == []
    with pytest.raises(ValueError, match="out of range"):
        marks(request, counter, client=[len(messages)])


def test_each_client_mark_takes_a_slot_also_two_at_one_position(counter: TokenCounter) -> None:
    """Two marked system blocks both end the header: the provider counts two marks."""
    messages = [Message("user", text(1500)), *turn(0, 1), *turn(1, 12)]
    request = Request("s" * 1996, messages)
    last = len(messages) - 1
    assert marks(request, counter, client=[last]) == [HEADER, 2]  # bridge and header
    # Three marked blocks in the last message, or two system blocks and it: one slot left.
    assert marks(request, counter, client=[last, last, last]) == [2]
    assert marks(request, counter, client=[HEADER, HEADER, last]) == [2]
    assert marks(request, counter, client=[HEADER, HEADER, last - 1, last]) == []
    assert marks(request, counter, client=[HEADER, HEADER, HEADER, last, last]) == []


def test_deterministic(counter: TokenCounter) -> None:
    messages = [Message("user", text(1500)), *turn(0, 3), *turn(1, 12)]
    request = Request("s" * 1996, messages)
    first = marks(request, counter, stable=[2])
    assert all(marks(request, counter, stable=[2]) == first for _ in range(3))


def test_bridge_reaches_the_previous_write_past_a_wide_turn(counter: TokenCounter) -> None:
    """Twelve parallel calls add 25 blocks: the last mark alone cannot look back that far."""
    system = "s" * 1996
    before = [Message("user", text(3000)), *turn(0, 1)]
    after = [*before, *turn(1, 12)]
    previous = Request(system, before, cache_breakpoints=marks(Request(system, before), counter))
    assert previous.cache_breakpoints == (HEADER, len(before) - 1)
    ours = marks(Request(system, after), counter)
    assert len(before) - 1 in ours  # the bridge: the end of the previous request
    hits = {}
    for name, points in (("default", None), ("ours", ours)):
        sim = CacheSimulator("anthropic", counter)
        sim.submit(previous)
        usage = sim.submit(Request(system, after, cache_breakpoints=points))
        hits[name] = usage.cached_tokens
    previous_tokens = render_request(previous, counter).total_tokens
    assert hits["ours"] == previous_tokens
    assert hits["default"] == 2000  # the header only


def test_bridge_from_a_given_previous_request(counter: TokenCounter) -> None:
    system = "s" * 1996
    before = [Message("user", text(3000)), *turn(0, 1)]
    after = [*before, *turn(1, 12)]
    rendered = render_request(Request(system, after), counter)
    previous = render_request(Request(system, before), counter)
    assert len(before) - 1 in plan_breakpoints(rendered, (), previous, ANTHROPIC)
    # A previous request this one does not extend gives no bridge.
    other = render_request(Request(system, [Message("user", text(3000, "q"))]), counter)
    assert plan_breakpoints(rendered, (), other, ANTHROPIC) == [HEADER, len(after) - 1]


def test_stable_anchor_keeps_a_rewrite_cached(counter: TokenCounter) -> None:
    """A mark on the message before a later rewrite: the rewritten request still reads it."""
    system = "s" * 1996
    head = [Message("user", text(3000))]
    old = Message("tool", text(4000, "o"), tool_call_id="c0", name="read")
    call = Message("assistant", "", tool_calls=(ToolCall("c0", "read", "{}"),))
    history = [*head, call, old]
    for k in range(1, 12):
        history += turn(k, 1)
    anchor = 1  # the assistant message before the result a maintenance point will stub
    stub = Message("tool", "[read output pruned]", tool_call_id="c0", name="read")
    rewritten = [*history[:2], stub, *history[3:]]
    hits = {}
    for name, stable in (("without", []), ("with", [anchor])):
        sim = CacheSimulator("anthropic", counter)
        for n in range(4, len(history) + 1, 2):
            request = Request(system, history[:n])
            sim.submit(
                Request(
                    system, history[:n], cache_breakpoints=marks(request, counter, stable=stable)
                )
            )
        request = Request(system, rewritten)
        usage = sim.submit(
            Request(system, rewritten, cache_breakpoints=marks(request, counter, stable=stable))
        )
        hits[name] = usage.cached_tokens
    assert hits["without"] == 2000
    assert hits["with"] == render_request(Request(system, history[:2]), counter).ends[-1]


def test_request_breakpoints_counts_a_hidden_prefix(counter: TokenCounter) -> None:
    messages = [Message("user", text(800))]
    assert request_breakpoints(None, messages, (), ANTHROPIC, counter=counter) == []
    marked = request_breakpoints(
        None, messages, (), ANTHROPIC, counter=counter, hidden_prefix_tokens=500
    )
    assert marked == [0]


def test_advance_anchors() -> None:
    keys = ["a", "b", "c", "d"]
    anchors, stable = advance_anchors(CacheAnchors(), 1, keys, 2)
    assert anchors == CacheAnchors(call=1, before=None, now="b") and stable == [1]
    same, again = advance_anchors(anchors, 1, keys, 2)  # asked twice at one call
    assert same is anchors and again == [1]
    # A maintenance point moved the first rewritable message: both anchors this call.
    moved, stable = advance_anchors(anchors, 2, keys, 3)
    assert moved == CacheAnchors(call=2, before="b", now="c") and stable == [1, 2]
    _later, stable = advance_anchors(moved, 3, keys, 3)
    assert stable == [2]
    # Nothing rewritable any more: the anchor of the call before is still marked once.
    gone, stable = advance_anchors(moved, 3, ["x", "c"], None)
    assert stable == [1] and gone == CacheAnchors(call=3, before="c", now=None)
    _, stable = advance_anchors(gone, 4, ["x", "c"], None)
    assert stable == []
    _, stable = advance_anchors(moved, 3, ["x", "y"], None)  # folded away
    assert stable == []


def _tool_turn(index: int, size: int) -> list[Message]:
    call = ToolCall(f"c{index}", "bash", json.dumps({"command": f"cmd {index}"}))
    return [
        Message("assistant", f"step {index}", tool_calls=(call,)),
        Message("tool", f"out {index}\n" + "line\n" * size, tool_call_id=call.id, name="bash"),
    ]


def test_pilot_marks_the_anchor_before_the_first_rewritable_result() -> None:
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    transcript: list[Message] = [Message("user", "fix the bug " * 400)]
    transcript += _tool_turn(0, 10)  # small: not worth a stub
    transcript += _tool_turn(1, 600)
    system, view, tools = pilot.prepare("You are a coder. " * 300, transcript, (), "t")
    added = pilot.cache_breakpoints(system, view, tools, "t")
    assert added == [HEADER, 3, 4]  # message 3 precedes the first large result
    assert pilot.state("t").anchors.now is not None
    # Not the view `prepare` returned: no anchor, nothing remembered.
    other = pilot.cache_breakpoints(system, view[:-1], tools, "t")
    assert other == [HEADER, 3]
    with pytest.raises(ValueError, match="out of range"):
        pilot.cache_breakpoints(system, view, tools, "t", client=[99])


def test_pilot_marks_the_previous_anchor_at_a_maintenance_point() -> None:
    config = Config(
        provider="anthropic",
        maintenance=MaintenanceConfig(
            prune=True, schedule="fixed", every=1, protect_results=1, protect_tool_tokens=0
        ),
    )
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    transcript: list[Message] = [Message("user", "fix the bug " * 400)]
    anchors_seen: list[tuple[int, list[int]]] = []
    for k in range(4):
        transcript += _tool_turn(k, 600)
        epochs = len(pilot.state("t").plan.epochs)
        system, view, tools = pilot.prepare("You are a coder. " * 300, transcript, (), "t")
        added = pilot.cache_breakpoints(system, view, tools, "t")
        if len(pilot.state("t").plan.epochs) > epochs:
            anchors_seen.append((k, added))
    assert anchors_seen, "the fixed schedule must have appended an epoch"
    k, added = anchors_seen[0]
    # The first epoch stubbed message 2 (the first result); the anchor before it (message 1)
    # is marked at that call, as is the new one before the next rewritable result.
    assert 1 in added
    assert len(added) <= 4


def test_bench_demo_hits_come_from_cachepilots_own_marks() -> None:
    """On Anthropic with an agent that marks nothing, vanilla reads nothing from the cache
    and cachepilot reads most of its input through the marks it placed."""
    config = BenchConfig(provider="anthropic", workers=1, client_marks="none")
    results = run_bench([build_demo_session()], ["vanilla", "cachepilot"], config)
    doc = summarize(results, config, traces=1)
    assert doc["client_marks"] == "none"
    vanilla, ours = doc["strategies"]["vanilla"], doc["strategies"]["cachepilot"]
    assert vanilla["cached_tokens"] == 0
    assert ours["hit_rate"] > 0.8
    assert ours["input_cost_usd"] < 0.1 * vanilla["input_cost_usd"]

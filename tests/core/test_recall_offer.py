"""When `recall` joins a thread's tool list (`Config.recall_offer`).

The tool's schema sits before the history, so it joins at most once: with the first lossy
reduction that pays for that prefix break (or a maintenance point), then stays.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical import tool_name
from cachepilot.maintenance import MaintenanceConfig, decide, prune_candidates
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot import CachePilot, Config, PilotState
from cachepilot.recall import RECALL_TOOL_NAME
from cachepilot.recall_offer import approx_tokens, reduction_pays
from cachepilot.sim import get_profile
from cachepilot.tokens import get_counter

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


def _log(lines: int, seed: int = 0) -> str:
    return "\n".join(
        f"[{seed}:{i:06d}] step {i * 7 % 1013} compiled module_{i % 97}.c in {i % 13} ms"
        for i in range(lines)
    )


def _pilot(**overrides: Any) -> CachePilot:
    return CachePilot(
        Config(**{"recall_offer": "when_it_pays", **overrides}), store=InMemoryArtifactStore()
    )


class _Session:
    """A growing bash session driven through `reduce_results` + `prepare`, as plugins do."""

    def __init__(self, pilot: CachePilot, thread: str = "t", task: str = "Build it.") -> None:
        self.pilot, self.thread = pilot, thread
        self.messages: list[Message] = [Message("user", task)]
        self.tool_lists: list[list[str]] = []
        self.views: list[list[Message]] = []

    def call(self) -> list[Message]:
        shown = self.pilot.reduce_results(self.messages, self.thread)
        _, view, tools = self.pilot.prepare("You are terse.", shown, TOOLS, self.thread)
        self.tool_lists.append([tool_name(t) for t in tools])
        self.views.append(view)
        return view

    def run(self, output: str) -> None:
        n = len(self.tool_lists)
        call = ToolCall(f"c{n}", "bash", json.dumps({"cmd": f"make step{n}"}))
        self.messages.append(Message("assistant", f"Step {n}.", tool_calls=(call,)))
        self.messages.append(Message("tool", output, tool_call_id=call.id, name="bash"))

    def offered(self) -> list[bool]:
        return [RECALL_TOOL_NAME in names for names in self.tool_lists]


def test_a_thread_with_nothing_to_recall_never_carries_the_tool() -> None:
    session = _Session(_pilot())
    for n in range(8):
        session.call()
        session.run(_log(20, n))
    session.call()
    assert not any(session.offered())
    assert len({json.dumps(t) for t in session.tool_lists}) == 1
    assert not session.pilot.recall_offered("t")


def test_first_call_mode_offers_it_from_the_first_call() -> None:
    assert Config().recall_offer == "first_call"  # the default
    session = _Session(_pilot(recall_offer="first_call"))
    for n in range(3):
        session.call()
        session.run(_log(20, n))
    session.call()
    assert all(session.offered())


def test_a_large_output_brings_the_tool_in_once_and_it_stays() -> None:
    session = _Session(_pilot())
    session.call()
    session.run(_log(20))
    session.call()
    session.run(_log(6_000, 1))  # ~400 KB: its reduction pays for the prefix break
    view = session.call()
    for n in range(3):
        session.run(_log(20, n + 2))
        session.call()
    assert session.offered() == [False, False, True, True, True, True]
    assert len({json.dumps(t) for t in session.tool_lists[2:]}) == 1
    reduced = view[-1].text
    assert len(reduced) < 20_000 and "recall(" in reduced


def test_a_reduction_that_does_not_pay_keeps_the_output_whole() -> None:
    # A large cached context (a long task statement) and an output just over the shell gate:
    # showing its preview would save less than offering recall re-misses.
    session = _Session(_pilot(), task="Context:\n" + _log(9_000, 9))
    session.call()
    session.run(_log(300, 1))
    assert len(session.messages[-1].text) > 12_000
    view = session.call()
    assert view[-1].text == session.messages[-1].text  # whole: nothing hidden
    assert session.offered() == [False, False]
    # A huge output later does pay: the tool joins, the earlier output stays whole.
    session.run(_log(40_000, 2))
    view = session.call()
    assert session.offered() == [False, False, True]
    assert view[-3].text == session.messages[-3].text
    assert "recall(" in view[-1].text


def test_a_first_call_reduction_is_free_and_offers_the_tool() -> None:
    pilot = _pilot()
    call = ToolCall("c0", "bash", json.dumps({"cmd": "make"}))
    history = [
        Message("user", "Build it."),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", _log(3_000), tool_call_id="c0", name="bash"),
    ]
    shown = pilot.reduce_results(history, "t")
    _, view, tools = pilot.prepare(None, shown, TOOLS, "t")
    assert RECALL_TOOL_NAME in [tool_name(t) for t in tools]
    assert "recall(" in view[-1].text


def test_an_integrator_recall_tool_is_left_out_until_offered() -> None:
    pilot = _pilot()
    with_recall = [*TOOLS, pilot._recall_tool]  # the proxy passes its own copy
    _, _, tools = pilot.prepare(None, [Message("user", "hi")], with_recall, "t")
    assert [tool_name(t) for t in tools] == ["bash"]
    pilot.offer_recall("t")
    _, _, tools = pilot.prepare(None, [Message("user", "hi")], with_recall, "t")
    assert sorted(tool_name(t) for t in tools) == ["bash", RECALL_TOOL_NAME]


def test_without_recall_allowed_a_tool_named_recall_is_the_hosts() -> None:
    pilot = _pilot()
    own = {"type": "function", "function": {"name": RECALL_TOOL_NAME, "parameters": {}}}
    _, _, tools = pilot.prepare(None, [Message("user", "hi")], [own], "t", recall=False)
    assert [tool_name(t) for t in tools] == [RECALL_TOOL_NAME]


def test_a_maintenance_point_that_pays_brings_the_tool_in() -> None:
    # No reduction at ingestion (the gate is off), but the scheduler folds when the context
    # passes the trigger: the fold's summary names its recall ref, so the tool joins then.
    config = Config(
        recall_offer="when_it_pays",
        maintenance=MaintenanceConfig(context_window=30_000, fold_trigger=0.5),
    )
    session = _Session(CachePilot(config, store=InMemoryArtifactStore()))
    for n in range(14):
        session.call()
        session.run(_log(100, n))
    session.call()
    epochs = session.pilot.state("t").plan.epochs
    assert epochs, "the fold trigger should have been reached"
    offered = session.offered()
    first = offered.index(True)
    assert not any(offered[:first]) and all(offered[first:])
    assert session.pilot.recall_offered("t")


def test_the_cost_model_counts_the_whole_request_when_the_tool_would_join() -> None:
    counter = get_counter("o200k_base")
    cfg = MaintenanceConfig()
    price = get_profile("openai-gpt-5.4").price
    view = [Message("user", _log(3_000))]
    for n in range(6):
        call = ToolCall(f"c{n}", "bash", "{}")
        view.append(Message("assistant", "", tool_calls=(call,)))
        view.append(Message("tool", _log(400, n), tool_call_id=f"c{n}", name="bash"))
    view.append(Message("user", "next"))
    candidates = prune_candidates(
        view, [str(i) for i in range(len(view))], counter, cfg, already=set()
    )
    sizes = [counter.count_message(m) for m in view]
    common: dict[str, Any] = {
        "call": 400,
        "messages": view,
        "candidates": candidates,
        "counter": counter,
        "config": cfg,
        "price": price,
        "ttl_seconds": None,
        "idle_seconds": None,
        "context_tokens": sum(sizes),
        "context_window": 1_000_000,
        "stub_tokens": lambda c: 20,
        "sizes": sizes,
    }
    plain, _ = decide(**common)
    whole, _ = decide(**common, whole_remiss=sum(sizes) * 40)
    assert plain.apply
    assert not whole.apply and whole.remiss_tokens == sum(sizes) * 40


def test_reduction_pays_weighs_the_prefix_against_the_saving() -> None:
    price = get_profile("openai-gpt-5.4").price
    cfg = MaintenanceConfig()
    common = {"recall_tokens": 100, "calls": 10, "price": price, "config": cfg}
    assert reduction_pays(removed_tokens=50_000, context_tokens=20_000, **common).pays
    assert not reduction_pays(removed_tokens=1_000, context_tokens=100_000, **common).pays
    assert not reduction_pays(removed_tokens=0, context_tokens=0, **common).pays


def test_approx_tokens_is_exact_for_short_texts_and_scales_long_ones() -> None:
    counter = get_counter("o200k_base")
    short = _log(100)
    assert approx_tokens(counter, short) == counter.count(short)
    long = _log(20_000)
    exact = counter.count(long)
    assert abs(approx_tokens(counter, long) - exact) < exact * 0.05


def test_states_saved_before_version_2_keep_the_tool() -> None:
    old = {"version": 1, "calls": 4}
    assert PilotState.model_validate(old).recall_offered
    assert not PilotState.model_validate({"version": 1, "calls": 0}).recall_offered
    fresh = PilotState()
    assert fresh.version == 2 and not fresh.recall_offered
    again = PilotState.model_validate_json(fresh.model_copy(update={"calls": 3}).model_dump_json())
    assert not again.recall_offered  # a version-2 state says for itself


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([10, 150, 250, 2_000, 8_000]), min_size=1, max_size=10))
def test_the_tool_list_changes_at_most_once_and_every_shown_ref_is_followable(
    sizes: list[int],
) -> None:
    session = _Session(_pilot())
    for n, lines in enumerate(sizes):
        session.call()
        session.run(_log(lines, n))
    session.call()
    offered = session.offered()
    if True in offered:
        first = offered.index(True)
        assert all(offered[first:]) and not any(offered[:first])
    lists = {json.dumps(t) for t in session.tool_lists}
    assert len(lists) <= 2
    for view, on in zip(session.views, offered, strict=True):
        if any("recall(ref=" in m.text for m in view if m.role == "tool"):
            assert on, "a view names a ref the model cannot follow"

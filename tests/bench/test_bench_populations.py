"""Populations inside a trace source: naming them, chains, bootstrap intervals, per-group
rows and the held-out rule leaving one population out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.messages import Message
from cachepilot.usage import Usage
from cachepilot_bench.harness import CallResult, SessionResult
from cachepilot_bench.holdout import format_holdout, holdout_json, population_docs
from cachepilot_bench.populations import (
    bootstrap_interval,
    chained_groups,
    group_rows,
    per_group,
    population,
)
from cachepilot_bench.traces.session import Session


def _session(source: str, sid: str, **meta: Any) -> Session:
    return Session(id=sid, source=source, messages=[Message("user", "x")], meta=dict(meta))


def test_each_source_names_its_populations_from_the_metadata() -> None:
    cc = _session("claude-code", "p/a.jsonl", session_uuid="258c7280-ae70", kind="subagent")
    assert population(cc) == "session-258c7280"
    mini = _session("mini-swe-agent-1", "m/x.traj.json", instance_id="django__django-13012")
    assert population(mini) == "django"
    hands = _session("openhands", "o.jsonl#p", instance_id="ponylang__ponyc-4588")
    assert population(hands) == "ponyc"
    assert population(_session("tau-bench", "t.json#task1-trial2", trial=2)) == "trial2"
    base = "swe_agent/trajectories/demonstrations"
    assert population(_session("swe-agent", f"{base}/ctf/crypto/k.traj")) == "demonstrations/ctf"
    replay = f"{base}/replay__marshmallow__default__t-0.20/m.traj"
    assert population(_session("swe-agent", replay)) == "demonstrations/replay"
    assert population(_session("swe-agent", f"{base}/simple.traj")) == "demonstrations"
    assert population(_session("swe-agent", "swe_agent/tests/x/y.traj")) == "tests"
    # Anything else: the folder of the trace file.
    assert population(_session("reasonix", "reasonix/runs/a/b.jsonl")) == "runs/a"
    assert population(_session("reasonix", "b.jsonl")) == "."


def test_a_chain_takes_the_group_most_of_its_traces_have() -> None:
    members = {"a": "django", "b": "sympy", "c": "sympy", "d": "django"}
    chained = [
        _session("s", "chain0", chained=["a", "b", "c"]),
        _session("s", "chain1", chained=["d", "b"]),  # a tie: the earliest trace's group
        _session("s", "a"),
    ]
    assert chained_groups(chained, members) == {
        "chain0": "sympy",
        "chain1": "django",
        "a": "django",
    }


def test_the_bootstrap_interval_holds_the_estimate_and_is_deterministic() -> None:
    pairs = [(9, 10), (10, 10), (5, 10), (20, 20), (7, 8)]
    low, high = bootstrap_interval(pairs)
    point = sum(v for v, _ in pairs) / sum(n for _, n in pairs)
    assert low <= point <= high
    assert bootstrap_interval(pairs) == (low, high)
    # Fifty sessions like these say more than five.
    wide = high - low
    low50, high50 = bootstrap_interval(pairs * 10)
    assert high50 - low50 < wide
    assert bootstrap_interval([(3, 3)]) == (1.0, 1.0)
    for bad in ({"rounds": 0}, {"level": 1.0}, {"level": 0.0}):
        with pytest.raises(ValueError):
            bootstrap_interval(pairs, **bad)
    with pytest.raises(ValueError, match="no sessions"):
        bootstrap_interval([])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 30)).map(lambda t: (min(t), max(t))),
        min_size=1,
        max_size=12,
    )
)
def test_the_interval_stays_within_the_sessions_own_fidelities(
    pairs: list[tuple[int, int]],
) -> None:
    low, high = bootstrap_interval(pairs, rounds=50)
    ratios = [v / n for v, n in pairs if n]
    assert 0.0 <= low <= high <= 1.0
    if ratios:
        assert min(ratios) - 1e-9 <= low and high <= max(ratios) + 1e-9


def _result(
    sid: str, source: str, strategy: str, cost: float, seen: int, need: int
) -> SessionResult:
    call = CallResult(
        call_number=0,
        kind="call",
        usage=Usage(input_tokens=100),
        input_cost_usd=cost,
        cost_usd=cost,
        prefix_extends=True,
        maintenance=False,
        facts_needed=need,
        facts_visible=seen,
        facts_recoverable=need,
    )
    return SessionResult(sid, source, strategy, calls=[call])


def test_group_rows_pool_cost_and_fidelity_per_population() -> None:
    groups = {"s1": "g1", "s2": "g1", "s3": "g2"}
    ours = [
        _result("s1", "src", "cachepilot", 2.0, 9, 10),
        _result("s2", "src", "cachepilot", 3.0, 10, 10),
        _result("s3", "src", "cachepilot", 4.0, 1, 2),
    ]
    base = [
        _result("s1", "src", "vanilla", 5.0, 10, 10),
        _result("s2", "src", "vanilla", 5.0, 10, 10),
        _result("s3", "src", "vanilla", 8.0, 2, 2),
    ]
    first, second = group_rows(ours, base, groups)
    assert (first.group, first.sessions, first.cost_ratio, first.fidelity_visible) == (
        "g1",
        2,
        0.5,
        0.95,
    )
    assert (second.group, second.cost_ratio, second.fidelity_visible) == ("g2", 0.5, 0.5)
    rows = per_group([*ours, *base], groups)
    assert set(rows) == {"src/g1", "src/g2"}
    assert rows["src/g1"]["cachepilot"]["input_cost_usd"] == 5.0
    assert rows["src/g1"]["vanilla"]["fidelity_visible"] == 1.0
    low, high = rows["src/g1"]["cachepilot"]["fidelity_interval"]
    assert low <= 0.95 <= high


def _row(cost: float, visible: float) -> dict[str, Any]:
    return {"input_cost_usd": cost, "fidelity_visible": visible, "fidelity_recoverable": 1.0}


def test_the_held_out_rule_also_leaves_one_population_out() -> None:
    cheap, safe = "cachepilot[fold_summary_share=0.6]", "cachepilot"

    def doc(mode: str, hard: float) -> dict[str, Any]:
        per_source = {
            "a": {"vanilla": _row(10, 1), cheap: _row(4, 0.99), safe: _row(5, 0.99)},
            "b": {"vanilla": _row(10, 1), cheap: _row(4, 0.99), safe: _row(5, 1.0)},
        }
        # Source "a" looks fine pooled; one of its populations does not under `cheap`.
        per_group = {
            "a/x": {"vanilla": _row(5, 1), cheap: _row(2, hard), safe: _row(2.5, 0.98)},
            "a/y": {"vanilla": _row(5, 1), cheap: _row(2, 1.0), safe: _row(2.5, 1.0)},
            "b/z": {"vanilla": _row(10, 1), cheap: _row(4, 0.99), safe: _row(5, 1.0)},
        }
        strategies = {n: _row(1, 1) for n in ("vanilla", cheap, safe)}
        return {
            "mode": mode,
            "strategies": strategies,
            "per_source": per_source,
            "per_group": per_group,
        }

    docs = {"isolated": doc("isolated", 0.95), "continuous": doc("continuous", 0.96)}
    groups = population_docs(docs)
    assert groups is not None and set(groups["isolated"]["per_source"]) == {"a/x", "a/y", "b/z"}
    text = format_holdout(docs)
    assert "leave one source out" in text and "leave one population out" in text
    assert f"picked on every population: {safe}" in text
    found = holdout_json(docs)
    assert found["default"]["name"] == cheap  # per source, the cheap setting looks fine
    assert found["populations"]["default"]["name"] == safe  # the worst population says no
    assert found["populations"]["passed"] < len(found["populations"]["held_out"])
    no_groups = {m: {k: v for k, v in d.items() if k != "per_group"} for m, d in docs.items()}
    assert population_docs(no_groups) is None
    assert "populations" not in holdout_json(no_groups)

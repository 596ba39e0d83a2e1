"""The `headroom` peer: Headroom's own `HeadroomChatModel` run per call, and its adapter.

Tests marked `needs_headroom` run Headroom 0.42 itself and skip when it is not installed
(it is not part of the workspace); run them with
`uv run --with 'headroom-ai[langchain]==0.42.0' pytest tests/bench/test_peer_headroom.py`.
The adapter and the missing-dependency path are tested without it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from cachepilot.cli import main
from cachepilot.messages import Message, ToolCall
from cachepilot.tokens import TokenCounter
from cachepilot_bench import BenchConfig, run_bench
from cachepilot_bench.harness import run_session
from cachepilot_bench.peers.headroom_convert import ViewRestorer
from cachepilot_bench.peers.lc_convert import LcConverter
from cachepilot_bench.registry import (
    ALL_STRATEGIES,
    OPTIONAL_STRATEGIES,
    available_strategies,
    make_strategy,
)
from cachepilot_bench.report import summarize
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext, Strategy
from cachepilot_bench.traces.session import Session

HEADROOM_MISSING = importlib.util.find_spec("headroom") is None
needs_headroom = pytest.mark.skipif(
    HEADROOM_MISSING,
    reason="Headroom is not installed here; run: uv run --with "
    "'headroom-ai[langchain]==0.42.0' pytest tests/bench/test_peer_headroom.py",
)

COUNTER = TokenCounter("approximate")
SYSTEM = "You are a careful coding agent."
TOOLS = ({"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}},)
SOURCE = "\n".join(
    f"def compute_total_price_{n}(items):\n    return sum(i.price for i in items) + {41000 + n}"
    for n in range(30)
)


def _call(call_id: str, name: str, args: dict[str, object]) -> ToolCall:
    return ToolCall(call_id, name, json.dumps(args))


def read_then_edit() -> list[Message]:
    """A file is read, then edited; the final answer uses a fact only the read showed."""
    path = "/repo/shop/pricing.py"
    return [
        Message("user", "Fix the pricing bug.", id="u0"),
        Message("assistant", "", tool_calls=(_call("c0", "Read", {"file_path": path}),), id="a0"),
        Message("tool", SOURCE, tool_call_id="c0", name="Read", id="t0"),
        Message(
            "assistant",
            "",
            tool_calls=(
                _call("c1", "Edit", {"file_path": path, "old_string": "+", "new_string": "-"}),
            ),
            id="a1",
        ),
        Message("tool", f"The file {path} has been updated.", tool_call_id="c1", name="Edit"),
        Message("assistant", "Fixed compute_total_price_17 (it added 41017).", id="a2"),
    ]


def replay(strategy: Strategy, transcript: Sequence[Message]) -> list[PreparedCall]:
    """Every assistant message is one call; the strategy gets what arrived since its last."""
    strategy.start(
        SessionContext(
            session_id="s",
            system=SYSTEM,
            tools=TOOLS,
            context_window=1_000_000,
            counter=COUNTER,
            trace_peak_tokens=COUNTER.count_messages(transcript),
        )
    )
    views: list[PreparedCall] = []
    previous = 0
    for index, message in enumerate(transcript):
        if message.role != "assistant":
            continue
        call = CallContext(
            call_number=len(views),
            new_messages=tuple(transcript[previous:index]),
            history=tuple(transcript[:index]),
            timestamp=None,
        )
        views.append(strategy.prepare(call))
        previous = index
    return views


# --- without Headroom --------------------------------------------------------------------


def test_headroom_is_registered_but_runs_only_when_named() -> None:
    assert "headroom" in available_strategies()
    assert "headroom" in OPTIONAL_STRATEGIES
    assert "headroom" not in ALL_STRATEGIES


def _hide_headroom(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import headroom` fail, as in an environment without it."""
    for name in [m for m in sys.modules if m == "headroom" or m.startswith("headroom.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "headroom", None)
    monkeypatch.delitem(sys.modules, "cachepilot_bench.peers.headroom", raising=False)


def test_missing_headroom_names_the_command_that_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_headroom(monkeypatch)
    with pytest.raises(ValueError, match=r"headroom.*uv run --with 'headroom-ai\[langchain\]"):
        make_strategy("headroom")


def test_bench_without_headroom_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _hide_headroom(monkeypatch)
    assert main(["bench", "--strategy", "headroom", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "Headroom is not installed" in err
    assert "Traceback" not in err


def _round_trip(messages: Sequence[BaseMessage], edits: dict[int, str]) -> list[BaseMessage]:
    """What `HeadroomChatModel` hands the wrapped model: new messages, no ids or names,
    tool-call arguments re-serialized; `edits` replaces contents by position."""
    out: list[BaseMessage] = []
    for index, message in enumerate(messages):
        content = edits.get(index, message.content)
        if isinstance(message, ToolMessage):
            out.append(ToolMessage(content=content, tool_call_id=message.tool_call_id))
        elif isinstance(message, AIMessage):
            calls = [
                {"id": c["id"], "name": c["name"], "args": json.loads(json.dumps(c["args"]))}
                for c in message.tool_calls
            ]
            out.append(AIMessage(content=content, tool_calls=calls))
        else:
            out.append(HumanMessage(content=content))
    return out


def test_restorer_gives_back_untouched_messages_as_the_originals() -> None:
    transcript = [
        *read_then_edit()[:3],
        # Odd spacing: the verbatim argument text must survive the wrapper's re-serialization.
        Message("assistant", "", tool_calls=(ToolCall("c9", "Read", '{"file_path" :  "/a"}'),)),
    ]
    sent = LcConverter().convert_all(transcript)
    restored = ViewRestorer().restore(transcript, sent, _round_trip(sent, {}))
    assert all(a is b for a, b in zip(restored, transcript, strict=True))
    assert restored[3].tool_calls[0].arguments == '{"file_path" :  "/a"}'


def test_restorer_keeps_ids_of_an_edited_message_and_reuses_it_next_call() -> None:
    transcript = read_then_edit()[:5]
    sent = LcConverter().convert_all(transcript)
    restorer = ViewRestorer()
    first = restorer.restore(transcript, sent, _round_trip(sent, {2: "[stale read]"}))
    edited = first[2]
    assert edited is not transcript[2]
    assert (edited.role, edited.content) == ("tool", "[stale read]")
    assert (edited.tool_call_id, edited.name, edited.id) == ("c0", "Read", "t0")
    assert [m is o for m, o in zip(first, transcript, strict=True)] == [
        True,
        True,
        False,
        True,
        True,
    ]
    again = restorer.restore(transcript, sent, _round_trip(sent, {2: "[stale read]"}))
    assert again[2] is edited  # same edit, same object: the harness sees an unchanged prefix
    other = restorer.restore(transcript, sent, _round_trip(sent, {2: "[another edit]"}))
    assert other[2] is not edited and other[2].content == "[another edit]"


def test_restorer_converts_an_output_that_does_not_line_up() -> None:
    transcript = read_then_edit()[:3]
    sent = LcConverter().convert_all(transcript)
    restorer = ViewRestorer()
    shorter = _round_trip(sent, {})[:2]
    restored = restorer.restore(transcript, sent, shorter)
    assert [m.role for m in restored] == ["user", "assistant"]
    assert restorer.unaligned_calls == 1


# --- with Headroom -----------------------------------------------------------------------


@needs_headroom
def test_runs_offline_and_binds_headroom_retrieve() -> None:
    import os

    strategy = make_strategy("headroom")
    assert os.environ["HEADROOM_OFFLINE"] not in ("", "0")
    assert os.environ["HEADROOM_STATELESS"] not in ("", "0")
    views = replay(strategy, read_then_edit())
    names = [t["function"]["name"] for t in views[0].tools]
    assert names == ["Read", "headroom_retrieve"]
    assert all(list(v.tools) == list(views[0].tools) for v in views)  # bound once


@needs_headroom
def test_stale_read_is_replaced_archived_and_breaks_the_prefix() -> None:
    strategy = make_strategy("headroom")
    transcript = read_then_edit()
    views = replay(strategy, transcript)
    # Call 1 is made before the edit happened: the read is fresh and untouched.
    assert views[1].messages[2] is transcript[2]
    assert not views[1].maintenance and not views[1].archived
    # Call 2 sees the edit: Headroom rewrites the earlier read in place (a history rewrite).
    stale = views[2].messages[2]
    assert isinstance(stale.content, str)
    assert stale.content.startswith("[Read content stale: /repo/shop/pricing.py")
    assert "Retrieve original: hash=" in stale.content
    assert "41017" not in stale.content
    assert views[2].maintenance
    assert views[2].archived == (SOURCE,)  # the original, as Headroom's store returns it
    assert strategy.stats()["headroom_retrievable_originals"] == 1


@needs_headroom
def test_lost_fact_is_recoverable_through_the_archive_in_the_harness() -> None:
    transcript = read_then_edit()
    session = Session(
        id="s", source="test", messages=[Message("system", SYSTEM), *transcript], tools=TOOLS
    )
    config = BenchConfig(workers=1)
    result = run_session(session, make_strategy("headroom"), config, counter=COUNTER)
    assert result.error is None
    calls = [c for c in result.calls if c.kind == "call"]
    final = calls[-1]
    assert final.facts_needed > 0
    assert final.facts_visible < final.facts_needed  # the stale read's facts left the view
    assert final.facts_recoverable == final.facts_needed  # ... and Headroom's store has them
    assert not final.prefix_extends
    assert any(c.kind == "round_trip" for c in result.calls)  # the recall is charged


@needs_headroom
def test_json_array_is_compacted_without_loss_and_deterministically() -> None:
    rows = [
        {"id": n, "sku": f"SKU-{90000 + n}", "status": "ok" if n % 17 else "error", "qty": n % 7}
        for n in range(300)
    ]
    payload = json.dumps(rows)
    transcript = [
        Message("user", "List the inventory.", id="u0"),
        Message("assistant", "", tool_calls=(_call("c0", "inventory", {}),), id="a0"),
        Message("tool", payload, tool_call_id="c0", name="inventory", id="t0"),
        Message("assistant", "Checked the inventory.", id="a1"),
        Message("user", "Thanks.", id="u1"),
        Message("assistant", "You're welcome.", id="a2"),
    ]
    views = replay(make_strategy("headroom"), transcript)
    compacted = views[1].messages[2]
    assert isinstance(compacted.content, str)
    assert len(compacted.content) < len(payload) // 2
    # A table with every row: nothing lost, so nothing archived and no marker.
    assert all(f"SKU-{90000 + n}" in compacted.content for n in range(300))
    assert all(not v.archived for v in views)
    assert views[2].messages[2] is compacted  # the same rewrite on every call: no break
    assert not views[2].maintenance
    # Deterministic: a fresh instance sends the same bytes.
    again = replay(make_strategy("headroom"), transcript)
    assert [v.messages for v in again] == [v.messages for v in views]


@needs_headroom
def test_demo_session_through_run_bench() -> None:
    from cachepilot_bench.demo_workload import build_demo_session

    config = BenchConfig(workers=1)
    results = run_bench([build_demo_session()], ["vanilla", "headroom"], config)
    doc = summarize(results, config, traces=1)
    totals = doc["strategies"]["headroom"]
    assert totals["errors"] == []
    assert totals["calls"] == doc["strategies"]["vanilla"]["calls"]
    assert totals["fidelity_recoverable"] >= totals["fidelity_visible"]

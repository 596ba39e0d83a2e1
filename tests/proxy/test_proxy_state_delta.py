"""Reverse deltas between a thread's documents (`cachepilot.proxy.state_delta`), and the
size of the save a preparation makes: about the thread's state, not twice it."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fault_helpers import HEADERS, USAGE
from hypothesis import given, settings
from hypothesis import strategies as st
from test_proxy_replicas import session

from cachepilot.proxy import ProxyConfig, ProxyEngine
from cachepilot.proxy.memory import _Unanswered
from cachepilot.proxy.state_delta import rebuild, reverse_delta
from cachepilot.state.base import SQLiteStateStore

_scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=4)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=3), inner, max_size=5)


_json = st.recursive(_scalars, _containers, max_leaves=30)

# Scalars equal by == only when their JSON text is equal too (no 1 against 1.0 or True, no
# 0.0 against -0.0): inside containers the delta takes such parts as unchanged by design.
_distinct_scalars = (
    st.none()
    | st.booleans()
    | st.integers(2, 5)
    | st.floats(0.1, 0.9, exclude_max=True)
    | st.text(max_size=4)
)
_distinct_json = st.recursive(_distinct_scalars, _containers, max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(before=_distinct_json, after=_distinct_json)
def test_a_delta_gives_the_earlier_document_back_byte_for_byte(before: Any, after: Any) -> None:
    """Any two documents whose equal parts are equal text (key order kept); neither is
    changed."""
    kept_before, kept_after = copy.deepcopy(before), copy.deepcopy(after)
    delta = reverse_delta(before, after)
    stored = json.loads(json.dumps(delta))  # the delta goes through the store as JSON
    assert json.dumps(rebuild(after, stored)) == json.dumps(before)
    assert json.dumps(before) == json.dumps(kept_before)
    assert json.dumps(after) == json.dumps(kept_after)


@settings(max_examples=400, deadline=None)
@given(before=_json, after=_json)
def test_a_delta_gives_an_equal_document_back(before: Any, after: Any) -> None:
    """Any two documents: the rebuild equals the earlier one by value (1, 1.0 and True
    inside containers may come back as each other: the proxy's mark checks the bytes and
    keeps the earlier document whole then, tested below)."""
    stored = json.loads(json.dumps(reverse_delta(before, after)))
    assert rebuild(after, stored) == before


@settings(max_examples=200, deadline=None)
@given(base=st.dictionaries(st.text(max_size=3), _json, max_size=6), grown=st.lists(_json))
def test_a_grown_list_costs_only_its_length(base: dict[str, Any], grown: list[Any]) -> None:
    """A state that only appended to a list: the delta names the old length, not the items."""
    before = {**base, "calls": [{"n": 1}, {"n": 2}]}
    after = {**base, "calls": [{"n": 1}, {"n": 2}, *grown]}
    delta = reverse_delta(before, after)
    assert delta == ({"d": {"calls": {"n": 2, "i": {}}}} if grown else None)


@settings(max_examples=200, deadline=None)
@given(
    kept=st.lists(_json, min_size=1, max_size=12),
    dropped=st.lists(_json, min_size=1, max_size=8),
    added=st.lists(_json, max_size=8),
)
def test_a_bounded_list_that_moved_on_costs_only_what_it_dropped(
    kept: list[Any], dropped: list[Any], added: list[Any]
) -> None:
    """The oldest items dropped, new ones appended (a bounded record): the delta holds the
    dropped items, not the kept ones, and gives the list back byte for byte."""
    before = {"recent": [*dropped, *kept]}
    after = {"recent": [*kept, *added]}
    delta = reverse_delta(before, after)
    stored = json.loads(json.dumps(delta))
    assert json.dumps(rebuild(after, stored)) == json.dumps(before)
    if json.dumps(dropped[0]) != json.dumps(kept[0]):
        assert len(json.dumps(delta)) <= len(json.dumps(dropped)) + len(json.dumps(kept)) + 40


def test_a_shift_between_equal_values_of_other_types_is_not_taken() -> None:
    before, after = [0, 1, 2], [1.0, True, 5]  # equal values, not equal JSON text
    stored = json.loads(json.dumps(reverse_delta(before, after)))
    assert json.dumps(rebuild(after, stored)) == json.dumps(before)


def test_a_delta_not_made_here_is_refused() -> None:
    with pytest.raises(ValueError):
        rebuild({"a": 1}, {"?": 1})
    with pytest.raises(ValueError):
        rebuild([1], {"d": {}})
    with pytest.raises(ValueError):
        rebuild([1], {"s": 5, "h": [0]})  # the list it shifted was longer
    with pytest.raises(ValueError):
        rebuild([1], {"s": 1, "h": "x"})


def test_a_preparation_save_is_not_twice_the_state(tmp_path: Path) -> None:
    """30 requests on SQLite: the save made before a request without a maintenance point is
    sent (it keeps what prepares a resend again) stays within 10 % of the save after its
    answer; the earlier layout, the whole earlier document inside it, was about 2x."""
    store = SQLiteStateStore(tmp_path / "proxy.sqlite")
    sizes: dict[bool, list[int]] = {True: [], False: []}
    save_if = store.save_if

    async def counting(thread: str, state: str, expected: int) -> int | None:
        if thread.endswith("/team-session"):
            sizes['"unanswered"' in state].append(len(state.encode()))
        return await save_if(thread, state, expected)

    store.save_if = counting  # type: ignore[method-assign]

    async def reply(request: httpx.Request) -> httpx.Response:
        message = {"role": "assistant", "content": "ok"}
        return httpx.Response(200, json={"id": "r", "object": "chat.completion", "created": 0,
                                         "model": "m", "usage": USAGE, "choices": [
                                             {"index": 0, "finish_reason": "stop",
                                              "message": message}]})  # fmt: skip

    async def go() -> None:
        config = ProxyConfig(upstream="http://upstream.invalid", provider="anthropic",
                             store=str(tmp_path / "proxy.sqlite"))  # fmt: skip
        engine = ProxyEngine(config, state_store=store, transport=httpx.MockTransport(reply))
        for body in session(30):
            answer = await engine.handle(
                "POST", "/v1/chat/completions", "", HEADERS, json.dumps(body).encode()
            )
            assert answer.status == 200
            (name,) = engine.threads.names()
            epochs.append(len(engine.pilot.state(name).plan.epochs))
        await engine.aclose()

    epochs: list[int] = []
    asyncio.run(go())
    assert len(sizes[True]) == len(sizes[False]) == 30
    # A maintenance point's holds what its epoch replaced (about 1.8x here): the last request
    # that appended no epoch is compared.
    plain = [i for i in range(1, 30) if epochs[i] == epochs[i - 1]]
    assert 29 - plain[-1] < 5 and sum(e > 0 for e in epochs) > 10
    last = plain[-1]
    assert sizes[True][last] < 1.1 * sizes[False][last], (sizes[True][last], sizes[False][last])
    assert sum(sizes[True]) < 1.4 * sum(sizes[False])


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # equal mappings, keys in another order
        ({"k": [[0, [0]], [0, [0.0]]]}, {"k": [[0, [0.0]]]}),  # 0 and 0.0 inside lists
        ({"k": [1, {"x": True}]}, {"k": [1, {"x": 1}]}),  # True and 1 one level down
        ({"cost": -0.0}, {"cost": 0.0}),  # equal floats, not equal text
    ],
)
def test_a_mark_gives_back_the_earlier_document_even_where_the_delta_cannot(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    """Python's == takes these for unchanged parts, so the delta alone would give `after`'s
    text back: the mark checks the rebuild byte for byte and then keeps the document whole."""
    text = json.dumps(before, ensure_ascii=False)
    stored = json.loads(json.dumps(_Unanswered("tok", "dig", text).to_json(after)))
    kept = _Unanswered.from_json(stored, after)
    assert kept is not None
    assert kept.before == text

"""Process-wide memos do not keep messages alive: a message nothing else uses is collected,
while a message that lives keeps hitting its memo entries (the same objects come back)."""

from __future__ import annotations

import gc
import hashlib
import json
import pickle
import weakref
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical.freeze import Canonicalizer
from cachepilot.messages import Message, ToolCall, content_hash
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.plan.epochs import Edit, _edited
from cachepilot.sim.render import _memo_for
from cachepilot.support.identity_memo import IdentityMemo
from cachepilot.tokens import get_counter

MAINTENANCE: dict[str, Any] = {
    "prune": True,
    "protect_tool_tokens": 400,
    "protect_results": 1,
    "min_prune_tokens": 100,
    "schedule": "fixed",
}


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


class _Key:
    """A weak-referenceable stand-in for a message."""


def test_message_stays_a_plain_value() -> None:
    message = Message("assistant", "ok", tool_calls=(ToolCall("c1", "bash", "{}"),), id="m1")
    copy = pickle.loads(pickle.dumps(message))
    assert copy == message and hash(copy) == hash(message) and copy is not message
    assert weakref.ref(message)() is message


def test_content_hash_and_count_do_not_keep_the_message_alive() -> None:
    counter = get_counter()
    message = Message("tool", "x" * 5000 + " unique 41f7", tool_call_id="c1", name="bash")
    digest, tokens = content_hash(message), counter.count_message(message)
    assert content_hash(message) == digest and counter.count_message(message) == tokens
    ref = weakref.ref(message)
    del message
    gc.collect()
    assert ref() is None


def test_render_memo_forgets_the_message_but_hits_while_it_lives() -> None:
    memo = _memo_for(get_counter())
    message = Message("user", "render me once: 7c1e")
    first = memo.message(message)
    assert memo.message(message) is first
    # An equal message built again (as a framework does each call) reuses the segment.
    assert memo.message(Message("user", "render me once: 7c1e")) is first
    ref = weakref.ref(message)
    del message
    gc.collect()
    assert ref() is None


def test_edited_copies_are_stable_while_the_original_lives() -> None:
    original = Message("tool", "a long tool output " * 50, tool_call_id="c9", name="bash")
    edit = Edit(kind="stub", key="k9", text="[pruned]")
    edited = _edited(original, edit)
    assert edited.text == "[pruned]" and _edited(original, edit) is edited
    other = Edit(kind="stub", key="k9", text="[pruned again]")
    assert _edited(original, other).text == "[pruned again]"
    assert _edited(original, edit) is edited
    refs = [weakref.ref(original), weakref.ref(edited)]
    del original, edited
    gc.collect()
    assert refs[0]() is None
    _edited(Message("user", "next call"), edit)  # the entry goes on the memo's next use
    assert refs[1]() is None


def test_canonical_rewrites_are_stable_and_not_pinned() -> None:
    canon = Canonicalizer()
    original = Message("user", "first task, cwd /tmp/a")
    rewritten = Message("user", "first task, cwd <cwd>")
    assert canon._stable(original, rewritten) is rewritten
    again = Message("user", "first task, cwd <cwd>")
    assert canon._stable(original, again) is rewritten  # equal rewrite: the first object
    changed = Message("user", "first task, cwd <other>")
    assert canon._stable(original, changed) is changed
    ref = weakref.ref(original)
    del original
    gc.collect()
    assert ref() is None


def test_prepare_and_breakpoints_leave_no_message_alive_after_forget() -> None:
    pilot = CachePilot(Config(maintenance=MAINTENANCE), store=InMemoryArtifactStore())
    transcript = _transcript("lt", 8)
    _, view, _ = pilot.prepare("You are terse.", transcript, thread="lt", now=1_000.0)
    assert any(m not in transcript for m in view)  # maintenance edited some: memos were used
    pilot.cache_breakpoints("You are terse.", view, thread="lt")
    refs = [weakref.ref(m) for m in [*transcript, *view]]
    pilot.forget("lt")
    del transcript, view
    gc.collect()
    # Entries of collected messages go on the memos' next use: the next call of any thread.
    other = _transcript("next", 2)
    _, other_view, _ = pilot.prepare("You are terse.", other, thread="next", now=1_001.0)
    pilot.cache_breakpoints("You are terse.", other_view, thread="next")
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_identity_memo_drops_collected_keys_and_respects_its_bound() -> None:
    memo: IdentityMemo[_Key, str] = IdentityMemo(3)
    keys = [_Key() for _ in range(3)]
    for n, key in enumerate(keys):
        assert memo.put(key, f"v{n}") == f"v{n}"
    assert [memo.get(k) for k in keys] == ["v0", "v1", "v2"]
    del keys[1]
    gc.collect()
    assert len(memo) == 2
    memo.put(extra := _Key(), "v3")
    memo.put(_Key(), "v4")  # over the bound: the least recently used entry goes
    assert memo.get(keys[0]) is None and memo.get(extra) == "v3"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "get", "drop"]), st.integers(0, 5)), max_size=40))
def test_identity_memo_never_answers_for_another_object(ops: list[tuple[str, int]]) -> None:
    # Everything older than this example goes to the permanent generation: each collection
    # below then scans only what the example made (every key and memo entry) instead of the
    # whole heap of the test process, which cost tens of seconds over the examples.
    gc.freeze()
    try:
        memo: IdentityMemo[_Key, int] = IdentityMemo(4)
        live: dict[int, _Key] = {}
        values: dict[int, int] = {}
        for step, (op, slot) in enumerate(ops):
            if op == "put":
                key = live.setdefault(slot, _Key())
                memo.put(key, step)
                values[slot] = step
            elif op == "drop" and slot in live:
                del live[slot]
                values.pop(slot, None)
                gc.collect()
            elif op == "get":
                key = live.setdefault(slot, _Key())
                got = memo.get(key)
                # A hit is the value last put for this very object; a miss is allowed (bound).
                assert got is None or got == values.get(slot)
            assert len(memo) <= 4
    finally:
        gc.unfreeze()

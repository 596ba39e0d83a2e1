"""Pointer stubs ("same output as call X") stay true after a fold takes call X."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.pointers import is_restore, restore_pointers
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall, message_keys
from cachepilot.plan.epochs import Edit
from cachepilot.reduce.stubs import (
    duplicate_stub,
    loop_stub,
    pointed_call,
    reduced_stub,
    unchanged_read_stub,
)

SHARED = "\n".join(f"def helper_{i}(value):  # shared module line {i}" for i in range(80))


def test_pointed_call_reads_every_pointer_stub_and_nothing_else() -> None:
    assert pointed_call(duplicate_stub("call_a", "0123456789ab")) == "call_a"
    assert pointed_call(unchanged_read_stub("toolu_01X", None)) == "toolu_01X"
    assert pointed_call(loop_stub(5, "c4", "0123456789ab")) == "c4"
    assert pointed_call(duplicate_stub("x" * 90, None)) == "x" * 39 + "…"
    assert pointed_call(reduced_stub(9_000, 400, "0123456789ab")) is None
    assert pointed_call("some output\n[same output as call c1 above; full text elided]") is None
    # The wording stubs had before: still read.
    assert pointed_call("[same output as call c1 above; full text elided]") == "c1"
    assert pointed_call("[same output as call c1; full text elided]") == "c1"
    assert pointed_call("") is None


def _exchange(call_id: str, text: str, command: str = "cat shared.py") -> list[Message]:
    call = ToolCall(call_id, "bash", json.dumps({"command": command}))
    return [
        Message(role="assistant", content="", tool_calls=(call,)),
        Message(role="tool", content=text, tool_call_id=call_id, name="bash"),
    ]


def _fold(keys: list[str], first: int, last: int) -> Edit:
    return Edit(kind="fold", key=keys[first], end_key=keys[last], text="summary", ref="r" * 12)


def test_a_pointer_kept_after_a_fold_of_its_call_gets_the_content_back() -> None:
    messages = [
        Message(role="user", content="task"),
        *_exchange("a", SHARED),
        *_exchange("b", "other output", command="ls"),
        *_exchange("c", duplicate_stub("a", "0123456789ab")),
        *_exchange("d", unchanged_read_stub("c", None)),  # points at a pointer: followed
        *_exchange("e", duplicate_stub("b", None)),  # its call stays in view
    ]
    keys = message_keys(messages)
    restores = restore_pointers(messages, keys, _fold(keys, 1, 2))  # folds call a only
    assert [(e.key, e.text) for e in restores] == [(keys[6], SHARED)]  # d points at c: in view
    assert all(is_restore(e) and e.ref is None for e in restores)
    # Folding a to c: d's pointer is followed through c's to a; e's call b is folded too.
    assert [(e.key, e.text) for e in restore_pointers(messages, keys, _fold(keys, 1, 6))] == [
        (keys[8], SHARED),
        (keys[10], "other output"),
    ]
    # A fold that does not take the pointed call restores nothing.
    assert restore_pointers(messages, keys, _fold(keys, 9, 10)) == []
    assert restore_pointers(messages, keys, Edit(kind="fold", key="nope", text="s")) == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=30))
def test_restores_name_only_pointers_after_the_range_with_content(
    pairs: list[tuple[int, int]],
) -> None:
    # Random pointer graphs (call i points at call j, or shows content when i == j).
    messages = [Message(role="user", content="task")]
    for n, (kind, target) in enumerate(pairs):
        text = f"content of {n}" if kind < 2 or target >= n else duplicate_stub(f"c{target}", None)
        messages += _exchange(f"c{n}", text)
    keys = message_keys(messages)
    last = min(len(messages) - 1, 1 + 2 * (len(pairs) // 2))
    fold = _fold(keys, 1, last)
    for edit in restore_pointers(messages, keys, fold):
        index = keys.index(edit.key)
        assert index > last and messages[index].role == "tool"
        assert pointed_call(messages[index].text) is not None
        assert pointed_call(edit.text) is None
        assert edit.text in {m.text for m in messages[1 : last + 1]}


def _session(steps: int) -> tuple[CachePilot, list[list[Message]]]:
    """A long shell session that prints the same module every few steps (the ingestion
    gate points the repeats at the first one), through a real pilot's ingestion."""
    pilot = CachePilot(
        Config(maintenance=MaintenanceConfig(fold_min_tokens=1_000, fold_protect_tokens=2_000)),
        store=InMemoryArtifactStore(),
    )
    history = [Message(role="user", content="Fix the failing tests, please.")]
    snapshots = []
    for n in range(steps):
        snapshots.append(list(history))
        shared = n % 6 == 0
        command = "cat shared.py" if shared else f"pytest -k case_{n}"
        body = SHARED if shared else "\n".join(f"case {n} line {i}: {i * 7 + n}" for i in range(60))
        text = pilot.ingest("bash", {"command": command}, body, f"c{n}", "t")
        history += [
            Message(
                role="assistant",
                content=f"step {n}",
                tool_calls=(ToolCall(f"c{n}", "bash", json.dumps({"command": command})),),
            ),
            Message(role="tool", content=text, tool_call_id=f"c{n}", name="bash"),
        ]
    snapshots.append(list(history))
    return pilot, snapshots


def test_a_pointer_shown_with_its_call_stays_true_after_folds() -> None:
    # A pointer the model read while its call was in view is never left pointing at nothing:
    # the fold that takes the call brings the content back. (A repeat ingested after its
    # first output was already folded stays a pointer with its recall: see docs/audit.md.)
    pilot, snapshots = _session(60)
    true_once: set[str] = set()
    restored = 0
    for t, snapshot in enumerate(snapshots):
        _, view, _ = pilot.prepare("You are a coder.", snapshot, (), "t", now=t * 10.0)
        shown = {m.tool_call_id for m in view if m.role == "tool"}
        for message, original in _by_call(view, snapshot):
            target = pointed_call(message.text)
            if target is not None and target in shown:
                true_once.add(message.tool_call_id or "")
            elif target is not None:
                assert message.tool_call_id not in true_once, f"call {t}: {message.text}"
            restored += pointed_call(original.text) is not None and message.text == SHARED
    folds = [e for ep in pilot.state("t").plan.epochs for e in ep.edits if e.kind == "fold"]
    assert folds, "the session must fold for the test to mean anything"
    assert restored, "some pointer must have been kept after a fold of its call"


def _by_call(view: list[Message], transcript: list[Message]) -> list[tuple[Message, Message]]:
    originals = {m.tool_call_id: m for m in transcript if m.role == "tool"}
    return [(m, originals[m.tool_call_id]) for m in view if m.tool_call_id in originals]


class _Registry:
    """What `settle` reads of a lifecycle registry, recording what it is told."""

    def __init__(self) -> None:
        self.segments = {"unit": object()}
        self.stubbed: set[str] = set()

    def compact(self, folded: object, stubbed: object = ()) -> int:
        self.stubbed = set(stubbed)  # type: ignore[call-overload]
        return 0


def test_settle_counts_a_restored_result_as_shown_not_stubbed() -> None:
    from cachepilot.maintenance.settle import settle
    from cachepilot.plan.epochs import Epoch, Plan

    messages = [
        Message(role="user", content="task"),
        *_exchange("a", SHARED),
        *_exchange("b", "other output", command="ls"),
        *_exchange("c", duplicate_stub("a", None)),
    ]
    keys = message_keys(messages)
    fold = _fold(keys, 1, 2)
    restores = restore_pointers(messages, keys, fold)
    pruned = Edit(kind="stub", key=keys[4], text="[pruned]", ref="0123456789ab")
    plan = Plan(epochs=[Epoch(index=0, reason="cost-model-fold", edits=[fold, *restores, pruned])])
    registry = _Registry()
    settle(plan, registry, messages, keys)  # type: ignore[arg-type]
    assert restores and registry.stubbed == {keys[4]}

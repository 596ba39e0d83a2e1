"""Lifecycle: segmentation, rules, transitions, incremental observation, LLM estimator, traces."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot.lifecycle import (
    SYSTEM_PROMPT,
    TRANSITIONS,
    InvalidTransition,
    LifecycleDelta,
    LifecycleRegistry,
    LLMEstimator,
    RuleEstimator,
    Segment,
    SegmentState,
    can_transition,
    shell_facts,
)
from cachepilot.lifecycle.resources import looks_failed, same_path
from cachepilot.messages import Message, ReasoningPart, TextPart, ToolCall, message_keys
from cachepilot.messages import pairing_issues as pairing

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
ACTIVE, COMPLETED, EVICTABLE = SegmentState.ACTIVE, SegmentState.COMPLETED, SegmentState.EVICTABLE


# --- builders ------------------------------------------------------------------------------


def user(text: str, mid: str | None = None) -> Message:
    return Message("user", text, id=mid)


def call(cid: str, name: str, **args: Any) -> ToolCall:
    return ToolCall(cid, name, json.dumps(args))


def asst(*calls: ToolCall, text: str = "", mid: str | None = None) -> Message:
    mid = mid or (f"a-{calls[0].id}" if calls else None)
    return Message("assistant", text, tool_calls=calls, id=mid)


def result(cid: str, text: str = "ok", name: str = "tool") -> Message:
    return Message("tool", text, tool_call_id=cid, name=name, id=f"r-{cid}")


def ex(cid: str, name: str, output: str = "ok", **args: Any) -> list[Message]:
    """One exchange: an assistant message with one call, and its result."""
    return [asst(call(cid, name, **args)), result(cid, output, name)]


def unit_id(cid: str) -> str:
    return f"unit:id:a-{cid}"


def run(messages: list[Message], **rules: Any) -> LifecycleRegistry:
    """Observe everything, evaluate once with the rules, apply."""
    reg = LifecycleRegistry()
    keys = message_keys(messages)
    reg.update(messages, keys, RuleEstimator(**rules), force=True)
    return reg


def state(reg: LifecycleRegistry, cid: str) -> SegmentState:
    return reg.segments[unit_id(cid)].state


def filler(n: int, start: int = 100) -> list[Message]:
    """`n` unrelated exchanges (push earlier units out of the protected tail)."""
    out: list[Message] = []
    for i in range(start, start + n):
        out += ex(f"f{i}", "Bash", f"out {i}", command=f"echo step{i}")
    return out


# --- segmentation --------------------------------------------------------------------------


def test_tasks_and_units_segmentation() -> None:
    msgs = [
        Message("system", "be helpful", id="sys"),
        user("fix the bug in src/a.py", "u1"),
        asst(call("c1", "Read", file_path="src/a.py"), call("c2", "Read", file_path="src/b.py")),
        result("c1", "A"),
        result("c2", "B"),
        *ex("c3", "Bash", "passed", command="pytest"),
        Message("assistant", "Fixed.", id="final1"),
        user("now the docs", "u2"),
        *ex("c4", "Read", "docs", file_path="docs/x.md"),
    ]
    reg = LifecycleRegistry()
    reg.observe(msgs, message_keys(msgs))
    assert [t.id for t in reg.tasks()] == ["task:1", "task:2"]
    assert reg.unit_ids == [unit_id("c1"), unit_id("c3"), unit_id("c4")]
    parallel = reg.segments[unit_id("c1")]
    # a unit: the assistant message first, then all its results (parallel calls: one unit)
    assert parallel.keys == ["id:a-c1", "id:r-c1", "id:r-c2"]
    assert parallel.kind == "unit" and parallel.task == "task:1"
    assert parallel.created_at_call == 0
    assert {"path:src/a.py", "path:src/b.py"} <= set(parallel.resources)
    assert parallel.label == "Read src/a.py; Read src/b.py"
    assert reg.segments[unit_id("c4")].task == "task:2"
    assert reg.segments[unit_id("c4")].created_at_call == 3
    task1 = reg.segments["task:1"]
    assert task1.keys == [
        "id:u1",
        "id:a-c1",
        "id:r-c1",
        "id:r-c2",
        "id:a-c3",
        "id:r-c3",
        "id:final1",
    ]
    assert task1.label == "fix the bug in src/a.py"
    assert task1.ended_at_call == 3 and reg.segments["task:2"].created_at_call == 3
    assert reg.segment_for_key("id:r-c2") is parallel
    assert reg.segment_for_key("id:final1") is task1
    assert reg.segment_for_key("id:sys") is None and reg.outside_keys == ["id:sys"]
    assert reg.segment_for_key("nope") is None
    assert reg.calls == 4


def test_consecutive_and_continuation_user_messages_stay_in_one_task() -> None:
    msgs = [
        user("do X", "u1"),
        user("<RUNTIME_INFORMATION> hosts", "u1b"),  # right after a user message: same task
        *ex("c1", "Bash", command="ls"),
        user("Please always provide EXACTLY ONE action in triple backticks.", "u2"),
        *ex("c2", "Bash", command="ls -la"),
        user("continue", "u3"),
        *ex("c3", "Bash", command="pwd"),
        user("something else now", "u4"),
    ]
    reg = LifecycleRegistry()
    reg.observe(msgs, message_keys(msgs))
    assert [t.id for t in reg.tasks()] == ["task:1", "task:2"]
    assert {reg.segments[unit_id(c)].task for c in ("c1", "c2", "c3")} == {"task:1"}
    with pytest.raises(ValueError, match="continue_patterns"):
        LifecycleRegistry(continue_patterns=["("])


def test_work_before_any_user_message_goes_to_a_preamble_task() -> None:
    msgs = [*ex("c1", "Bash", command="ls"), user("hi", "u1")]
    reg = LifecycleRegistry()
    reg.observe(msgs, message_keys(msgs))
    assert reg.segments[unit_id("c1")].task == "task:0"
    assert reg.segments["task:0"].ended_at_call == 1


def test_reasoning_stays_with_its_message_and_units_never_orphan() -> None:
    thinking = Message(
        "assistant",
        (ReasoningPart("let me look", signature="sig"), TextPart("reading")),
        tool_calls=(call("c1", "Read", file_path="a.py"),),
        id="a-c1",
    )
    msgs = [user("go", "u1"), thinking, result("c1", "x")]
    reg = LifecycleRegistry()
    reg.observe(msgs, message_keys(msgs))
    assert reg.segments[unit_id("c1")].keys == ["id:a-c1", "id:r-c1"]


def test_pending_results_keep_a_unit_open_until_they_arrive() -> None:
    a = asst(call("c1", "Read", file_path="a.py"), call("c2", "Read", file_path="b.py"))
    reg = LifecycleRegistry()
    first = [user("go", "u1"), a, result("c1")]
    reg.observe(first, message_keys(first))
    unit = reg.segments[unit_id("c1")]
    assert unit.pending == ["c2"]
    delta = LifecycleDelta(segment_id=unit.id, to_state=EVICTABLE)
    assert reg.check(delta) == "unit still waits for tool results"
    assert reg.apply([delta]) == []
    full = [*first, result("c2")]
    reg.observe(full, message_keys(full))
    assert unit.pending == [] and unit.keys == ["id:a-c1", "id:r-c1", "id:r-c2"]
    assert reg.apply([delta]) == [delta]


def test_an_unanswered_call_is_closed_by_the_next_message() -> None:
    msgs = [user("go", "u1"), asst(call("c1", "Read", file_path="a.py")), user("stop", "u2")]
    reg = LifecycleRegistry()
    reg.observe(msgs, message_keys(msgs))
    assert reg.segments[unit_id("c1")].pending == []


# --- supersession --------------------------------------------------------------------------


def test_reread_supersedes_the_earlier_read() -> None:
    msgs = [
        user("go", "u1"),
        *ex("c1", "Read", "v1", file_path="/repo/src/a.py"),
        *ex("c2", "Read", "v1", file_path="src/a.py"),  # same file, relative spelling
        *filler(3),
    ]
    reg = run(msgs)
    unit = reg.segments[unit_id("c1")]
    assert unit.state is EVICTABLE and unit.superseded_by == unit_id("c2")
    assert unit.reason.startswith("superseded: read /repo/src/a.py")
    assert state(reg, "c2") is ACTIVE


def test_edit_supersedes_an_earlier_read_but_not_an_earlier_edit() -> None:
    msgs = [
        user("go", "u1"),
        *ex("c1", "Read", "v1", file_path="a.py"),
        *ex("c2", "Edit", "ok", file_path="a.py", old_string="x", new_string="y"),
        *ex("c3", "Edit", "ok", file_path="a.py", old_string="y", new_string="z"),
        *filler(3),
    ]
    reg = run(msgs)
    assert state(reg, "c1") is EVICTABLE  # its content is stale after the edit
    assert state(reg, "c2") is ACTIVE  # what was changed stays useful
    # a whole write (or a whole re-read) supersedes earlier edits
    msgs += [*ex("c9", "Write", "ok", file_path="a.py", content="new"), *filler(3, 200)]
    reg = run(msgs)
    assert state(reg, "c2") is EVICTABLE and state(reg, "c3") is EVICTABLE
    # the option keeps reads alive across edits
    reg = LifecycleRegistry(edit_supersedes_read=False)
    reg.update(msgs[:9] + filler(3), None, RuleEstimator(), force=True)
    assert state(reg, "c1") is ACTIVE


def test_failed_edit_does_not_supersede_the_read() -> None:
    msgs = [
        user("go", "u1"),
        *ex("c1", "Read", "v1", file_path="a.py"),
        *ex("c2", "Edit", "<tool_use_error>String not found", file_path="a.py", old_string="q"),
        *ex("c3", "Edit", "<tool_use_error>String not found", file_path="a.py", old_string="r"),
        *filler(3),
    ]
    reg = run(msgs)
    assert state(reg, "c1") is ACTIVE
    assert state(reg, "c2") is EVICTABLE  # a repeated failed attempt supersedes the first


def test_rerun_of_the_same_command_supersedes() -> None:
    msgs = [
        user("go", "u1"),
        *ex("c1", "bash", "FAILED", command="cd /testbed && python reproduce.py 2>&1 | tail -20"),
        *ex("c2", "bash", "ok", command="python reproduce.py -v"),  # a different command
        *ex("c3", "bash", "ok", command="python reproduce.py"),
        *filler(3),
    ]
    reg = run(msgs)
    assert state(reg, "c1") is EVICTABLE
    assert reg.segments[unit_id("c1")].superseded_by == unit_id("c3")
    assert state(reg, "c2") is ACTIVE


def test_partial_reads_of_different_ranges_do_not_supersede_each_other() -> None:
    msgs = [
        user("go", "u1"),
        *ex("c1", "bash", "l1", command="sed -n '1,20p' src/x.py"),
        *ex("c2", "bash", "l2", command="sed -n '40,60p' src/x.py"),
        *ex("c3", "bash", "l1", command="nl -ba src/x.py | sed -n '1,20p'"),
        *ex("c4", "Read", "l2", file_path="/w/src/x.py", offset=40, limit=20),
        *filler(3),
    ]
    reg = run(msgs)
    assert state(reg, "c1") is ACTIVE and state(reg, "c2") is ACTIVE
    msgs += [*ex("c5", "bash", "all", command="cat src/x.py"), *filler(3, 200)]
    reg = run(msgs)
    assert all(state(reg, c) is EVICTABLE for c in ("c1", "c2", "c3", "c4"))


def test_a_parallel_unit_needs_every_call_superseded() -> None:
    msgs = [
        user("go", "u1"),
        asst(call("c1", "Read", file_path="a.py"), call("c2", "Read", file_path="b.py")),
        result("c1"),
        result("c2"),
        *ex("c3", "Read", file_path="a.py"),
        *filler(3),
    ]
    reg = run(msgs)
    assert state(reg, "c1") is ACTIVE
    msgs += [*ex("c4", "Read", file_path="b.py"), *filler(3, 200)]
    assert state(run(msgs), "c1") is EVICTABLE


def test_supersession_in_editor_and_swe_agent_tools() -> None:
    msgs = [
        user("go", "u1"),
        *ex("c1", "str_replace_editor", "view", command="view", path="/w/p/src/m.c"),
        *ex("c2", "str_replace_editor", "ok", command="str_replace", path="/w/p/src/m.c"),
        *ex("c3", "open", "[File: x.py]", path="x.py"),
        *ex("c4", "edit", "Replaced", search="a", replace="b"),  # edits the open file
        *filler(3),
    ]
    reg = run(msgs)
    assert state(reg, "c1") is EVICTABLE and state(reg, "c3") is EVICTABLE
    assert reg.segments[unit_id("c3")].superseded_by == unit_id("c4")


# --- task completion and references --------------------------------------------------------


def _two_tasks(second: list[Message]) -> list[Message]:
    return [
        user("task one", "u1"),
        *ex("c1", "Read", "config here", file_path="conf/settings.toml"),
        *ex("c2", "get_user", '{"payment": "credit_card_4421486"}', user_id="mia_li_3668"),
        Message("assistant", "Done.", id="done1"),
        user("task two", "u2"),
        *second,
    ]


def test_completed_task_units_become_evictable_after_grace() -> None:
    msgs = _two_tasks(filler(3))
    reg = run(msgs, task_eviction=False)
    assert reg.segments["task:1"].state is COMPLETED
    assert state(reg, "c1") is EVICTABLE and state(reg, "c2") is EVICTABLE
    assert "not referenced" in reg.segments[unit_id("c1")].reason
    # within the grace period they are only completed
    reg = run(_two_tasks(filler(3)), grace_calls=10)
    assert state(reg, "c1") is COMPLETED
    assert reg.segments[unit_id("c1")].reason.endswith("grace")
    assert reg.segments["task:1"].state is COMPLETED


def test_a_finished_task_is_evictable_only_when_all_its_work_is() -> None:
    reg = run(_two_tasks(filler(3)))
    task = reg.segments["task:1"]
    assert task.state is EVICTABLE
    assert "all its work evictable" in task.reason
    assert reg.evictable_tasks() == [task]
    assert reg.segments["task:2"].state is ACTIVE  # the current task never is
    # one unit still referenced by the next task keeps the whole task
    second = [Message("assistant", "Checking conf/settings.toml again", id="m1"), *filler(3)]
    reg = run(_two_tasks(second))
    assert state(reg, "c1") is COMPLETED
    assert reg.segments["task:1"].state is COMPLETED
    assert reg.evictable_tasks() == []


def test_later_references_keep_completed_units_alive() -> None:
    second = [
        Message("assistant", "Checking conf/settings.toml again", id="m1"),  # path in text
        *ex("c3", "pay", "ok", payment_id="credit_card_4421486"),  # an id from c2's *output*
        *filler(3),
    ]
    reg = run(_two_tasks(second))
    assert state(reg, "c1") is COMPLETED and state(reg, "c2") is COMPLETED
    assert "referenced at call" in reg.segments[unit_id("c1")].reason
    # without output references, only argument resources count
    reg = LifecycleRegistry(output_refs=False)
    reg.update(_two_tasks(second), None, RuleEstimator(), force=True)
    assert state(reg, "c2") is EVICTABLE
    # a reference ages out of the window
    msgs = _two_tasks([*second, *filler(20, 300)])
    assert state(run(msgs, reference_window=12), "c1") is EVICTABLE
    assert state(run(msgs, reference_window=None), "c1") is COMPLETED


def test_agent_declaring_done_completes_the_task_and_resuming_reopens_it() -> None:
    msgs = [
        user("go", "u1"),
        *ex("c1", "bash", "x", command="ls"),
        *ex("c2", "bash", "x", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"),
    ]
    reg = LifecycleRegistry()
    est = RuleEstimator(protect_last_units=0, grace_calls=0)
    reg.update(msgs, None, est, force=True)
    assert reg.segments["task:1"].state is COMPLETED
    assert reg.segments["task:1"].reason.startswith("agent declared done")
    assert state(reg, "c1") is EVICTABLE
    # more work in the same task (no user turn): the task and its completed units reopen
    reg = LifecycleRegistry()
    est = RuleEstimator(protect_last_units=2, grace_calls=0)
    reg.update(msgs, None, est, force=True)
    assert state(reg, "c2") is COMPLETED
    more = [*msgs, *ex("c3", "bash", "y", command="git status")]
    applied = reg.update(more, None, est, force=True)
    assert reg.segments["task:1"].state is ACTIVE
    assert state(reg, "c2") is ACTIVE
    assert {(d.segment_id, d.to_state) for d in applied} >= {
        ("task:1", ACTIVE),
        (unit_id("c2"), ACTIVE),
    }
    # a finishing tool declares done too
    reg = run([user("go", "u1"), *ex("c1", "finish", "bye", message="done")])
    assert reg.segments["task:1"].state is COMPLETED


def test_protected_tail_is_never_evicted() -> None:
    msgs = [user("go", "u1")]
    for i in range(5):
        msgs += ex(f"c{i}", "bash", "x", command="pytest")  # each re-run supersedes the last
    reg = run(msgs, protect_last_units=3)
    assert [state(reg, f"c{i}") for i in range(5)] == [EVICTABLE, EVICTABLE, ACTIVE, ACTIVE, ACTIVE]
    reg = run(msgs, protect_last_units=0)
    assert [state(reg, f"c{i}") for i in range(5)] == [EVICTABLE] * 4 + [ACTIVE]
    with pytest.raises(ValueError):
        RuleEstimator(protect_last_units=-1)
    with pytest.raises(ValueError):
        RuleEstimator(reference_window=0)


def test_evictable_lists_whole_units_oldest_first_and_honours_exclusions() -> None:
    msgs = [user("go", "u1")]
    for i in range(5):
        msgs += ex(f"c{i}", "bash", "x", command="pytest")
    reg = run(msgs, protect_last_units=1)
    assert [u.id for u in reg.evictable()] == [unit_id(f"c{i}") for i in range(4)]
    assert [u.id for u in reg.evictable(exclude_keys={"id:r-c1"})] == [
        unit_id(c) for c in ("c0", "c2", "c3")
    ]
    # dropping every evictable unit's messages keeps tool-call pairing intact
    gone = {k for u in reg.evictable() for k in u.keys}
    kept = [m for m, k in zip(msgs, message_keys(msgs), strict=True) if k not in gone]
    assert pairing(kept) == []
    assert reg.stats()["unit_evictable"] == 4


# --- transitions ---------------------------------------------------------------------------


def test_transition_table() -> None:
    assert can_transition(ACTIVE, COMPLETED) and can_transition(ACTIVE, EVICTABLE)
    assert can_transition(COMPLETED, EVICTABLE) and can_transition(COMPLETED, ACTIVE)
    assert not any(can_transition(EVICTABLE, s) for s in SegmentState)
    assert not any(can_transition(s, s) for s in SegmentState)
    assert TRANSITIONS[EVICTABLE] == frozenset()


def _registry_with_units(n: int = 3) -> LifecycleRegistry:
    msgs = [user("go", "u1")]
    for i in range(n):
        msgs += ex(f"c{i}", "bash", "x", command=f"cmd{i}")
    reg = LifecycleRegistry()
    reg.observe(msgs, message_keys(msgs))
    return reg


def test_apply_skips_invalid_deltas_and_strict_raises(caplog: pytest.LogCaptureFixture) -> None:
    reg = _registry_with_units()
    u0, u1 = unit_id("c0"), unit_id("c1")
    deltas = [
        LifecycleDelta(segment_id=u0, to_state=EVICTABLE, reason="r"),
        LifecycleDelta(segment_id=u0, to_state=ACTIVE),  # out of the terminal state
        LifecycleDelta(segment_id="unit:nope", to_state=COMPLETED),
        LifecycleDelta(segment_id=u1, to_state=EVICTABLE, from_state=COMPLETED),  # stale
        LifecycleDelta(segment_id=u1, to_state=ACTIVE),  # no change
    ]
    with caplog.at_level(logging.DEBUG, logger="cachepilot.lifecycle"):
        applied = reg.apply(deltas)
    assert applied == deltas[:1]
    assert reg.segments[u0].state is EVICTABLE and reg.segments[u0].reason == "r"
    assert reg.segments[u1].state is ACTIVE
    assert sum("skipped" in r.message for r in caplog.records) == 3
    assert all(r.levelno == logging.DEBUG for r in caplog.records)
    with pytest.raises(InvalidTransition) as err:
        reg.apply_strict(
            [
                LifecycleDelta(segment_id=u1, to_state=COMPLETED),
                LifecycleDelta(segment_id=u0, to_state=ACTIVE),
            ]
        )
    assert err.value.segment_id == u0 and err.value.current is EVICTABLE
    assert reg.segments[u1].state is ACTIVE  # all or nothing
    with pytest.raises(InvalidTransition):
        reg.apply_strict([LifecycleDelta(segment_id="x", to_state=ACTIVE)])
    ok = [
        LifecycleDelta(segment_id=u1, to_state=COMPLETED),
        LifecycleDelta(segment_id=u1, to_state=EVICTABLE),
    ]
    assert reg.apply_strict(ok) == ok


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),  # segment index (4 and 5: unknown ids)
            st.sampled_from(list(SegmentState)),
            st.one_of(st.none(), st.sampled_from(list(SegmentState))),
        ),
        max_size=40,
    )
)
def test_random_delta_sequences_only_follow_the_table(
    ops: list[tuple[int, SegmentState, SegmentState | None]],
) -> None:
    reg = _registry_with_units(3)
    ids = [*reg.unit_ids, "task:1", "unit:ghost", "task:9"]
    history: dict[str, list[SegmentState]] = {i: [reg.segments[i].state] for i in ids[:4]}
    for index, target, expected in ops:
        delta = LifecycleDelta(segment_id=ids[index], to_state=target, from_state=expected)
        before = reg.segments[ids[index]].state if ids[index] in reg.segments else None
        applied = reg.apply([delta])
        if applied:
            assert before is not None and can_transition(before, target)
            assert expected is None or expected is before
            history[ids[index]].append(target)
        elif before is not None:
            assert reg.segments[ids[index]].state is before
    for seq in history.values():
        assert all(can_transition(a, b) for a, b in itertools.pairwise(seq))
        if EVICTABLE in seq:
            assert seq[-1] is EVICTABLE and seq.count(EVICTABLE) == 1  # terminal


# --- incremental observation, batching, JSON -----------------------------------------------


def _session() -> list[Message]:
    return [
        Message("system", "sys", id="sys"),
        *_two_tasks(
            [
                *ex("c3", "Read", "v", file_path="conf/settings.toml"),
                asst(call("c4", "bash", command="pytest"), call("c5", "bash", command="ls")),
                result("c4", "FAILED test_x"),
                result("c5", "a b"),
                *ex("c6", "bash", "ok", command="pytest"),
                *filler(4),
            ]
        ),
    ]


def test_observe_is_incremental_and_idempotent() -> None:
    msgs = _session()
    keys = message_keys(msgs)
    whole = LifecycleRegistry()
    whole.observe(msgs, keys)
    step = LifecycleRegistry()
    for n in range(len(msgs) + 1):
        step.observe(msgs[:n], keys[:n])
    assert step.model_dump() == whole.model_dump()
    # each message processed exactly once: linear in the transcript however often it is fed
    assert step._idx().processed == len(msgs)
    step.observe(msgs, keys)
    step.observe(msgs[:5], keys[:5])  # a shorter (older) view: nothing new
    assert step._idx().processed == len(msgs)
    assert step.model_dump() == whole.model_dump()
    with pytest.raises(ValueError, match="align"):
        step.observe(msgs, keys[:-1])


def test_due_and_update_batch_every_b_calls() -> None:
    msgs = _session()
    keys = message_keys(msgs)
    reg = LifecycleRegistry()
    assert not reg.due(2) and reg.due(3) and reg.due(4, every=4)
    with pytest.raises(ValueError):
        reg.due(3, every=0)
    evaluations = 0
    for i, message in enumerate(msgs):
        if message.role == "assistant":
            before = reg.evaluated_at_call
            reg.update(msgs[:i], keys[:i], RuleEstimator(), every=3)
            evaluations += reg.evaluated_at_call != before
    assert evaluations == reg.calls // 3
    assert reg.evaluated_at_call % 3 == 0
    with pytest.raises(ValueError):
        reg.update(msgs, keys, RuleEstimator(), every=0)


def test_json_round_trip_and_continuation_after_loading() -> None:
    msgs = _session()
    keys = message_keys(msgs)
    cut = len(msgs) - 6
    reg = LifecycleRegistry()
    reg.update(msgs[:cut], keys[:cut], RuleEstimator(), force=True)
    blob = reg.model_dump_json()
    loaded = LifecycleRegistry.model_validate_json(blob)
    assert loaded.model_dump() == reg.model_dump()
    assert (
        LifecycleRegistry.model_validate_json(
            reg.model_dump_json(exclude_defaults=True)
        ).model_dump()
        == reg.model_dump()
    )
    assert loaded.segment_for_key(keys[3]) == reg.segment_for_key(keys[3])
    a = reg.update(msgs, keys, RuleEstimator(), force=True)
    b = loaded.update(msgs, keys, RuleEstimator(), force=True)
    assert a == b
    assert loaded.model_dump() == reg.model_dump()


def test_update_is_deterministic() -> None:
    msgs = _session()
    dumps = {run(msgs).model_dump_json() for _ in range(3)}
    assert len(dumps) == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("user"), st.sampled_from(["go", "continue", "next: a.py"])),
            st.tuples(st.just("text"), st.sampled_from(["ok", "see a.py", "done"])),
            st.tuples(
                st.just("calls"),
                st.lists(
                    st.sampled_from(
                        [
                            ("Read", {"file_path": "a.py"}),
                            ("Edit", {"file_path": "a.py", "old_string": "x"}),
                            ("bash", {"command": "pytest"}),
                            ("bash", {"command": "cat b.py"}),
                            ("Write", {"file_path": "b.py", "content": "c"}),
                        ]
                    ),
                    min_size=1,
                    max_size=3,
                ),
            ),
        ),
        max_size=25,
    ),
    st.integers(0, 3),
)
def test_random_transcripts_keep_units_whole(steps: list[Any], protect: int) -> None:
    msgs: list[Message] = []
    n = 0
    for kind, payload in steps:
        if kind == "user":
            msgs.append(Message("user", payload))
        elif kind == "text":
            msgs.append(Message("assistant", payload))
        else:
            calls = []
            for name, args in payload:
                n += 1
                calls.append(ToolCall(f"k{n}", name, json.dumps(args)))
            msgs.append(Message("assistant", "", tool_calls=tuple(calls)))
            msgs.extend(Message("tool", f"out {c.id}", tool_call_id=c.id) for c in calls)
    keys = message_keys(msgs)
    reg = LifecycleRegistry()
    est = RuleEstimator(protect_last_units=protect, grace_calls=0)
    for i, m in enumerate(msgs):
        if m.role == "assistant":
            reg.update(msgs[:i], keys[:i], est, every=1)
    reg.update(msgs, keys, est, force=True)
    position = {k: i for i, k in enumerate(keys)}
    for unit in reg.units():
        head = msgs[position[unit.keys[0]]]
        assert head.role == "assistant" and head.tool_calls
        answered = [msgs[position[k]].tool_call_id for k in unit.keys[1:]]
        assert answered == [c.id for c in head.tool_calls]
    assert all(
        u.id not in {x.id for x in reg.evictable()} for u in reg.units()[-protect or 10**9 :]
    )
    gone = {k for u in reg.evictable() for k in u.keys}
    assert pairing([m for m, k in zip(msgs, keys, strict=True) if k not in gone]) == []


# --- resources -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat src/a.py", [("read", "src/a.py", "")]),
        ("nl -ba a/b.py | sed -n '150,160p'", [("read", "a/b.py", "sed -n 150,160p")]),
        ("head -n 40 x.py | tail -n 10", [("read", "x.py", "head -n 40 | tail -n 10")]),
        ("cd /testbed && sed -n '1,9p' m.py", [("read", "m.py", "sed 1,9p")]),
        ("sed -i 's/a/b/' pkg/m.py", [("edit", "pkg/m.py", "")]),
        ("cat <<'EOF' > t.py\nprint(1)\nEOF", [("write", "t.py", "")]),
        ("echo hi >> log.txt", [("edit", "log.txt", "")]),
        ("rm a.py b.py", [("write", "a.py", ""), ("write", "b.py", "")]),
        (
            "cd /x && python -m pytest t.py 2>&1 | tail -5",
            [("run", "bash:python -m pytest t.py", "")],
        ),
        ("cat f.py | grep -n foo", [("run", "bash:cat f.py | grep -n foo", "")]),
        ("python -c 'import x; x.go()' > out.txt", None),
        ("unbalanced 'quote", [("run", "bash:unbalanced 'quote", "")]),
    ],
)
def test_shell_commands(command: str, expected: list[tuple[str, str, str]] | None) -> None:
    effects, _paths, done = shell_facts("bash", command)
    got = [(e.op, e.target, e.span) for e in effects]
    if expected is None:
        assert ("write", "out.txt", "") in got and any(op == "run" for op, _, _ in got)
    else:
        assert got == expected
    assert not done
    assert shell_facts("bash", "echo MINI_SWE_AGENT_FINAL_OUTPUT")[2]


def test_path_identity_and_failure_detection() -> None:
    assert same_path("/testbed/src/a.py", "src/a.py")
    assert same_path("/testbed/x.py", "x.py")
    assert not same_path("/a/b/c/x.py", "x.py")  # too deep to trust a bare name
    assert not same_path("src/a.py", "lib/a.py")
    assert looks_failed("<returncode>1</returncode>\n<output>boom")
    assert looks_failed("ERROR: No replacement was performed")
    assert looks_failed("x\n[Command finished with exit code 2]")
    assert not looks_failed("<returncode>0</returncode>\n<output>fine")
    assert not looks_failed("all good")


# --- LLM estimator -------------------------------------------------------------------------


class FakeChatModel:
    """LangChain-style: `.invoke(messages)` returns an object with `.content`."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.prompts: list[Any] = []

    def invoke(self, messages: Any) -> Any:
        self.prompts.append(messages)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(content=answer)


class FakeAsyncChatModel(FakeChatModel):
    async def ainvoke(self, messages: Any) -> Any:
        return self.invoke(messages)


class FakeOpenAI:
    """OpenAI-style client: `client.chat.completions.create(...)`."""

    def __init__(self, answer: str, *, is_async: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        reply = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=answer))])

        def create(**kwargs: Any) -> Any:
            self.calls.append(kwargs)
            return reply

        async def acreate(**kwargs: Any) -> Any:
            return create(**kwargs)

        self.chat = SimpleNamespace(
            completions=SimpleNamespace(create=acreate if is_async else create)
        )


def _llm_setup() -> tuple[LifecycleRegistry, list[Message], list[str]]:
    msgs = [
        user("task one", "u1"),
        *ex("c1", "Read", "first line\nsecond", file_path="a.py"),
        *ex("c2", "bash", "ok", command="pytest"),
        *ex("c3", "bash", "ok", command="ls"),
        Message("assistant", "Done.", id="d1"),
        user("task two", "u2"),
        *filler(3),
    ]
    keys = message_keys(msgs)
    reg = LifecycleRegistry()
    reg.observe(msgs, keys)
    return reg, msgs, keys


VALID = json.dumps(
    {
        "deltas": [
            {"segment_id": "T1", "to_state": "completed", "reason": "handled"},
            {"segment_id": "U1", "to_state": "evictable", "reason": "read done"},
            {"segment_id": "U2", "to_state": "completed", "reason": "keep"},
            {"segment_id": "U2", "to_state": "evictable", "reason": "then evict"},
        ]
    }
)


def test_llm_estimator_with_a_langchain_style_model() -> None:
    reg, msgs, keys = _llm_setup()
    model = FakeChatModel(VALID)
    est = LLMEstimator(model)
    deltas = est.evaluate(reg, msgs, keys)
    assert [(d.segment_id, d.to_state) for d in deltas] == [
        ("task:1", COMPLETED),
        (unit_id("c1"), EVICTABLE),
        (unit_id("c2"), COMPLETED),
        (unit_id("c2"), EVICTABLE),
    ]
    assert all(d.source == "llm" for d in deltas)
    assert reg.apply(deltas) == deltas
    prompt = model.prompts[0]
    assert prompt[0] == {"role": "system", "content": SYSTEM_PROMPT}
    body = prompt[1]["content"]
    assert 'U1 active, call 0, 17 chars: Read a.py -> "first line"' in body
    assert "U4" not in body  # protected tail units are not listed
    assert "[tool Bash]" in body and "Current task: T2" in body
    assert '[assistant] calls: Bash({"command": "echo step102"})' in body


def test_llm_prompt_is_deterministic() -> None:
    reg, msgs, keys = _llm_setup()
    est = LLMEstimator(FakeChatModel())
    first = est.build_prompt(reg, msgs, keys)
    reg2 = LifecycleRegistry.model_validate_json(reg.model_dump_json())
    assert est.build_prompt(reg2, msgs, keys) == first
    assert first.aliases["U1"] == unit_id("c1") and first.aliases["T2"] == "task:2"


@pytest.mark.parametrize(
    "answer",
    [
        "not json at all",
        '{"deltas": "nope"}',
        "[1, 2",
        "",
    ],
)
def test_llm_malformed_answer_gives_no_deltas_and_one_warning(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    reg, msgs, keys = _llm_setup()
    with caplog.at_level(logging.DEBUG, logger="cachepilot.lifecycle"):
        assert LLMEstimator(FakeChatModel(answer)).evaluate(reg, msgs, keys) == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "malformed" in warnings[0].getMessage()
    assert answer[:5] not in warnings[0].getMessage() or not answer  # no payload logged


def test_llm_drops_unknown_ids_invalid_transitions_and_protected_units() -> None:
    reg, msgs, keys = _llm_setup()
    reg.apply([LifecycleDelta(segment_id=unit_id("c3"), to_state=EVICTABLE)])
    answer = (
        "```json\n"
        + json.dumps(
            {
                "deltas": [
                    {"segment_id": "U99", "to_state": "evictable"},
                    {"segment_id": "unit:ghost", "to_state": "completed"},
                    {"segment_id": unit_id("c3"), "to_state": "active"},  # out of terminal
                    {"segment_id": "U5", "to_state": "evictable"},  # protected tail
                    {"segment_id": "U1", "to_state": "deleted"},  # not a state
                    {"segment_id": unit_id("c2"), "to_state": "evictable", "reason": "ok"},
                ]
            }
        )
        + "\n```"
    )
    deltas = LLMEstimator(FakeChatModel(answer)).evaluate(reg, msgs, keys)
    assert [(d.segment_id, d.to_state) for d in deltas] == [(unit_id("c2"), EVICTABLE)]


def test_llm_content_blocks_and_bare_lists_are_accepted() -> None:
    reg, msgs, keys = _llm_setup()
    blocks = [{"type": "text", "text": '[{"segment_id": "U1", "to_state": "evictable"}]'}]
    deltas = LLMEstimator(FakeChatModel(blocks)).evaluate(reg, msgs, keys)
    assert [d.segment_id for d in deltas] == [unit_id("c1")]


def test_llm_call_failure_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    reg, msgs, keys = _llm_setup()
    with caplog.at_level(logging.WARNING):
        est = LLMEstimator(FakeChatModel(RuntimeError("secret payload")))
        assert est.evaluate(reg, msgs, keys) == []
    assert "RuntimeError" in caplog.text and "secret payload" not in caplog.text


def test_llm_with_an_openai_style_client() -> None:
    reg, msgs, keys = _llm_setup()
    client = FakeOpenAI(VALID)
    est = LLMEstimator(client, model_name="gpt-x", request_options={"temperature": 0})
    deltas = est.evaluate(reg, msgs, keys)
    assert len(deltas) == 4
    sent = client.calls[0]
    assert sent["model"] == "gpt-x" and sent["temperature"] == 0
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["messages"][0]["role"] == "system"
    with pytest.raises(ValueError, match="model_name"):
        LLMEstimator(client)
    with pytest.raises(ValueError, match="LangChain"):
        LLMEstimator(object())


def test_llm_async_paths(caplog: pytest.LogCaptureFixture) -> None:
    reg, msgs, keys = _llm_setup()
    lc = LLMEstimator(FakeAsyncChatModel(VALID))
    assert len(asyncio.run(lc.aevaluate(reg, msgs, keys))) == 4
    client = FakeOpenAI(VALID, is_async=True)
    oa = LLMEstimator(client, model_name="m")
    assert len(asyncio.run(oa.aevaluate(reg, msgs, keys))) == 4
    sync_client = LLMEstimator(FakeOpenAI(VALID), model_name="m")
    assert len(asyncio.run(sync_client.aevaluate(reg, msgs, keys))) == 4  # run in a thread
    with caplog.at_level(logging.WARNING):
        assert oa.evaluate(reg, msgs, keys) == []  # an async client from the sync path
    assert "aevaluate" in caplog.text
    # the registry's async update uses aevaluate and applies the result
    lc2 = LLMEstimator(FakeAsyncChatModel(VALID))
    applied = asyncio.run(reg.aupdate(msgs, keys, lc2, force=True))
    assert [d.segment_id for d in applied][:2] == ["task:1", unit_id("c1")]
    assert reg.segments[unit_id("c1")].state is EVICTABLE


def test_llm_skips_the_call_when_nothing_can_change() -> None:
    msgs = [user("go", "u1"), *ex("c1", "bash", command="ls")]
    reg = LifecycleRegistry()
    reg.observe(msgs, message_keys(msgs))
    for seg in list(reg.segments.values()):
        reg.apply([LifecycleDelta(segment_id=seg.id, to_state=EVICTABLE)])
    model = FakeChatModel()
    assert LLMEstimator(model).evaluate(reg, msgs) == []
    assert model.prompts == []


def test_core_lifecycle_imports_no_framework() -> None:
    code = (
        "import sys, cachepilot.lifecycle\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "{'langchain', 'langchain_core', 'langgraph', 'agents', 'openai'}]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- real traces ---------------------------------------------------------------------------


@pytest.mark.traces
def test_rule_estimator_on_real_traces(capsys: pytest.CaptureFixture[str]) -> None:
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not found at {TRACES}")
    from cachepilot.tokens import get_counter
    from cachepilot_bench.traces import load_paths

    sessions = load_paths([TRACES])
    counter = get_counter()
    total: dict[str, int] = defaultdict(int)
    evictable: dict[str, int] = defaultdict(int)
    processed = messages_seen = 0
    elapsed = 0.0
    for session in sessions:
        msgs = session.messages
        keys = message_keys(msgs)
        reg = LifecycleRegistry()
        est = RuleEstimator()
        started = time.perf_counter()
        for index in session.assistant_indices:  # each model call: its request, B = 3
            reg.update(msgs[:index], keys[:index], est, every=3)
        reg.update(msgs, keys, est, force=True)
        elapsed += time.perf_counter() - started
        processed += reg._idx().processed
        messages_seen += len(msgs)
        gone = {k for unit in reg.evictable() for k in unit.keys}
        for key, message in zip(keys, msgs, strict=True):
            if message.role == "tool":
                tokens = counter.count_message(message, key)
                total[session.source] += tokens
                evictable[session.source] += tokens if key in gone else 0
        # every unit is whole: its assistant message and exactly its results
        assert all(isinstance(u, Segment) and u.keys for u in reg.units())
    with capsys.disabled():
        print("\nlifecycle rule estimator: tool-output tokens evictable by session end")
        for source in sorted(total):
            share = evictable[source] / max(1, total[source])
            print(f"  {source:20s} {evictable[source]:>9,d} / {total[source]:>9,d} = {share:.3f}")
        overall = sum(evictable.values()) / max(1, sum(total.values()))
        print(f"  {'all':20s} share {overall:.3f}; {elapsed * 1e6 / messages_seen:.0f} µs/message")
    assert overall > 0
    assert all(evictable[s] > 0 for s in total)
    # linear: however often a growing transcript is fed, each message is processed once
    assert processed == messages_seen

"""Nothing the model works with is removed without a way back in view (DESIGN §2.7).

Tool-less exchanges (a plain chat, files and few-shot examples sent as messages) are
conversation, not finished work: no fold takes them. A user message or reply longer than a
task statement (pasted content) stays too. Without the recall tool no fold takes any user
message or reply: "elided" would mean gone.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.fold.keep import fold_begin, fold_stretches, is_conversation
from cachepilot.lifecycle import LifecycleDelta, LifecycleRegistry, RuleEstimator, SegmentState
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall, pairing_issues

SYSTEM = "You are a helpful assistant."
PASTED = "".join(
    f"def handler_{i}(request):\n    return respond(request, code={i * 7 + 3})\n"
    for i in range(1_700)
)
"""A file the user pastes (about 20 K tokens)."""
HOUR = 3_600.0
"""Between calls: longer than any provider cache TTL, so every call is a free rewrite."""


def _plain_chat(turns: int) -> list[list[Message]]:
    """A chat without tools: the file is pasted in turn 2; the transcript before each call."""
    history: list[Message] = [Message("user", "Hi! I will paste a module, then ask about it.")]
    snapshots = [list(history)]
    history.append(Message("assistant", "Sure, paste it."))
    history.append(Message("user", "Here it is:\n\n" + PASTED))
    snapshots.append(list(history))
    history.append(Message("assistant", "Got it: 1,700 request handlers."))
    for n in range(3, turns + 1):
        history.append(Message("user", f"What code does handler_{n * 100} return?"))
        snapshots.append(list(history))
        history.append(Message("assistant", f"It returns {n * 100 * 7 + 3}."))
    return snapshots


def _run(
    pilot: CachePilot, snapshots: list[list[Message]], *, recall: bool, gap: float = HOUR
) -> list[list[Message]]:
    views = []
    for t, snapshot in enumerate(snapshots):
        _, view, _ = pilot.prepare(SYSTEM, snapshot, (), "t", now=t * gap, recall=recall)
        assert pairing_issues(view) == []
        views.append(view)
    return views


@pytest.mark.parametrize("recall", [True, False])
@pytest.mark.parametrize("gap", [HOUR, 5.0])
def test_a_pasted_file_stays_in_view_in_a_plain_chat(recall: bool, gap: float) -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    snapshots = _plain_chat(8)
    views = _run(pilot, snapshots, recall=recall, gap=gap)
    for view in views[1:]:
        assert any(PASTED in m.text for m in view)
    # Every message of the chat reaches the model verbatim, and nothing was folded.
    assert views[-1] == snapshots[-1]
    assert all(e.kind != "fold" for ep in pilot.state("t").plan.epochs for e in ep.edits)
    tasks = pilot.state("t").lifecycle.tasks()
    assert tasks and all(t.state is not SegmentState.EVICTABLE for t in tasks)


def _call(call_id: str, command: str) -> ToolCall:
    return ToolCall(call_id, "bash", json.dumps({"command": command}))


def _log(n: int, lines: int = 400) -> str:
    return "\n".join(f"line {i} of run {n}: value={i * 7 + n}" for i in range(lines))


def _work(history: list[Message], n: int, steps: int) -> None:
    for k in range(steps):
        call = _call(f"c{n}_{k}", f"pytest -k case_{n}_{k}")
        history.append(Message("assistant", f"step {n}.{k}", tool_calls=(call,)))
        history.append(Message("tool", _log(n * 100 + k), tool_call_id=call.id, name="bash"))


def _agent_session(middle: Message | tuple[Message, Message]) -> list[list[Message]]:
    """Task 1 (a long stretch of tool work), then `middle` (a tool-less exchange, or a user
    turn that starts more work), then a second long task, then the current task."""
    history: list[Message] = [Message("user", "Fix the failing tests.")]
    snapshots: list[list[Message]] = []
    _work(history, 1, 12)
    history.append(Message("assistant", "Fixed."))
    if isinstance(middle, tuple):
        history += list(middle)
    else:
        history.append(middle)
        _work(history, 2, 12)
        history.append(Message("assistant", "Done."))
    for n in range(3, 6):
        history.append(Message("user", f"Next: part {n}."))
        for k in range(6):
            snapshots.append(list(history))
            _work(history, n * 10 + k, 1)
        history.append(Message("assistant", f"Part {n} done."))
    snapshots.append(list(history))
    return snapshots


@pytest.mark.parametrize("recall", [True, False])
def test_finished_work_folds_but_a_tool_less_exchange_stays(recall: bool) -> None:
    question = Message("user", "Which tests failed first, and why?")
    answer = Message("assistant", "test_parse and test_emit: both read a stale fixture.")
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    snapshots = _agent_session((question, answer))
    views = _run(pilot, snapshots, recall=recall)
    last = views[-1]
    assert question in last and answer in last
    at = last.index(question)
    if recall:
        # Work on both sides of the exchange was folded; the exchange stays between.
        assert any(m.text.startswith("[earlier conversation folded:") for m in last[:at])
        assert any(m.text.startswith("[earlier conversation folded:") for m in last[at:])
    else:
        # No user message or reply is taken when the model cannot recall it.
        for message in snapshots[-1]:
            if is_conversation(message):
                assert message in last, message.text[:60]


def test_a_long_user_message_in_a_work_task_stays() -> None:
    pasted = Message("user", "The CI log, please have a look:\n" + _log(7, 1_200))
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    snapshots = _agent_session(pasted)
    views = _run(pilot, snapshots, recall=True)
    assert pasted in views[-1]
    folds = [e for ep in pilot.state("t").plan.epochs for e in ep.edits if e.kind == "fold"]
    assert folds  # task 1 was folded, up to the pasted log
    # With the opt-in the same session folds the log away (into the recallable archive).
    opt_in = CachePilot(
        Config(maintenance=MaintenanceConfig(fold_conversation=True)),
        store=InMemoryArtifactStore(),
    )
    assert pasted not in _run(opt_in, snapshots, recall=True)[-1]


def test_rules_never_mark_a_tool_less_exchange_evictable() -> None:
    messages = [
        Message("user", "Here is a file:\n" + PASTED[:2_000]),
        Message("assistant", "Ok."),
        Message("user", "And the few-shot example: add a docstring."),
        Message("assistant", "Done: added it."),
        Message("user", "Now run the tests."),
        Message("assistant", "Running.", tool_calls=(_call("c1", "pytest"),)),
        Message("tool", "3 passed", tool_call_id="c1", name="bash"),
        Message("assistant", "All pass."),
        Message("user", "Thanks."),
        Message("assistant", "You are welcome."),
    ]
    registry = LifecycleRegistry()
    estimator = RuleEstimator(protect_last_units=0, grace_calls=0)
    for _ in range(4):
        registry.update(messages, None, estimator, force=True)
    states = {t.id: t.state for t in registry.tasks()}
    assert states["task:1"] is not SegmentState.EVICTABLE
    assert states["task:2"] is not SegmentState.EVICTABLE
    assert states["task:3"] is SegmentState.EVICTABLE  # finished work goes as before
    # Whatever an estimator proposes (an LLM estimator too), the registry refuses it.
    delta = LifecycleDelta(segment_id="task:1", to_state=SegmentState.EVICTABLE, reason="x")
    assert registry.check(delta) == "a tool-less exchange is conversation, not finished work"
    assert registry.apply([delta]) == []


def test_fold_begin_by_hand() -> None:
    call = _call("c1", "ls")
    view = [
        Message("user", "task"),
        Message("assistant", "a", tool_calls=(call,)),
        Message("tool", "out", tool_call_id="c1", name="bash"),
        Message("assistant", "ok"),
        Message("user", "q"),
        Message("assistant", "answer"),
        Message("user", "more work"),
        Message("assistant", "b", tool_calls=(_call("c2", "ls"),)),
        Message("tool", "out", tool_call_id="c2", name="bash"),
    ]
    sizes = [10, 10, 10, 10, 10, 10, 10, 10, 5_000]
    end = len(view)

    def begin(start: int, stop: int, sizes: list[int], *, strict: bool) -> int:
        return fold_begin(view, start, stop, sizes=sizes, strict=strict, message_tokens=100)

    # Strict: after the last user message or reply (the work after it may fold).
    assert begin(1, end, sizes, strict=True) == 7
    # Conversation: after the tool-less exchange (4-5); a short statement or report is work.
    assert begin(1, end, sizes, strict=False) == 6
    assert begin(1, 4, sizes, strict=False) == 1
    # A long reply is content: the fold begins after it (here: nothing left to fold).
    big = [10, 10, 10, 500, 10, 10, 10, 10, 10]
    assert begin(1, 4, big, strict=False) == 4
    # Never inside a tool exchange: a range would begin at its call, not at its result.
    assert (
        begin(2, 3, sizes, strict=True) == 2 or view[begin(2, 3, sizes, strict=True)].role != "tool"
    )

    # The stretches a fold may take lie between the kept messages.
    def stretches(*, strict: bool) -> list[tuple[int, int]]:
        return fold_stretches(view, 1, end, sizes=sizes, strict=strict, message_tokens=100)

    assert stretches(strict=False) == [(1, 4), (6, 9)]
    assert stretches(strict=True) == [(1, 3), (7, 9)]
    with pytest.raises(ValueError):
        fold_begin(view, 1, end, sizes=sizes[:2], strict=True, message_tokens=100)


def test_conversation_tokens_is_validated() -> None:
    with pytest.raises(ValueError, match="conversation_tokens"):
        MaintenanceConfig(conversation_tokens=-1)


_TURN = st.sampled_from(["chat", "paste", "work", "long-work"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TURN, min_size=3, max_size=6), st.booleans())
def test_no_fold_takes_conversation_the_model_works_with(turns: list[str], recall: bool) -> None:
    """Property: whatever the mix of turns, every message of a tool-less exchange and every
    long user message stays in view (and without recall, every user message and reply)."""
    history: list[Message] = [Message("user", "Start.")]
    snapshots: list[list[Message]] = []
    for n, kind in enumerate(turns):
        text = f"Turn {n}." if kind != "paste" else f"Turn {n}, the log:\n" + _log(n, 900)
        history.append(Message("user", text))
        if kind in {"chat", "paste"}:
            snapshots.append(list(history))
            history.append(Message("assistant", f"Answer {n}."))
            continue
        for k in range(8 if kind == "long-work" else 3):
            snapshots.append(list(history))
            _work(history, n * 10 + k, 1)
        history.append(Message("assistant", f"Done {n}."))
    snapshots.append(list(history))
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    view = _run(pilot, snapshots, recall=recall)[-1]
    final = snapshots[-1]
    has_tools = set()
    turn = -1
    for message in final:
        if message.role == "user":
            turn += 1
        if message.tool_calls:
            has_tools.add(turn)
    turn = -1
    for message in final:
        if message.role == "user":
            turn += 1
        if not is_conversation(message):
            continue
        long = len(message.text) > 20_000  # a pasted log: well over `conversation_tokens`
        if not recall or turn not in has_tools or long:
            assert message in view, message.text[:40]

"""Folds computed ahead (`CachePilot.precompute`, `cachepilot.fold.ahead`): the next
maintenance point's summary stages are computed on a prediction of the next request, found
again only for the very same range, and the requests are byte-identical to a pilot's that
never computes ahead."""

from __future__ import annotations

import gc
import hashlib
import json
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold import ChatModelSummarizer
from cachepilot.fold.ahead import (
    AHEAD_SUFFIX,
    SUMMARY_STAGES,
    AheadNotes,
    ExactMemo,
    ahead_context,
    predicted_next,
)
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
SYSTEM = "You are a coding agent in /srv/app."


@pytest.fixture(autouse=True)
def _fresh_stages() -> Iterator[None]:
    SUMMARY_STAGES.clear()  # each run starts with nothing computed, ahead or not
    yield
    SUMMARY_STAGES.clear()


def output(n: int, lines: int = 30) -> str:
    digests = (hashlib.sha256(f"{n}:{i}".encode()).hexdigest()[:24] for i in range(lines))
    return "\n".join(f"src/m{n}_{i}.py:{i}: {d} ok" for i, d in enumerate(digests))


def history(calls: int, lines: int = 30) -> list[Message]:
    """A one-task coding session after `calls` tool exchanges."""
    messages = [Message("user", "Fix the build of src/.")]
    for n in range(calls):
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"make m{n}"}))
        messages.append(Message("assistant", "", tool_calls=(call,)))
        messages.append(Message("tool", output(n, lines), tool_call_id=f"c{n}", name="bash"))
    return messages


def pilot(**maintenance: Any) -> CachePilot:
    # Small folds pay early: a short session has several maintenance points.
    config = Config(
        provider="anthropic",
        maintenance=MaintenanceConfig(fold_min_tokens=1_000, **maintenance),
    )
    return CachePilot(config, store=InMemoryArtifactStore())


def request_bytes(prepared: tuple[str | None, list[Message], list[dict[str, Any]]]) -> str:
    system, messages, tools = prepared
    return json.dumps([system, [m.to_dict() for m in messages], tools], sort_keys=True)


def run(calls: int, *, ahead: bool, thread: str = "t") -> tuple[list[str], CachePilot]:
    SUMMARY_STAGES.clear()
    p = pilot()
    sent = []
    for n in range(calls):
        sent.append(request_bytes(p.prepare(SYSTEM, history(n), TOOLS, thread, now=1_000.0 + n)))
        if ahead:
            assert p.precompute(thread) == (n > 0)  # a first request has no exchange to copy
    return sent, p


def folds(p: CachePilot, thread: str = "t") -> int:
    """Maintenance points that folded (the plan itself keeps the latest fold only)."""
    return sum(d.apply and d.reason.endswith("fold") for d in p.state(thread).decisions)


def test_requests_are_byte_identical_with_and_without_folds_computed_ahead() -> None:
    plain, p1 = run(40, ahead=False)
    assert SUMMARY_STAGES.stats.computed == 0
    ahead, p2 = run(40, ahead=True)
    assert ahead == plain
    assert p1.export_state("t") == p2.export_state("t")
    # Used, not dead: every fold of the session found both of its stages computed ahead.
    assert folds(p2) >= 3
    assert SUMMARY_STAGES.stats.used >= 2 * folds(p2) - 2  # the first one may be unforeseen
    assert SUMMARY_STAGES.stats.used <= SUMMARY_STAGES.stats.computed


def test_a_precomputation_archives_nothing_and_changes_no_state() -> None:
    p = pilot()
    store = p.store
    assert isinstance(store, InMemoryArtifactStore)
    for n in range(40):
        p.prepare(SYSTEM, history(n), TOOLS, "t", now=1_000.0 + n)
        before = ({a.ref for a in store.list("t")}, p.export_state("t"))
        assert p.precompute("t") == (n > 0)
        assert ({a.ref for a in store.list("t")}, p.export_state("t")) == before
    assert SUMMARY_STAGES.stats.computed > 0
    # Every fold the plan applied names an archived range that recall returns.
    edits = [e for epoch in p.state("t").plan.epochs for e in epoch.edits if e.kind == "fold"]
    assert edits
    for edit in edits:
        assert edit.ref is not None and store.get("t", edit.ref) is not None
        assert '"role"' in p.recall(edit.ref, thread="t")


def test_a_stale_precomputation_is_never_used() -> None:
    """The client sends another text for an earlier output after the precomputation: the
    stages for the old text are not found, the fold summarizes what the request holds."""

    def edited(n: int) -> list[Message]:
        messages = history(n)
        if n >= 20:
            messages[8] = Message("tool", output(3) + "\nEDITED", tool_call_id="c3", name="bash")
        return messages

    sessions = []
    for ahead in (False, True):
        SUMMARY_STAGES.clear()
        p = pilot()
        sent = []
        for n in range(40):
            sent.append(request_bytes(p.prepare(SYSTEM, edited(n), TOOLS, "t", now=1_000.0 + n)))
            if ahead:
                p.precompute("t")
        sessions.append(sent)
    assert sessions[0] == sessions[1]


def test_an_emergency_fold_after_the_precomputation_changes_nothing() -> None:
    results = []
    for ahead in (False, True):
        SUMMARY_STAGES.clear()
        p = pilot()
        sent = []
        for n in range(30):
            messages = history(n)
            sent.append(request_bytes(p.prepare(SYSTEM, messages, TOOLS, "t", now=1_000.0 + n)))
            if ahead:
                p.precompute("t")
            if n == 25:
                assert p.emergency_fold(SYSTEM, messages, "t", TOOLS)
        results.append(sent)
    assert results[0] == results[1]


def test_a_thread_that_moved_on_is_not_computed() -> None:
    p = pilot()
    p.prepare(SYSTEM, history(20), TOOLS, "t", now=1.0)
    note = p._ahead_notes.get("t")
    assert note is not None
    p.prepare(SYSTEM, history(21), TOOLS, "t", now=2.0)
    assert not p._precompute("t", note)  # a later request was prepared
    assert SUMMARY_STAGES.stats.computed == 0
    assert p.precompute("t")


def test_prepare_waits_for_a_precomputation_under_way_and_sends_the_same_bytes() -> None:
    plain, _ = run(40, ahead=False)
    SUMMARY_STAGES.clear()
    p = pilot()
    sent = []
    worker: threading.Thread | None = None
    for n in range(40):
        sent.append(request_bytes(p.prepare(SYSTEM, history(n), TOOLS, "t", now=1_000.0 + n)))
        if worker is not None:
            worker.join()
        worker = threading.Thread(target=p.precompute, args=("t",))
        worker.start()  # the next prepare runs while it computes
    assert worker is not None
    worker.join()
    assert sent == plain


def test_precompute_soon_runs_in_the_background_and_is_used() -> None:
    p = pilot()
    for n in range(40):
        p.prepare(SYSTEM, history(n), TOOLS, "t", now=1_000.0 + n)
        future = p.precompute_soon("t")
        assert future is not None
        assert future.result(timeout=60) is (n > 0)
    assert SUMMARY_STAGES.stats.used > 0
    assert p.precompute_soon("never-seen") is None


def test_threads_with_the_same_history_send_the_same_bytes() -> None:
    p = pilot()
    for n in range(40):
        sent = {
            t: request_bytes(p.prepare(SYSTEM, history(n), TOOLS, t, now=1.0 + n)) for t in "ab"
        }
        p.precompute("a")  # only "a" computes ahead
        assert sent["a"] == sent["b"]
    for thread in "ab":
        for epoch in p.state(thread).plan.epochs:
            for edit in epoch.edits:
                assert edit.ref is None or p.store.get(thread, edit.ref) is not None


def test_nothing_is_computed_ahead_when_it_is_off_unknown_or_billed() -> None:
    p = pilot()
    assert not p.precompute("never-seen")
    off = pilot(fold_ahead=False)
    off.prepare(SYSTEM, history(30), TOOLS, "t")
    assert not off.precompute("t") and off.precompute_soon("t") is None
    p.prepare(SYSTEM, history(30), TOOLS, "t")
    assert p.precompute("t")
    p.forget("t")
    assert not p.precompute("t")  # forgetting the thread drops its note
    # A model summarizer would be billed for a guess: nothing ahead.
    model = _CountingModel()
    config = Config(provider="anthropic", maintenance=MaintenanceConfig(fold_min_tokens=1_000))
    billed = CachePilot(
        config, store=InMemoryArtifactStore(), summarizer=ChatModelSummarizer(model)
    )
    billed.prepare(SYSTEM, history(30), TOOLS, "t", maintain=False)
    billed.prepare(SYSTEM, history(30), TOOLS, "t")
    calls = model.calls
    assert not billed.precompute("t") and model.calls == calls


class _CountingModel:
    """A LangChain-shaped chat model that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, messages: Any) -> Any:
        self.calls += 1
        return type("Answer", (), {"content": "Goal: fix the build."})()

    async def ainvoke(self, messages: Any) -> Any:
        return self.invoke(messages)


def test_predicted_next_copies_the_last_exchange_with_its_own_ids() -> None:
    messages = history(3)
    predicted = predicted_next(messages)
    assert predicted is not None and predicted[: len(messages)] == messages
    assert [m.role for m in predicted[len(messages) :]] == ["assistant", "tool"]
    assert predicted[-2].tool_calls[0].id == "c2" + AHEAD_SUFFIX
    assert predicted[-1].tool_call_id == "c2" + AHEAD_SUFFIX
    assert predicted[-1].text == messages[-1].text
    assert predicted_next([Message("user", "hi")]) is None


def test_exact_memo_is_bounded_and_keeps_only_what_finished() -> None:
    memo: ExactMemo[int] = ExactMemo(max_entries=3)
    for n in range(10):
        assert memo.get(("k", n), (), lambda n=n: n * n) == n * n
    assert len(memo) == 3
    assert memo.get(("k", 9), (), lambda: -1) == 81  # kept
    assert memo.get(("k", 0), (), lambda: -1) == -1  # gone: computed again
    with pytest.raises(RuntimeError):
        memo.get("bad", (), _fail)
    assert memo.get("bad", (), lambda: 7) == 7  # a failure is not kept


def test_exact_memo_compares_messages_in_full_and_keeps_none_alive() -> None:
    memo: ExactMemo[str] = ExactMemo()
    messages = history(3)
    assert memo.get("k", (messages,), lambda: "first") == "first"
    assert memo.get("k", (history(3),), lambda: "again") == "first"  # equal, other objects
    edited = [*messages[:-1], Message("tool", "other", tool_call_id="c2")]
    assert memo.get("k", (edited,), lambda: "edited") == "edited"
    assert memo.get("k", (messages[:-1],), lambda: "shorter") == "shorter"
    # Held by weak references: a message nobody holds any more is gone, and matches nothing.
    probe = Message("user", "only here")
    watch = weakref.ref(probe)
    memo.get("p", ([probe],), lambda: "probe")
    del probe
    gc.collect()
    assert watch() is None
    assert memo.get("p", ([Message("user", "only here")],), lambda: "new") == "new"
    with pytest.raises(ValueError):
        ExactMemo(max_entries=0)
    with pytest.raises(ValueError):
        AheadNotes(0)


def _fail() -> int:
    raise RuntimeError("boom")


def test_exact_memo_a_caller_waits_for_the_stage_under_way_and_counts_its_use() -> None:
    memo: ExactMemo[str] = ExactMemo()
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(30)
        return "stage"

    def ahead() -> None:
        with ahead_context():
            memo.get("key", (), slow)

    worker = threading.Thread(target=ahead)
    worker.start()
    started.wait(30)
    seen: list[str] = []
    waiter = threading.Thread(target=lambda: seen.append(memo.get("key", (), lambda: "again")))
    waiter.start()
    release.set()
    worker.join()
    waiter.join()
    assert seen == ["stage"]
    assert memo.stats.computed == 1 and memo.stats.used == 1


def test_ahead_notes_are_bounded() -> None:
    notes = AheadNotes(2)
    for thread in "abc":
        notes.note(thread, system=None, messages=[], canonical=[], tools=[], recall=True)
    assert notes.get("a") is None and notes.get("c") is not None


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.integers(min_value=1, max_value=60), min_size=12, max_size=28),
    ahead=st.lists(st.booleans(), min_size=28, max_size=28),
    user_turns=st.sets(st.integers(min_value=2, max_value=27), max_size=4),
)
def test_property_the_bytes_never_depend_on_whether_a_fold_was_computed_ahead(
    lines: list[int], ahead: list[bool], user_turns: set[int]
) -> None:
    """Any output sizes, user turns anywhere, any pattern of precomputations: the same
    requests (and states) as a pilot that never computes ahead."""

    def session(calls: int) -> list[Message]:
        messages = [Message("user", "Fix the build of src/.")]
        for n in range(calls):
            if n in user_turns:
                messages.append(Message("assistant", f"Step {n} done."))
                messages.append(Message("user", f"Now check m{n}."))
            call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"make m{n}"}))
            messages.append(Message("assistant", "", tool_calls=(call,)))
            messages.append(Message("tool", output(n, lines[n]), tool_call_id=f"c{n}"))
        return messages

    runs = []
    for use in (False, True):
        SUMMARY_STAGES.clear()
        p = pilot()
        sent = []
        for n in range(len(lines)):
            sent.append(request_bytes(p.prepare(SYSTEM, session(n), TOOLS, "t", now=float(n))))
            if use and ahead[n]:
                p.precompute("t")
        runs.append((sent, p.export_state("t")))
    assert runs[0] == runs[1]

"""Background work steps aside for requests (`cachepilot.support.foreground`): a thread
marked `background_work` stops at `yield_to_foreground` while any request is in a
foreground stretch, goes on when none is (or after `MAX_WAIT_SECONDS`), and nothing else
ever waits there."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cachepilot.fold.ahead import ExactMemo, ahead_context
from cachepilot.messages import Message
from cachepilot.support import foreground as fg
from cachepilot.support.foreground import (
    background_work,
    foreground,
    in_foreground,
    requests_in_foreground,
    waiting,
    yield_to_foreground,
)

PATIENCE = 5.0
"""How long a test waits for something that must happen (never reached when it works)."""


@pytest.fixture(autouse=True)
def _long_waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A pause that ended by its time limit would look like a pause that ended on release.
    monkeypatch.setattr(fg, "MAX_WAIT_SECONDS", 60.0)
    assert requests_in_foreground() == 0
    yield
    assert requests_in_foreground() == 0


def _background_pass(passed: threading.Event, reached: threading.Event) -> threading.Thread:
    def run() -> None:
        with background_work():
            reached.set()
            yield_to_foreground()
            passed.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_background_work_waits_while_a_request_is_in_the_foreground() -> None:
    passed, reached = threading.Event(), threading.Event()
    with foreground():
        assert requests_in_foreground() == 1
        thread = _background_pass(passed, reached)
        assert reached.wait(PATIENCE)
        # Had it not waited, it would have passed at once.
        assert not passed.wait(0.3)
    assert passed.wait(PATIENCE)
    thread.join(PATIENCE)


def test_background_work_goes_on_while_the_request_waits_for_the_upstream() -> None:
    passed, reached = threading.Event(), threading.Event()
    with foreground():
        with waiting():
            assert requests_in_foreground() == 0
            assert not in_foreground()
            _background_pass(passed, reached).join(PATIENCE)
            assert passed.is_set()
        assert requests_in_foreground() == 1
        assert in_foreground()


def test_only_background_threads_ever_wait() -> None:
    passed = threading.Event()

    def request_thread() -> None:
        yield_to_foreground()  # not marked: returns at once though a request is in flight
        passed.set()

    with foreground():
        thread = threading.Thread(target=request_thread, daemon=True)
        thread.start()
        assert passed.wait(PATIENCE)
        yield_to_foreground()  # the request's own thread neither
    thread.join(PATIENCE)


def test_a_pause_ends_after_its_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fg, "MAX_WAIT_SECONDS", 0.01)
    passed, reached = threading.Event(), threading.Event()
    with foreground():
        _background_pass(passed, reached)
        # A process that is never idle still finishes its background work.
        assert passed.wait(PATIENCE)


def test_nested_stretches_count_once_and_each_task_counts_alone() -> None:
    seen: list[int] = []

    async def request(inside: asyncio.Barrier, read: asyncio.Barrier) -> None:
        # The inner one stands for the pilot's prepare inside the proxy's request.
        with foreground(), foreground():
            await inside.wait()
            seen.append(requests_in_foreground())
            # The pilot's work runs in a worker thread: it is the request's stretch.
            seen.append(await asyncio.to_thread(requests_in_foreground))
            assert await asyncio.to_thread(in_foreground)
            await read.wait()  # neither leaves before both have read

    async def main() -> None:
        inside, read = asyncio.Barrier(2), asyncio.Barrier(2)
        await asyncio.gather(request(inside, read), request(inside, read))

    asyncio.run(main())
    assert seen == [2, 2, 2, 2]


def test_a_stretch_is_released_when_the_request_fails() -> None:
    with pytest.raises(RuntimeError), foreground():
        assert requests_in_foreground() == 1
        raise RuntimeError("the request's own error")
    assert requests_in_foreground() == 0
    assert not in_foreground()


def test_background_work_a_request_waits_for_does_not_pause() -> None:
    """A request that needs a stage being computed ahead waits for it: the background work
    computing it goes on though the request is in the foreground (else each of its pauses
    would last `MAX_WAIT_SECONDS`)."""
    memo: ExactMemo[str] = ExactMemo()
    messages = (Message("user", "Fix the build."),)
    started, go = threading.Event(), threading.Event()
    got: list[str] = []

    def ahead() -> str:
        started.set()
        assert go.wait(PATIENCE)
        for _ in range(3):
            yield_to_foreground()
        return "computed ahead"

    def precompute() -> None:
        with background_work(), ahead_context():
            memo.get("stage", (messages,), ahead)

    def request() -> None:
        with foreground():
            got.append(memo.get("stage", (messages,), lambda: "computed by the request"))

    background = threading.Thread(target=precompute, daemon=True)
    background.start()
    assert started.wait(PATIENCE)
    waiter = threading.Thread(target=request, daemon=True)
    waiter.start()
    go.set()
    waiter.join(PATIENCE)
    assert got == ["computed ahead"]
    background.join(PATIENCE)


def test_background_work_under_sustained_load_waits_by_what_it_ran_not_by_its_pauses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests that never stop coming: each pause would end by its time limit. Background
    work with a pause at every message of a long session still gets its share of the time:
    it waits in all a bounded multiple of what it ran, however many pauses it passes."""
    monkeypatch.setattr(fg, "MAX_WAIT_SECONDS", 0.05)
    clock = [0.0]
    waited: list[float] = []

    class Sustained(threading.Condition):
        """A request is in the foreground all along: every wait lasts its whole limit
        (counted on a clock of its own, nothing here sleeps)."""

        def wait_for(self, predicate: Any, timeout: float | None = None) -> Any:
            assert timeout is not None
            waited.append(timeout)
            clock[0] += timeout
            return predicate()

    monkeypatch.setattr(fg, "_clock", lambda: clock[0], raising=False)
    monkeypatch.setattr(fg._gate, "condition", Sustained())
    pauses, step = 2_000, 0.000_1  # 0.2 s of work, a pause every 0.1 ms

    def precompute() -> None:
        with background_work():
            for _ in range(pauses):
                clock[0] += step
                yield_to_foreground()

    with foreground():
        thread = threading.Thread(target=precompute, daemon=True)
        thread.start()
        thread.join(PATIENCE)
    assert not thread.is_alive()
    assert waited  # it did step aside
    ran = pauses * step
    ratio = getattr(fg, "WAIT_PER_RUN", 10.0)
    assert sum(waited) <= ratio * ran + fg.MAX_WAIT_SECONDS + 1e-9
    assert max(waited) <= fg.MAX_WAIT_SECONDS


def test_every_maintenance_entry_of_the_request_path_is_foreground(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`maintain` (a graph's maintenance step before `prepare(..., maintain=False)`) and
    `emergency_fold` (after a context-length error, the plugins call it) do a request's
    heaviest work: what is computed ahead steps aside meanwhile, as for `prepare`."""
    import json

    from cachepilot import CachePilot, Config
    from cachepilot.artifacts import InMemoryArtifactStore
    from cachepilot.messages import ToolCall

    history = [Message("user", "Fix the build.")]
    for n in range(12):
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"make {n}"}))
        history.append(Message("assistant", "", tool_calls=(call,)))
        lines = (f"src/m{n}_{i}.py:{i}: error {i * n}" for i in range(300))
        history.append(Message("tool", "\n".join(lines), tool_call_id=call.id, name="bash"))
    pilot = CachePilot(Config(provider="anthropic"), store=InMemoryArtifactStore())
    seen: dict[str, list[int]] = {"maintain": [], "fold": []}
    maintain, fold_edits = pilot._maintain, pilot._fold_edits

    def counted_maintain(*args: Any, **kwargs: Any) -> Any:
        seen["maintain"].append(requests_in_foreground())
        return maintain(*args, **kwargs)

    def counted_fold(*args: Any, **kwargs: Any) -> Any:
        seen["fold"].append(requests_in_foreground())
        return fold_edits(*args, **kwargs)

    monkeypatch.setattr(pilot, "_maintain", counted_maintain)
    monkeypatch.setattr(pilot, "_fold_edits", counted_fold)
    pilot.maintain("You are a coder.", history, (), "t", now=1.0)
    assert pilot.emergency_fold("You are a coder.", history, "t")
    assert seen["maintain"] == [1]
    assert seen["fold"] and set(seen["fold"]) == {1}

"""Recall arguments are untrusted: patterns that backtrack forever, huge patterns and ranges."""

from __future__ import annotations

import json

from bounded_run import run_bounded

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.recall.tool import MAX_GREP_CHARS, recall

_SETUP = """
import asyncio, json, threading, time
from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
pilot = CachePilot(Config(), store=InMemoryArtifactStore())
text = "\\n".join(["a" * 40 + "!"] * 3 + ["ok aaa"])
ref = pilot.store.put("t", text)
"""


def test_catastrophic_patterns_return() -> None:
    out = run_bounded(
        _SETUP
        + """
patterns = ("(a+)+$", "(a|aa)+$", "a{4294967294}")
results = {p: pilot.recall(ref, grep=p, thread="t") for p in patterns}
print(json.dumps(results))
""",
        timeout=60,
    )
    results = json.loads(out)
    nested = results["(a+)+$"]
    assert "1 matching lines" in nested and "4: ok aaa" in nested  # answered, not frozen
    alternation = results["(a|aa)+$"]
    assert "took longer than 1 s as a regular expression" in alternation
    assert "searched for it as literal text" in alternation
    assert "a{4294967294}" in results and "repeats too much" in results["a{4294967294}"]


def test_a_slow_pattern_leaves_the_event_loop_running() -> None:
    out = run_bounded(
        _SETUP
        + """
async def main():
    ticks = 0
    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1
    task = asyncio.create_task(ticker())
    result = await pilot.arecall(ref, grep="(a|aa)+$", thread="t")
    task.cancel()
    return ticks, result
ticks, result = asyncio.run(main())
print(json.dumps({"ticks": ticks, "result": result}))
""",
        timeout=60,
    )
    report = json.loads(out)
    assert "literal text" in report["result"]
    # About a second of matching: a loop blocked by the interpreter lock would not tick at all.
    assert report["ticks"] >= 10


def test_a_huge_pattern_is_refused_and_not_echoed() -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    ref = pilot.store.put("t", "x" * 30_000 + "\nsecond line")
    out = pilot.recall(ref, grep="x" * 1_000_000, max_chars=1_000, thread="t")
    assert len(out) < 1_000
    assert f"at most {MAX_GREP_CHARS}" in out
    long_but_allowed = "(?:x|y)" * 70  # 490 characters
    many = pilot.store.put("t", ("x" * 80 + "\n") * 200)
    out = pilot.recall(many, grep=long_but_allowed, max_chars=100, thread="t")
    header = out.splitlines()[0]
    assert len(header) < 300  # the header quotes a clipped pattern
    assert json.dumps(long_but_allowed) in out  # the continuation repeats it whole


def test_absurd_ranges_and_sizes_are_answered() -> None:
    store = InMemoryArtifactStore()
    ref = store.put("t", "one\ntwo\n")
    for lines in ("1" * 5_000, "1-" + "9" * 5_000, "x" * 100_000):
        result = recall(store, "t", ref, lines=lines)
        assert result.error is not None and "Could not read the line range" in result.error
        assert len(result.render()) < 500
    capped = recall(store, "t", ref, max_chars="9" * 5_000)
    assert capped.content == "one\ntwo\n"

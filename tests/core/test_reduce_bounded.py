"""Reduction is linear and bounded on hostile tool output, and holds no lock others need."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import ClassVar

from bounded_run import run_bounded

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message
from cachepilot.reduce import Pipeline, ReduceConfig
from cachepilot.reduce.passes import PassContext, ReductionPass
from cachepilot.reduce.passes.html import MAX_LIST_DEPTH, html_to_text

# Each about 100-200 KB; the quadratic ones took seconds to minutes, the nested list gigabytes.
HOSTILE = {
    "br_div": "<html><body>" + "<br><div>" * 20_000,
    "nested_lists": "<html><body>" + "<ul><li>i" * 20_000,
    "open_attributes": "<html><body>" + "<a b='" * 20_000,
    "open_comments": "<html><body>" + "<!--" * 40_000,
    "open_end_tags": "<html><body>" + "</" * 60_000,
    "open_tags": "<html><body>" + "<div" * 40_000,
    "open_declarations": "<html><body>" + "<!" * 60_000,
    "open_instructions": "<html><body>" + "<?" * 60_000,
    "empty_links": "<html><body>" + "<br>" * 20_000 + "<a href=x></a>" * 20_000,
    "deep_json": "[" * 100_000 + "]" * 100_000,
    "ansi_soup": "\x1b[" + "0;" * 100_000 + "\x1b]" * 50_000,
    "progress": "\r".join(["x" * 10] * 50_000),
    "repeats": "\n".join(("a", "b", "a", "c") * 40_000),
    "numbered": "".join(f"{i}:x\n" for i in range(60_000)),
}


def test_hostile_outputs_reduce_in_bounded_time_and_size() -> None:
    out = run_bounded(
        """
import json, sys
from cachepilot.reduce import Pipeline
from cachepilot.reduce.passes.html import html_to_text
sys.path.insert(0, @DIR@)
from test_reduce_bounded import HOSTILE
pipeline = Pipeline()
sizes = dict()
for name, text in HOSTILE.items():
    reduction = pipeline.run("web_fetch", {"url": name}, name, text)
    sizes[name] = [len(text), len(reduction.text), len(html_to_text(text))]
print(json.dumps(sizes))
""".replace("@DIR@", repr(str(Path(__file__).parent))),
        timeout=120,
    )
    sizes = json.loads(out)
    assert set(sizes) == set(HOSTILE)
    for name, (before, after, html) in sizes.items():
        assert after <= 60_000, name  # the hard cap and the size gate hold
        assert html <= 3 * before, name  # the HTML converter's output is linear in its input


def test_deep_lists_are_indented_to_a_bounded_depth() -> None:
    text = html_to_text("<html><body>" + "<ul><li>item" * 30)
    indents = [len(line) - len(line.lstrip(" ")) for line in text.splitlines()]
    assert max(indents) == 2 * (MAX_LIST_DEPTH - 1)
    assert text.count("- item") == 30


class _Gate(ReductionPass):
    """A pass that blocks until released (stands for a long pass on a huge output)."""

    name: ClassVar[str] = "gate"
    lossless: ClassVar[bool] = True
    entered = threading.Event()
    release = threading.Event()

    def apply(self, text: str, ctx: PassContext) -> str | None:
        self.entered.set()
        assert self.release.wait(60)
        return None


def test_a_long_pass_holds_up_no_other_thread() -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    pilot._pipeline = Pipeline(ReduceConfig(), passes=[_Gate()])
    slow = threading.Thread(target=pilot.ingest, args=("bash", {}, "output", "c1", "slow"))
    slow.start()
    try:
        assert _Gate.entered.wait(30)
        done: list[object] = []

        def other_thread_work() -> None:
            messages = [Message(role="user", content="hi")]
            done.append(pilot.prepare("sys", messages, [], thread="other"))
            done.append(pilot.recall("0" * 12, thread="other"))
            done.append(pilot.export_state("other"))

        worker = threading.Thread(target=other_thread_work)
        worker.start()
        worker.join(30)
        assert len(done) == 3, "another thread's calls waited for the pass"
    finally:
        _Gate.release.set()
        slow.join(60)
    assert pilot.state("slow").ingest.seen  # the slow ingest still recorded its result

"""Fuzzing whole sessions: ingest + prepare + reload with parallel calls, duplicate and binary
outputs, cold gaps and finished-task folds.

Two pilots run every generated session in lockstep over one archive: one keeps its state in
memory, the other is rebuilt from its exported JSON state at random points (a new process).
Checked at every model call: both send the same request; the request pairs every tool call with
its result; between maintenance points it extends the previous request; a result once shown
stubbed is never shown whole again; every ref a request names is recallable; every reduced
output's original is archived byte for byte.

`CACHEPILOT_FUZZ=slow` runs 20,000 sessions instead of 2,000.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall, pairing_issues
from cachepilot.reduce import ReduceConfig
from cachepilot.reduce.normalize import normalize_output

_SLOW = os.environ.get("CACHEPILOT_FUZZ", "").strip().lower() == "slow"
_EXAMPLES = int(os.environ.get("CACHEPILOT_FUZZ_EXAMPLES", "0")) or (20_000 if _SLOW else 2_000)
FUZZ = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    derandomize=not _SLOW,  # CI: the same 2,000 sessions every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Small limits and an eager scheduler, so gates, prunes, evictions and folds fire in sessions of
# a dozen calls.
CONFIG = Config(
    reduction=ReduceConfig(
        default_limit=1_200,
        shell_limit=1_000,
        search_limit=1_000,
        reread_limit=1_000,
        head_chars=200,
        tail_chars=150,
        hard_cap=3_000,
        max_scan_chars=5_000,
        image_max_bytes=64,
    ),
    maintenance=MaintenanceConfig(
        every=1,
        protect_tool_tokens=200,
        protect_results=1,
        min_prune_tokens=100,
        min_result_tokens=40,
        fold_protect_tokens=200,
        fold_min_tokens=300,
        fold_summary_tokens=80,
        fold_finished_tasks=True,
        context_window=2_000,
    ),
)
# The same, rewriting history every other call instead of when the cost model says it pays.
FIXED = CONFIG.model_copy(
    update={"maintenance": CONFIG.maintenance.model_copy(update={"schedule": "fixed", "every": 2})}
)
REF = re.compile(r'recall\(ref="([0-9a-f]{12})"')

TOOLS = ["bash", "read_file", "grep", "fetch"]
ARGS = [{"command": "make"}, {"command": "pytest -x"}, {"path": "a.py"}, {"path": "b.py"}, {}]
_LOG = "\n".join(
    f"step {i:04d} {'ok' if i % 7 else 'FAILED'} in {i * 13 % 97} ms" for i in range(400)
)
_HTML = "<html><body>" + "<div><a href='/x'>link</a><br>" * 120 + "</body></html>"
_JSON = json.dumps({"items": [{"id": i, "note": None, "tags": []} for i in range(80)]})
OUTPUT = st.one_of(
    st.sampled_from(["ok", "", "   \n", _LOG, _LOG[: len(_LOG) // 2], _HTML, _JSON]),
    st.builds(lambda i, n: f"run {i}\n{_LOG[:n]}", st.integers(0, 50), st.integers(300, 3_000)),
    st.builds(lambda i, n: f"run {i}\n{_LOG[:n]}", st.integers(0, 50), st.integers(300, 3_000)),
    st.text(max_size=200),
    st.binary(max_size=120),
    st.builds(lambda n, s: s * n, st.integers(1, 400), st.sampled_from(["x", "line\n", "é\r"])),
)


@dataclass(frozen=True)
class Calls:
    """One model turn that called tools (several at once: parallel calls)."""

    calls: tuple[tuple[str, int, Any], ...]  # (tool, args index, output)
    reverse_ingest: bool


@dataclass(frozen=True)
class Step:
    kind: str  # "calls", "user", "answer", "gap", "reload"
    calls: Calls | None = None


CALLS = st.builds(
    lambda calls, rev: Step("calls", Calls(tuple(calls), rev)),
    st.lists(
        st.tuples(st.sampled_from(TOOLS), st.integers(0, len(ARGS) - 1), OUTPUT),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
STEP = st.one_of(
    CALLS,
    CALLS,
    CALLS,
    CALLS,
    st.just(Step("user")),
    st.just(Step("answer")),
    st.just(Step("gap")),
    st.just(Step("reload")),
)


@dataclass
class Twin:
    """A pilot, and how to rebuild it from its exported state (the reloading twin)."""

    store: InMemoryArtifactStore
    config: Config
    pilot: CachePilot = field(init=False)

    def __post_init__(self) -> None:
        self.pilot = CachePilot(self.config, store=self.store)

    def reload(self) -> None:
        saved = self.pilot.export_state("t")
        self.pilot = CachePilot(self.config, store=self.store)
        self.pilot.load_state("t", json.dumps(saved))


def _wire(view: list[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in view]


@FUZZ
@given(st.lists(STEP, min_size=10, max_size=40), st.sampled_from([CONFIG, FIXED]))
def test_sessions_keep_every_invariant(steps: list[Step], config: Config) -> None:
    store = InMemoryArtifactStore(retention_seconds=None, max_bytes_per_thread=None,
                                  max_total_bytes=None)  # fmt: skip
    steady, reloaded = Twin(store, config), Twin(store, config)
    transcript = [Message(role="user", content="Task 1: fix the build")]
    now, tasks, calls = 1_000.0, 1, 0
    previous: list[dict[str, Any]] | None = None
    edited: set[str] = set()  # tool calls whose result a request showed edited
    for step in steps:
        if step.kind == "reload":
            reloaded.reload()
            continue
        if step.kind == "gap":
            now += 7_200.0  # past every provider's cache TTL: a cold resume
            continue
        if step.kind == "user":
            tasks += 1
            transcript.append(Message(role="user", content=f"Task {tasks}: next thing"))
            continue
        # A model call: prepare the request, then the model's turn is appended.
        now += 3.0
        epochs = len(steady.pilot.state("t").plan.epochs)
        requests = []
        for twin in (steady, reloaded):
            _, view, _ = twin.pilot.prepare("You are a coder.", transcript, [], "t", now=now)
            requests.append(_wire(view))
        assert requests[0] == requests[1], "a reloaded state sends another request"
        request = requests[0]
        assert pairing_issues(view) == []
        if previous is not None and len(steady.pilot.state("t").plan.epochs) == epochs:
            assert request[: len(previous)] == previous, "history changed between maintenance"
        previous = request
        results_by_id = {m.tool_call_id: m.text for m in transcript if m.role == "tool"}
        for message in view:
            if message.role != "tool" or message.tool_call_id not in results_by_id:
                continue
            if message.text != results_by_id[message.tool_call_id]:
                edited.add(message.tool_call_id)
            else:
                assert message.tool_call_id not in edited, "a stubbed result came back whole"
        for ref in {m for message in view for m in REF.findall(message.text)}:
            assert store.get("t", ref) is not None, f"the request names {ref}, not archived"
        if step.kind == "answer" or step.calls is None:
            transcript.append(Message(role="assistant", content=f"Answer {calls}."))
            continue
        tool_calls = tuple(
            ToolCall(id=f"call_{calls}_{n}", name=name, arguments=json.dumps(ARGS[args]))
            for n, (name, args, _out) in enumerate(step.calls.calls)
        )
        calls += 1
        transcript.append(Message(role="assistant", content="", tool_calls=tool_calls))
        results = list(zip(tool_calls, step.calls.calls, strict=True))
        if step.calls.reverse_ingest:
            results.reverse()  # parallel results may arrive in any order
        for call, (name, args, output) in results:
            texts = [
                twin.pilot.ingest_report(name, ARGS[args], output, call.id, "t")
                for twin in (steady, reloaded)
            ]
            assert texts[0] == texts[1]
            report = texts[0]
            assert report.text or normalize_output(output).text == ""
            if report.ref is not None:
                archived = store.get("t", report.ref)
                assert archived is not None
                original = normalize_output(output).original
                if isinstance(original, str):
                    original = original.encode("utf-8", "surrogatepass")
                assert archived.data == original
            transcript.append(
                Message(role="tool", content=report.text, tool_call_id=call.id, name=name)
            )
    plan = steady.pilot.state("t").plan
    kinds = sorted({edit.kind for epoch in plan.epochs for edit in epoch.edits})
    event(f"epochs: {min(len(plan.epochs), 3)}+ {'/'.join(kinds) or '-'}")
    event(f"settled units: {steady.pilot.state('t').lifecycle.settled_units > 0}")

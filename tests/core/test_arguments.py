"""Large tool-call arguments: reduced at maintenance points, recallable byte-identical.

The rewritten arguments must keep the call pairable (same id and name) and pass the
provider's validation of tool-call JSON (parsed, and valid against the tool's own schema).
"""

from __future__ import annotations

import json

import pytest

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig, prune_candidates
from cachepilot.messages import Message, ToolCall, message_keys, pairing_issues
from cachepilot.plan.arguments import argument_stub, reduce_arguments
from cachepilot.plan.epochs import Edit, Epoch, Plan, PlanRenderer, render_plan
from cachepilot.recall.tool import recall
from cachepilot.refs import make_ref
from cachepilot.tokens import get_counter
from cachepilot_bench import BenchConfig
from cachepilot_bench.harness import run_session
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.report import strategy_totals
from cachepilot_bench.synthetic import WRITE_TOOLS, large_write_session, module_source

REF_NOTE = 'full value: recall(ref="'


def test_object_keeps_its_keys_order_and_short_values() -> None:
    content = module_source(0, 10_000)
    raw = json.dumps({"file_path": "src/a.py", "content": content, "mode": 420, "flag": True})
    reduced = reduce_arguments(raw, min_chars=2_000, preview_chars=300)
    assert reduced is not None
    value = json.loads(reduced.text)
    assert list(value) == ["file_path", "content", "mode", "flag"]
    assert value["file_path"] == "src/a.py" and value["mode"] == 420 and value["flag"] is True
    assert value["content"].startswith(content[:100])
    assert f'{REF_NOTE}{make_ref(content)}")' in value["content"]
    assert reduced.values == ((content, make_ref(content)),)
    assert len(reduced.text) < 600


def test_nested_values_each_get_their_own_ref() -> None:
    old, new = "o" * 3_000, "n" * 4_000
    raw = json.dumps({"path": "a", "edits": [{"old": old, "new": new}, {"old": "x", "new": "y"}]})
    reduced = reduce_arguments(raw, min_chars=2_000, preview_chars=100)
    assert reduced is not None
    value = json.loads(reduced.text)
    assert value["edits"][1] == {"old": "x", "new": "y"}
    assert [v for v, _ in reduced.values] == [old, new]
    assert make_ref(new) in value["edits"][0]["new"]


def test_free_form_and_json_string_arguments() -> None:
    patch = "*** Begin Patch\n" + "+line\n" * 1_000
    reduced = reduce_arguments(patch, min_chars=2_000, preview_chars=200)
    assert reduced is not None and reduced.text.startswith("*** Begin Patch")
    assert make_ref(patch) in reduced.text
    quoted = json.dumps("q" * 5_000)
    as_json = reduce_arguments(quoted, min_chars=2_000, preview_chars=200)
    assert as_json is not None and isinstance(json.loads(as_json.text), str)


def test_small_or_odd_arguments_are_left_alone() -> None:
    assert reduce_arguments('{"command": "ls"}', min_chars=2_000, preview_chars=300) is None
    many_small = json.dumps({f"k{i}": "v" * 100 for i in range(100)})
    assert reduce_arguments(many_small, min_chars=2_000, preview_chars=300) is None
    deep = "[" * 5_000 + "]" * 5_000
    assert reduce_arguments(deep, min_chars=2_000, preview_chars=300) is not None  # as text


def test_preview_has_no_credentials() -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8" * 4
    value = f"API_KEY = '{secret}'\n" + "x = 1\n" * 1_000
    stub = argument_stub(value, make_ref(value), 300)
    assert secret not in stub and make_ref(value) in stub


def _write_transcript(writes: int, chars: int) -> tuple[list[Message], list[str]]:
    transcript: list[Message] = [Message("user", "write the modules")]
    contents = []
    for k in range(writes):
        content = module_source(k, chars)
        contents.append(content)
        call = ToolCall(f"w{k}", "write", json.dumps({"file_path": f"m{k}.py", "content": content}))
        transcript += [
            Message("assistant", f"writing m{k}", tool_calls=(call,)),
            Message("tool", "ok", tool_call_id=call.id, name="write"),
        ]
    for k in range(5):
        call = ToolCall(f"b{k}", "bash", json.dumps({"command": f"pytest -k {k}"}))
        transcript += [
            Message("assistant", "testing", tool_calls=(call,)),
            Message("tool", f"{k} passed", tool_call_id=call.id, name="bash"),
        ]
    return transcript, contents


def test_candidates_skip_the_protected_tail_and_running_calls() -> None:
    transcript, _ = _write_transcript(3, 20_000)
    counter = get_counter()
    config = MaintenanceConfig(protect_results=6)
    keys = message_keys(transcript)
    found = prune_candidates(transcript, keys, counter, config, already=set())
    # The last 6 results are the third write's and the five test runs'.
    assert [(c.kind, c.calls) for c in found if c.kind == "args"] == [
        ("args", ("w0",)),
        ("args", ("w1",)),
    ]
    pending = [*transcript[:3], transcript[3]]  # the second write still running
    found = prune_candidates(
        pending, message_keys(pending), counter, MaintenanceConfig(), already=set()
    )
    assert [c.calls for c in found if c.kind == "args"] == []
    off = MaintenanceConfig(protect_results=6, reduce_arguments=False)
    assert not [
        c
        for c in prune_candidates(transcript, keys, counter, off, already=set())
        if c.kind == "args"
    ]


def test_plan_renders_argument_edits_incrementally() -> None:
    transcript, _contents = _write_transcript(2, 10_000)
    keys = message_keys(transcript)
    reduced = reduce_arguments(
        transcript[1].tool_calls[0].arguments, min_chars=2_000, preview_chars=300
    )
    assert reduced is not None
    edit = Edit(kind="args", key=keys[1], text=reduced.text, call_id="w0")
    plan = Plan(epochs=[Epoch(index=0, reason="test", edits=[edit])])
    view = render_plan(transcript, plan, keys).messages
    assert view[1].tool_calls[0].arguments == reduced.text
    assert view[1].tool_calls[0].id == "w0" and view[1].tool_calls[0].name == "write"
    assert view[1].text == transcript[1].text and view[3] is transcript[3]
    assert render_plan(transcript, plan, keys).messages[1] is view[1]  # memoised
    renderer = PlanRenderer()
    renderer.render(transcript[:6], plan, keys[:6])
    grown = renderer.render(transcript, plan, keys)
    assert renderer.extended_from is not None
    assert grown.messages == view


def test_pilot_reduces_large_writes_and_recalls_each_value_byte_identical() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    session = large_write_session()
    # Folds off: with them, the cost model folds the writes away before their arguments
    # are worth reducing (benchmarks/large_arguments.py shows both).
    strategy = CachePilotStrategy(Config(maintenance=MaintenanceConfig(fold_by_cost=False)))
    result = run_session(session, strategy, BenchConfig(workers=1))
    assert result.error is None
    pilot, thread = strategy.pilot, session.id
    edits = [e for ep in pilot.state(thread).plan.epochs for e in ep.edits if e.kind == "args"]
    assert edits, "a maintenance point must have reduced the writes' arguments"
    # The view as it is sent at the end of the session.
    _system, view, _tools = pilot.prepare(
        session.messages[0].text, strategy.state, session.tools, thread
    )
    assert pairing_issues(view) == []
    originals = {c.id: c.arguments for m in session.messages for c in m.tool_calls}
    schema = WRITE_TOOLS[0]["function"]["parameters"]  # type: ignore[index]
    reduced_calls = 0
    for message in view:
        for call in message.tool_calls:
            args = json.loads(call.arguments)  # the provider's JSON check
            if call.name != "write":
                continue
            jsonschema.validate(args, schema)
            original = json.loads(originals[call.id])
            if call.arguments == originals[call.id]:
                continue
            reduced_calls += 1
            assert args["file_path"] == original["file_path"]
            ref = args["content"].rsplit('recall(ref="', 1)[1][:12]
            got = recall(pilot.store, thread, ref, max_chars=200_000, max_chars_cap=200_000)
            assert got.content == original["content"]  # byte-identical
            stored = pilot.store.get(thread, ref)
            assert stored is not None and stored.text == original["content"]
    assert reduced_calls == len(edits)
    whole = pilot.store.get(thread, edits[0].ref or "")
    assert whole is not None and whole.text == originals[edits[0].call_id or ""]


def test_bench_cost_of_large_writes_drops() -> None:
    session = large_write_session()
    config = BenchConfig(workers=1)
    costs = {}
    # Without cost-model folds, which would fold the writes away first.
    kept = MaintenanceConfig(reduce_arguments=False, fold_by_cost=False)
    for name, strategy in (
        ("off", CachePilotStrategy(Config(maintenance=kept))),
        ("on", CachePilotStrategy(Config(maintenance=MaintenanceConfig(fold_by_cost=False)))),
    ):
        costs[name] = strategy_totals([run_session(session, strategy, config)])
    assert costs["on"]["input_cost_usd"] < 0.97 * costs["off"]["input_cost_usd"]
    assert costs["on"]["mean_context_tokens"] < costs["off"]["mean_context_tokens"]


def test_argument_edits_survive_a_reload() -> None:
    transcript, _ = _write_transcript(3, 20_000)
    config = Config(maintenance=MaintenanceConfig(schedule="fixed", every=1, protect_results=2))
    store = InMemoryArtifactStore()
    pilot = CachePilot(config, store=store)
    _, view, _ = pilot.prepare("sys", transcript, (), "t")
    assert any(
        c.arguments != o.arguments
        for m, n in zip(view, transcript, strict=True)
        for c, o in zip(m.tool_calls, n.tool_calls, strict=True)
    )
    again = CachePilot(config, store=store)
    again.load_state("t", pilot.export_state("t"))
    _, reloaded, _ = again.prepare("sys", transcript, (), "t", maintain=False)
    assert reloaded == view

"""State stays as large as the live work: folds and stubs settle what they cover."""

from __future__ import annotations

import json

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.lifecycle import LifecycleRegistry
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall, message_keys


def session(calls: int, task_every: int = 25) -> list[list[Message]]:
    """Transcript snapshots of a coding agent: re-read files, test runs, a new task every
    `task_every` calls (tool outputs as the pilot would reduce them are not needed here)."""
    messages = [Message(role="user", content="Task 0: fix the bug in module 0")]
    snapshots = []
    for i in range(calls):
        if i and i % task_every == 0:
            messages.append(
                Message(role="assistant", content=f"Done with task {i // task_every - 1}.")
            )
            messages.append(Message(role="user", content=f"Task {i // task_every}: fix module {i}"))
        snapshots.append(list(messages))
        path = f"/repo/src/mod{i % 40}.py"
        if i % 3:
            name, args = "read_file", {"path": path}
            out = "\n".join(f"{path}:{j}: value_{j} = {i * j}" for j in range(60))
        else:
            name, args = "bash", {"command": f"pytest tests/test_{i % 17}.py"}
            out = "\n".join(f"test_{k} PASSED in {i + k} ms" for k in range(40))
        call = ToolCall(id=f"call_{i}", name=name, arguments=json.dumps(args))
        messages.append(Message(role="assistant", content="", tool_calls=(call,)))
        messages.append(Message(role="tool", content=out, tool_call_id=call.id, name=name))
    snapshots.append(list(messages))
    return snapshots


def run(
    config: Config, snapshots: list[list[Message]], reload_at: frozenset[int] = frozenset()
) -> tuple[list[list[Message]], list[int]]:
    store = InMemoryArtifactStore()
    pilot = CachePilot(config, store=store)
    views, sizes = [], []
    for i, snapshot in enumerate(snapshots):
        if i in reload_at:
            saved = pilot.state("t").model_dump_json()
            pilot = CachePilot(config, store=store)
            pilot.load_state("t", saved)
        _, view, _ = pilot.prepare("You are a coder.", snapshot, [], "t", now=1_000.0 + 5 * i)
        views.append(view)
        sizes.append(len(pilot.state("t").model_dump_json()))
    return views, sizes


def test_state_stays_small_and_the_views_do_not_change() -> None:
    snapshots = session(450)
    for config in (Config(), Config(maintenance=MaintenanceConfig(fold_finished_tasks=True))):
        views, sizes = run(config, snapshots)
        # About 0.7 KB per call before settling (≈ 320 KB here, +160 KB over the second half);
        # now bounded by the live work (68 KB and 25 KB, +4 KB and +2 KB).
        assert sizes[-1] < 100_000, sizes[-1]
        assert sizes[-1] - sizes[225] < 30_000
        reloaded, _ = run(config, snapshots, frozenset({97, 301, 388}))
        assert [[m.to_dict() for m in v] for v in reloaded] == [
            [m.to_dict() for m in v] for v in views
        ]


def test_a_settled_registry_resumes_where_it_stopped() -> None:
    snapshots = session(120)
    config = Config(maintenance=MaintenanceConfig(fold_finished_tasks=True))
    store = InMemoryArtifactStore()
    pilot = CachePilot(config, store=store)
    for i, snapshot in enumerate(snapshots):
        pilot.prepare("You are a coder.", snapshot, [], "t", now=1_000.0 + 5 * i)
    registry = pilot.state("t").lifecycle
    assert registry.settled_units > 0 and registry.settled_tasks > 0
    assert len(registry.segments) < registry.settled_units
    reloaded = LifecycleRegistry.model_validate_json(registry.model_dump_json())
    assert reloaded == registry
    transcript = snapshots[-1]
    keys = message_keys(transcript)
    reloaded.observe(transcript, keys)
    assert reloaded._idx().processed == 0  # nothing observed twice
    assert reloaded == registry
    more = [*transcript, Message(role="user", content="Task 99: one more thing")]
    reloaded.observe(more, message_keys(more))
    assert reloaded._idx().processed == 1
    assert reloaded.tasks_started == registry.tasks_started + 1


def _writes(count: int, chars: int) -> list[Message]:
    """Writes of whole modules, with ids (keys stay when a framework rewrites a message)."""
    messages = [Message(role="user", content="write the modules", id="u0")]
    for k in range(count):
        body = "".join(f"def f{k}_{j}(x):\n    return x * {j}\n" for j in range(chars // 30))
        call = ToolCall(f"w{k}", "write", json.dumps({"file_path": f"m{k}.py", "content": body}))
        messages += [
            Message(role="assistant", content=f"writing m{k}", tool_calls=(call,), id=f"a{k}"),
            Message(role="tool", content="ok", tool_call_id=call.id, name="write", id=f"r{k}"),
        ]
    return messages


def _arg_edits(pilot: CachePilot, epochs: slice = slice(None)) -> list[str]:
    return [
        e.call_id or ""
        for ep in pilot.state("t").plan.epochs[epochs]
        for e in ep.edits
        if e.kind == "args"
    ]


def test_reduced_arguments_the_transcript_already_holds_settle_like_stubs() -> None:
    config = Config(
        maintenance=MaintenanceConfig(
            schedule="fixed", every=1, protect_results=1, protect_tool_tokens=0, min_prune_tokens=0
        )
    )
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    first = _writes(3, 12_000)
    _, view, _ = pilot.prepare("sys", first, [], "t", now=1_000.0)
    assert _arg_edits(pilot) == ["w0", "w1"]
    # A framework that writes edits back holds the reduced arguments in its transcript now.
    persisted = [*view, *_writes(5, 12_000)[len(first) :]]
    plan_before = pilot.state("t").plan.model_copy(deep=True)
    _, again, _ = pilot.prepare("sys", persisted, [], "t", now=1_010.0)
    assert len(pilot.state("t").plan.epochs) == 2  # a second epoch: the first one settles
    assert _arg_edits(pilot, slice(0, 1)) == []  # held by the transcript: dropped
    assert _arg_edits(pilot, slice(1, None)) == ["w2", "w3"]
    reference = CachePilot(config, store=InMemoryArtifactStore())
    reference.load_state("t", pilot.export_state("t"))
    reference.state("t").plan.epochs[0] = plan_before.epochs[0]
    _, unsettled, _ = reference.prepare("sys", persisted, [], "t", now=1_010.0, maintain=False)
    assert again == unsettled  # the view is the same with or without the settled edits


def test_reduced_arguments_inside_a_fold_settle() -> None:
    config = Config(
        maintenance=MaintenanceConfig(
            schedule="fixed", every=1, protect_results=1, protect_tool_tokens=0, min_prune_tokens=0
        )
    )
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    transcript = _writes(4, 12_000)
    pilot.prepare("sys", transcript, [], "t", now=1_000.0)
    assert _arg_edits(pilot) == ["w0", "w1", "w2"]
    more = [*transcript, *_writes(6, 600)[len(transcript) :]]
    assert pilot.emergency_fold("sys", more, "t")
    _, view, _ = pilot.prepare("sys", more, [], "t", now=1_010.0)
    assert any((m.id or "").startswith("cachepilot-fold-") for m in view)
    # The fold covers the reduced calls: a later maintenance point drops their edits.
    more = [*more, Message(role="user", content="now the docs"), *_writes(8, 600)[len(more) :]]
    pilot.prepare("sys", more, [], "t", now=1_020.0)
    folded_calls = {"w0", "w1", "w2"}
    assert not folded_calls & set(_arg_edits(pilot, slice(0, -1)))

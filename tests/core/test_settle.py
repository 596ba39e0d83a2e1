"""State stays as large as the live work: folds and stubs settle what they cover."""

from __future__ import annotations

import json

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.lifecycle import LifecycleRegistry
from cachepilot.maintenance import MaintenanceConfig
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

"""The estimator protocol and the rule estimator (DESIGN §6 "Lifecycle").

Rules, evaluated on the facts `LifecycleRegistry.observe` recorded:

- a task is `completed` once it ended (a new user turn started the next task, or the agent
  declared done: a final answer without tool calls, a finishing tool, a done marker); a
  completed task whose work resumes (no new user turn) goes back to `active`, with its
  completed units;
- a unit is `evictable` when **superseded**: every effect of its calls was made stale by a
  later unit (the file re-read or edited/written later, the same command re-run);
- a unit of a completed task is `evictable` when, `grace_calls` calls after the task ended,
  **no later message** mentions its resources (paths, identifiers from its arguments, and
  identifiers its output produced) within the last `reference_window` calls; while one does,
  it stays `completed` (alive). `reference_window=None` keeps a unit referenced once after
  its task ended alive for good;
- a completed task is `evictable` as a whole (the scheduler may fold it) once a later user
  turn started the next task and every one of its units is evictable; a task without any
  unit (a tool-less exchange: a plain chat turn, a file or few-shot example sent as messages)
  is conversation, not finished work, and never evictable (DESIGN §2.7);
- never: the last `protect_last_units` units, and units still waiting for tool results.
"""

from __future__ import annotations

from collections.abc import Sequence

from cachepilot.lifecycle.model import LifecycleDelta, Segment, SegmentState
from cachepilot.lifecycle.registry import Estimator, LifecycleRegistry
from cachepilot.messages import Message, message_keys

__all__ = ["Estimator", "RuleEstimator"]

_ACTIVE = SegmentState.ACTIVE
_COMPLETED = SegmentState.COMPLETED
_EVICTABLE = SegmentState.EVICTABLE


def _describe_superseded(unit: Segment) -> str:
    parts: list[str] = []
    for effect in unit.effects[:2]:
        shown = effect.target if len(effect.target) <= 48 else "…" + effect.target[-47:]
        parts.append(f"{effect.op} {shown}")
    more = f" +{len(unit.effects) - 2}" if len(unit.effects) > 2 else ""
    return "superseded: " + (", ".join(parts) + more if parts else "stale")


class RuleEstimator:
    """Deterministic lifecycle rules: supersession, task completion, later references.

    Args:
        protect_last_units: the most recent units are never marked evictable.
        grace_calls: calls after a task ended before its unreferenced units are evictable
            (lets the next turn's first calls show whether they still need them).
        reference_window: a mention keeps a completed unit alive for this many calls
            (`None`: for good).
        supersession: apply the supersession rule.
        task_completion: apply the completed-task rule.
        task_eviction: mark a finished task evictable once all its units are.

    Raises:
        ValueError: on a negative count or a `reference_window` < 1.
    """

    name = "rules"

    def __init__(
        self,
        *,
        protect_last_units: int = 3,
        grace_calls: int = 3,
        reference_window: int | None = 12,
        supersession: bool = True,
        task_completion: bool = True,
        task_eviction: bool = True,
    ) -> None:
        if protect_last_units < 0:
            raise ValueError(f"protect_last_units must be >= 0, got {protect_last_units}")
        if grace_calls < 0:
            raise ValueError(f"grace_calls must be >= 0, got {grace_calls}")
        if reference_window is not None and reference_window < 1:
            raise ValueError(f"reference_window must be >= 1 or None, got {reference_window}")
        self.protect_last_units = protect_last_units
        self.grace_calls = grace_calls
        self.reference_window = reference_window
        self.supersession = supersession
        self.task_completion = task_completion
        self.task_eviction = task_eviction

    def evaluate(
        self,
        registry: LifecycleRegistry,
        messages: Sequence[Message],
        keys: Sequence[str] | None = None,
    ) -> list[LifecycleDelta]:
        """Observe `messages` (idempotent) and propose deltas from the registry's facts."""
        if messages:
            registry.observe(messages, message_keys(messages) if keys is None else keys)
        return self.propose(registry)

    async def aevaluate(
        self,
        registry: LifecycleRegistry,
        messages: Sequence[Message],
        keys: Sequence[str] | None = None,
    ) -> list[LifecycleDelta]:
        """Same as `evaluate` (the rules need no I/O)."""
        return self.evaluate(registry, messages, keys)

    def propose(self, registry: LifecycleRegistry) -> list[LifecycleDelta]:
        """Deltas from the facts already observed (cost: tasks + units not yet evictable)."""
        deltas: list[LifecycleDelta] = []
        protected = set(registry.recent_unit_ids(self.protect_last_units))
        task_state: dict[str, SegmentState] = {}
        for task in registry.tasks():
            ended = task.ended_at_call is not None or task.done_at_call is not None
            target = task.state
            if task.state is _ACTIVE and ended:
                target = _COMPLETED
                reason = (
                    f"next task started at call {task.ended_at_call}"
                    if task.ended_at_call is not None
                    else f"agent declared done at call {task.done_at_call}"
                )
                deltas.append(self._delta(task, target, reason))
            elif task.state is _COMPLETED and not ended:
                target = _ACTIVE
                deltas.append(self._delta(task, target, "task resumed"))
            task_state[task.id] = target
        for unit in registry.alive_units():
            if unit.pending:
                continue
            guarded = unit.id in protected
            tstate = task_state.get(unit.task or "", _ACTIVE)
            if self.supersession and unit.superseded_by is not None and not guarded:
                deltas.append(self._delta(unit, _EVICTABLE, _describe_superseded(unit)))
            elif tstate is not _ACTIVE and self.task_completion:
                end = self._task_end(registry.segments[unit.task or ""])
                since = end
                if self.reference_window is not None:
                    since = max(end, registry.calls - self.reference_window)
                referenced = unit.last_ref_call is not None and unit.last_ref_call >= since
                if referenced or guarded or registry.calls - end < self.grace_calls:
                    if unit.state is _ACTIVE:
                        why = (
                            f"referenced at call {unit.last_ref_call}"
                            if referenced
                            else ("recent" if guarded else "grace")
                        )
                        reason = f"task completed at call {end}; {why}"
                        deltas.append(self._delta(unit, _COMPLETED, reason))
                else:
                    reason = f"task completed at call {end}; not referenced since call {since}"
                    deltas.append(self._delta(unit, _EVICTABLE, reason))
            elif tstate is _ACTIVE and unit.state is _COMPLETED:
                deltas.append(self._delta(unit, _ACTIVE, "task resumed"))
        if self.task_eviction:
            deltas += self._finished_tasks(registry, task_state, deltas)
        return deltas

    def _finished_tasks(
        self,
        registry: LifecycleRegistry,
        task_state: dict[str, SegmentState],
        deltas: Sequence[LifecycleDelta],
    ) -> list[LifecycleDelta]:
        """Tasks with work that a later user turn ended whose units are all evictable
        (after `deltas`); tool-less exchanges are conversation and stay."""
        unit_state = {u.id: u.state for u in registry.units()}
        unit_state.update({d.segment_id: d.to_state for d in deltas})
        out: list[LifecycleDelta] = []
        for task in registry.tasks():
            if (
                task_state.get(task.id) is not _COMPLETED
                or task.ended_at_call is None
                or task.id == registry.current_task
                or not registry.has_work(task)
            ):
                continue
            units = [k for k in task.keys if f"unit:{k}" in unit_state]
            if all(unit_state[f"unit:{k}"] is _EVICTABLE for k in units):
                reason = f"next task started at call {task.ended_at_call}; all its work evictable"
                out.append(
                    LifecycleDelta(
                        segment_id=task.id,
                        to_state=_EVICTABLE,
                        reason=reason,
                        from_state=_COMPLETED,
                        source=self.name,
                    )
                )
        return out

    @staticmethod
    def _task_end(task: Segment) -> int:
        """Call ordinal from which a mention counts as later than the task."""
        if task.ended_at_call is not None:
            return task.ended_at_call
        return task.done_at_call if task.done_at_call is not None else 0

    def _delta(self, seg: Segment, target: SegmentState, reason: str) -> LifecycleDelta:
        return LifecycleDelta(
            segment_id=seg.id,
            to_state=target,
            reason=reason,
            from_state=seg.state,
            source=self.name,
        )

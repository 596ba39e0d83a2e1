"""The lifecycle registry: segments of one thread, the facts estimators judge, valid transitions.

`observe` is incremental (only messages with unseen keys cost work) and records structure and
facts: tasks and work units, what each unit's calls touched (`Effect`s), which later unit
superseded them, and when later messages mentioned a unit's resources. Estimators turn facts
into `LifecycleDelta`s; `apply` accepts the valid ones only. The registry is a small
JSON-serialisable pydantic model; its lookup indexes are private and rebuilt on first use
after loading.
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from cachepilot.lifecycle.model import (
    Effect,
    InvalidTransition,
    LifecycleDelta,
    Segment,
    SegmentState,
    can_transition,
)
from cachepilot.lifecycle.resources import (
    call_facts,
    looks_failed,
    message_mentions,
    output_facts,
    path_variants,
    same_path,
)
from cachepilot.messages import Message, message_keys
from cachepilot.support.redact import redact

__all__ = ["DEFAULT_CONTINUE_PATTERNS", "Estimator", "LifecycleRegistry", "supersedes"]

logger = logging.getLogger(__name__)

DEFAULT_CONTINUE_PATTERNS: tuple[str, ...] = (
    r"(?i:continue|go on|keep going|proceed|carry on)\b",
    r"^Please always provide EXACTLY ONE action",
    r"^\[Request interrupted",
    r"^<task-notification>",
    r"^<system-reminder>",
)
"""User messages that continue the current task instead of starting a new one (harness
feedback, "continue"). A user message right after another user message always continues."""

_MAX_REASON = 200
_MAX_TASK_LABEL = 80
_MAX_UNIT_RESOURCES = 32
_MAX_UNIT_LABEL = 160
_MAX_SCAN = 200_000
_KEEP_PATHS = 8
_MAX_SOURCE = 100


def supersedes(new: Effect, old: Effect) -> bool:
    """True when a later call's effect `new` makes the output of `old` stale or redundant.

    - a read (of a range) is superseded by a later whole read, a read of the same range, or
      any edit or write of the file (its content is stale);
    - an edit or a write is superseded by a later whole write (overwrite, delete) or a whole
      read (which shows the result). A later *edit* does not supersede an earlier edit: the
      record of what was changed stays useful;
    - a run is superseded by a later run with the same normalised source key.
    """
    if new.op == "run" or old.op == "run":
        return new.op == old.op and new.target == old.target
    if not same_path(new.target, old.target):
        return False
    if old.op == "read":
        return new.op in {"edit", "write"} or (new.span in {"", old.span})
    return new.op == "write" or (new.op == "read" and new.span == "")


@dataclass(slots=True)
class _Index:
    seen: set[str] = field(default_factory=set)
    by_key: dict[str, str] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    files: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    runs: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    refs: dict[str, set[str]] = field(default_factory=dict)
    units: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    alive: dict[str, None] = field(default_factory=dict)
    cursor: tuple[int, str] | None = None
    processed: int = 0
    """Messages processed by `observe` since the index was built (for linearity checks)."""
    outputs_ready: bool = False
    """Output facts of units observed before the index was built are registered."""


class LifecycleRegistry(BaseModel):
    """Tasks and work units of one thread, their states and the facts behind them.

    Example:
        reg = LifecycleRegistry()
        reg.observe(messages, message_keys(messages))
        reg.apply(RuleEstimator().evaluate(reg, messages, keys))
        for unit in reg.evictable():
            ...
    """

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    segments: dict[str, Segment] = Field(default_factory=dict)
    """Every segment by id, in creation order."""
    calls: int = 0
    """Model calls (assistant messages) observed."""
    current_task: str | None = None
    """Id of the task new messages belong to."""
    tasks_started: int = 0
    """User turns that started a task."""
    outside_keys: list[str] = Field(default_factory=list)
    """Keys of messages in no segment (system messages)."""
    open_file: str | None = None
    """File open in an editor tool without path arguments (SWE-agent `open` / `edit`)."""
    last_role: str | None = None
    """Role of the last message observed (system messages aside)."""
    evaluated_at_call: int = 0
    """`calls` at the last evaluation (see `due`)."""
    continue_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_CONTINUE_PATTERNS))
    """Regexes (matched at the start of a user message) that continue the current task."""
    edit_supersedes_read: bool = True
    """An edit of a file supersedes earlier reads of it (their content is stale). Off: only a
    re-read or a whole write does (keeps more file text visible, evicts less)."""
    output_refs: bool = True
    """Also count a later mention of an identifier a unit's *output* produced (an id, a date,
    a flight number) as a reference to the unit. These lookups live in the private index
    (rebuilt from the transcript after loading), not in the JSON."""
    last_key: str | None = None
    """Key of the last message observed: where observation resumes once segments were
    settled (see `compact`)."""
    settled_units: int = 0
    """Units dropped by `compact` (their results stubbed or folded)."""
    settled_tasks: int = 0
    """Finished tasks dropped by `compact` (folded whole)."""
    settled_task_calls: int = 0
    """Model calls those tasks ran, summed (the mean task length stays known)."""

    _index: _Index | None = PrivateAttr(default=None)
    _continue_re: list[re.Pattern[str]] | None = PrivateAttr(default=None)
    _transitions: int = PrivateAttr(default=0)

    @field_validator("continue_patterns")
    @classmethod
    def _compile_patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"continue_patterns: bad regex {pattern!r}: {exc}") from exc
        return value

    # --- queries ---------------------------------------------------------------------------

    def segment_for_key(self, key: str) -> Segment | None:
        """The unit holding the message with `key`, else its task; `None` when in neither."""
        seg_id = self._idx().by_key.get(key)
        return self.segments.get(seg_id) if seg_id is not None else None

    def tasks(self) -> list[Segment]:
        """Task segments, oldest first."""
        return [self.segments[t] for t in self._idx().tasks]

    def units(self) -> list[Segment]:
        """Work-unit segments, oldest first."""
        return [self.segments[u] for u in self._idx().units]

    @property
    def unit_ids(self) -> list[str]:
        """Ids of the work units, oldest first."""
        return list(self._idx().units)

    def recent_unit_ids(self, count: int) -> list[str]:
        """Ids of the `count` most recent units, oldest first (the protected tail)."""
        return self._idx().units[-count:] if count > 0 else []

    @property
    def transitions(self) -> int:
        """State changes applied to this object so far (not persisted): while it stays the
        same, `evictable()` gives the same units, so callers may keep its result."""
        return self._transitions

    def alive_units(self) -> list[Segment]:
        """Units that are not evictable, oldest first."""
        return [self.segments[u] for u in self._idx().alive]

    def __eq__(self, other: object) -> bool:
        # Equal when the persisted fields are: private look-up indexes are caches, rebuilt
        # after loading, and must not make a reloaded registry differ.
        if not isinstance(other, LifecycleRegistry):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    def evictable(self, exclude_keys: Iterable[str] = frozenset()) -> list[Segment]:
        """Evictable work units (whole messages: stubbing them never orphans a call or a
        result), oldest first; units holding any of `exclude_keys` are left out."""
        excluded = set(exclude_keys)
        out: list[Segment] = []
        for unit_id in self._idx().units:
            unit = self.segments[unit_id]
            if unit.state is SegmentState.EVICTABLE and not excluded.intersection(unit.keys):
                out.append(unit)
        return out

    def evictable_tasks(self) -> list[Segment]:
        """Tasks an estimator marked evictable as a whole (for folding), oldest first."""
        return [s for s in self.tasks() if s.state is SegmentState.EVICTABLE]

    def stats(self) -> dict[str, int]:
        """Counts by `<kind>_<state>` (e.g. `unit_evictable`) plus `calls`."""
        out: dict[str, int] = {"calls": self.calls}
        for seg in self.segments.values():
            name = f"{seg.kind}_{seg.state.value}"
            out[name] = out.get(name, 0) + 1
        return out

    # --- batching --------------------------------------------------------------------------

    def due(self, call_number: int | None = None, every: int = 3) -> bool:
        """True when `every` model calls passed since the last evaluation.

        Args:
            call_number: the thread's model-call count (default: calls observed).
            every: batch size B (DESIGN §6 starts from 3).

        Raises:
            ValueError: when `every` < 1.
        """
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        current = self.calls if call_number is None else call_number
        return current - self.evaluated_at_call >= every

    def mark_evaluated(self, call_number: int | None = None) -> None:
        """Record that an evaluation ran at `call_number` (default: calls observed)."""
        self.evaluated_at_call = self.calls if call_number is None else call_number

    def update(
        self,
        messages: Sequence[Message],
        keys: Sequence[str] | None,
        estimator: Estimator,
        *,
        every: int = 3,
        force: bool = False,
    ) -> list[LifecycleDelta]:
        """Observe, and when `due` (or `force`), evaluate with `estimator` and apply.

        Returns:
            The deltas applied (empty when no evaluation was due).
        """
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        keys = message_keys(messages) if keys is None else keys
        self.observe(messages, keys)
        if not (force or self.due(every=every)):
            return []
        applied = self.apply(estimator.evaluate(self, messages, keys))
        self.mark_evaluated()
        return applied

    async def aupdate(
        self,
        messages: Sequence[Message],
        keys: Sequence[str] | None,
        estimator: Estimator,
        *,
        every: int = 3,
        force: bool = False,
    ) -> list[LifecycleDelta]:
        """`update` with the estimator's `aevaluate` when it has one."""
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        keys = message_keys(messages) if keys is None else keys
        self.observe(messages, keys)
        if not (force or self.due(every=every)):
            return []
        aevaluate = getattr(estimator, "aevaluate", None)
        if aevaluate is not None:
            deltas: list[LifecycleDelta] = await aevaluate(self, messages, keys)
        else:
            deltas = estimator.evaluate(self, messages, keys)
        applied = self.apply(deltas)
        self.mark_evaluated()
        return applied

    # --- transitions -----------------------------------------------------------------------

    def check(self, delta: LifecycleDelta) -> str | None:
        """Why `delta` cannot be applied now (`None` when it can; `"no change"` for a no-op)."""
        seg = self.segments.get(delta.segment_id)
        if seg is None:
            return "unknown segment"
        if delta.from_state is not None and delta.from_state is not seg.state:
            return f"stale: expected {delta.from_state.value}, is {seg.state.value}"
        if delta.to_state is seg.state:
            return "no change"
        if not can_transition(seg.state, delta.to_state):
            return f"invalid transition {seg.state.value} -> {delta.to_state.value}"
        if delta.to_state is SegmentState.EVICTABLE and seg.pending:
            return "unit still waits for tool results"
        if (
            delta.to_state is SegmentState.EVICTABLE
            and seg.kind == "task"
            and not self.has_work(seg)
        ):
            return "a tool-less exchange is conversation, not finished work"
        return None

    def has_work(self, task: Segment) -> bool:
        """The task holds a tool exchange (a task without one is conversation: DESIGN §2.7)."""
        return task.work_units > 0 or any(f"unit:{key}" in self.segments for key in task.keys)

    def apply(self, deltas: Iterable[LifecycleDelta]) -> list[LifecycleDelta]:
        """Apply the valid deltas in order; skip the others (logged at DEBUG).

        Returns:
            The deltas applied.
        """
        applied: list[LifecycleDelta] = []
        for delta in deltas:
            problem = self.check(delta)
            if problem is not None:
                if problem != "no change":
                    logger.debug(
                        "lifecycle: skipped %s delta %s -> %s: %s",
                        delta.source,
                        delta.segment_id,
                        delta.to_state.value,
                        problem,
                    )
                continue
            self._set_state(self.segments[delta.segment_id], delta)
            applied.append(delta)
        return applied

    def apply_strict(self, deltas: Sequence[LifecycleDelta]) -> list[LifecycleDelta]:
        """Apply all deltas or none.

        Raises:
            InvalidTransition: on the first delta that is not valid in sequence (no-ops are
                skipped, not errors); nothing is applied then.
        """
        simulated: dict[str, SegmentState] = {}
        for delta in deltas:
            seg = self.segments.get(delta.segment_id)
            if seg is None:
                raise InvalidTransition(delta.segment_id, None, delta.to_state)
            current = simulated.get(seg.id, seg.state)
            if delta.from_state is not None and delta.from_state is not current:
                raise InvalidTransition(seg.id, current, delta.to_state, "(stale from_state)")
            if delta.to_state is current:
                continue
            if not can_transition(current, delta.to_state):
                raise InvalidTransition(seg.id, current, delta.to_state)
            if delta.to_state is SegmentState.EVICTABLE and seg.pending:
                raise InvalidTransition(seg.id, current, delta.to_state, "(pending results)")
            if (
                delta.to_state is SegmentState.EVICTABLE
                and seg.kind == "task"
                and not self.has_work(seg)
            ):
                raise InvalidTransition(seg.id, current, delta.to_state, "(tool-less exchange)")
            simulated[seg.id] = delta.to_state
        return self.apply(deltas)

    def _set_state(self, seg: Segment, delta: LifecycleDelta) -> None:
        self._transitions += 1
        seg.state = delta.to_state
        seg.reason = delta.reason[:_MAX_REASON]
        if delta.to_state is SegmentState.EVICTABLE and seg.kind == "unit":
            # Terminal: effects and lookup-only resources can no longer matter; keep it small.
            seg.effects = []
            seg.resources = [r for r in seg.resources if r.startswith("path:")][:_KEEP_PATHS]
            self._idx().alive.pop(seg.id, None)

    # --- observation -----------------------------------------------------------------------

    def observe(self, messages: Sequence[Message], keys: Sequence[str]) -> None:
        """Record the messages whose keys were not seen yet (idempotent, incremental).

        Feeding the same transcript again, or a longer one, costs work for the new messages
        only (an append-only transcript is resumed from the last position seen).

        Raises:
            ValueError: when `keys` and `messages` differ in length.
        """
        if len(keys) != len(messages):
            raise ValueError(f"keys ({len(keys)}) must align with messages ({len(messages)})")
        idx = self._idx()
        if not idx.outputs_ready:
            self._backfill_outputs(messages, keys)
        start = 0
        if (
            idx.cursor is not None
            and idx.cursor[0] < len(keys)
            and keys[idx.cursor[0]] == idx.cursor[1]
        ):
            start = idx.cursor[0] + 1
        elif self.settled_units or self.settled_tasks:
            # Settled segments were dropped, so their keys are unknown: everything up to the
            # last message known (observed last, or in a live segment) was observed already.
            start = self._resume_at(keys)
        for pos in range(start, len(messages)):
            key = keys[pos]
            if key in idx.seen:
                continue
            self._observe_one(messages[pos], key)
            self.last_key = key
        if keys:
            idx.cursor = (len(keys) - 1, keys[-1])

    def _resume_at(self, keys: Sequence[str]) -> int:
        """Position after the last key observed before (0 when none is in `keys`)."""
        seen = self._idx().seen
        for pos in range(len(keys) - 1, -1, -1):
            if keys[pos] == self.last_key or keys[pos] in seen:
                return pos + 1
        return 0

    # --- compaction ------------------------------------------------------------------------

    def compact(self, folded: Iterable[str], stubbed: Iterable[str] = ()) -> int:
        """Drop the segments that can never matter again; returns how many were dropped.

        `folded` holds the keys of messages inside folds the view applies, `stubbed` those of
        tool results the plan replaced by stubs. A unit whose results are all folded or
        stubbed (no later edit can concern it: the view shows none of its output), and a
        task (not the current one) whose messages are all folded are dropped with their
        lookups, so the registry stays as large as the live work; a task whose other units
        are all evictable counts as finished work. Counters keep what the estimators still
        use (how long finished tasks ran); observation resumes after the last message
        observed.
        """
        gone = set(folded)
        done = gone.union(stubbed)
        if not done:
            return 0
        idx = self._idx()
        dropped: set[str] = set()
        for unit_id in idx.units:
            unit = self.segments[unit_id]
            results = unit.keys[1:]
            if all(key in gone for key in unit.keys) or (
                not unit.pending
                and (results or unit.state is SegmentState.EVICTABLE)
                and all(key in done for key in results)
            ):
                dropped.add(unit_id)
        for task_id in idx.tasks:
            task = self.segments[task_id]
            if task_id != self.current_task and all(key in gone for key in task.keys):
                dropped.add(task_id)
                self.settled_tasks += 1
                if task.ended_at_call is not None:
                    self.settled_task_calls += task.ended_at_call - task.created_at_call
        if not dropped:
            return 0
        self.settled_units += sum(1 for seg_id in dropped if seg_id.startswith("unit:"))
        unit_keys = {
            key
            for seg_id in dropped
            if seg_id.startswith("unit:")
            for key in self.segments[seg_id].keys
        }
        for seg_id in dropped:
            del self.segments[seg_id]
        for task_id in idx.tasks:
            kept = self.segments.get(task_id)
            if kept is not None and unit_keys.intersection(kept.keys[1:]):
                # The first key stays: it names where the task starts (finished-task folds).
                kept.keys[1:] = [key for key in kept.keys[1:] if key not in unit_keys]
        self._forget(dropped)
        self._transitions += 1
        return len(dropped)

    def finished_task_calls(self) -> tuple[int, int]:
        """(model calls, tasks) over every task a later user turn ended, settled ones too."""
        lengths = [
            t.ended_at_call - t.created_at_call for t in self.tasks() if t.ended_at_call is not None
        ]
        return sum(lengths) + self.settled_task_calls, len(lengths) + self.settled_tasks

    def _forget(self, dropped: set[str]) -> None:
        """Remove dropped segments from the private lookups (their keys stay `seen`)."""
        idx = self._idx()
        idx.units = [u for u in idx.units if u not in dropped]
        idx.tasks = [t for t in idx.tasks if t not in dropped]
        for seg_id in dropped:
            idx.alive.pop(seg_id, None)
        idx.by_key = {k: v for k, v in idx.by_key.items() if v not in dropped}
        for table in (idx.files, idx.runs):
            for slot in list(table):
                kept = [(u, i) for u, i in table[slot] if u not in dropped]
                if kept:
                    table[slot] = kept
                else:
                    del table[slot]
        for token in list(idx.refs):
            holders = idx.refs[token] - dropped
            if holders:
                idx.refs[token] = holders
            else:
                del idx.refs[token]

    def _observe_one(self, message: Message, key: str) -> None:
        idx = self._idx()
        idx.processed += 1
        idx.seen.add(key)
        if message.role == "system":
            self.outside_keys.append(key)
            return
        if message.role == "tool":
            self._observe_result(message, key)
        else:
            self._close_pending()
            if message.role == "user":
                self._observe_user(message, key)
            else:
                self._observe_assistant(message, key)
        self.last_role = message.role

    def _continues(self, text: str) -> bool:
        if self._continue_re is None:
            self._continue_re = [re.compile(p) for p in self.continue_patterns]
        head = text.lstrip()[:500]
        return any(p.match(head) is not None for p in self._continue_re)

    def _observe_user(self, message: Message, key: str) -> None:
        idx = self._idx()
        ordinal = self.calls
        self._note_mentions(message, ordinal)
        task = self.segments.get(self.current_task) if self.current_task else None
        if task is None or (self.last_role != "user" and not self._continues(message.text)):
            if task is not None and task.ended_at_call is None:
                task.ended_at_call = ordinal
            self.tasks_started += 1
            first = next((ln.strip() for ln in message.text.splitlines() if ln.strip()), "")
            task = Segment(
                id=f"task:{self.tasks_started}",
                kind="task",
                created_at_call=ordinal,
                label=redact(first[: 4 * _MAX_TASK_LABEL])[:_MAX_TASK_LABEL],
            )
            self.segments[task.id] = task
            idx.tasks.append(task.id)
            self.current_task = task.id
        else:
            task.done_at_call = None  # the user continues the same task
        task.keys.append(key)
        idx.by_key[key] = task.id

    def _work_task(self, ordinal: int) -> Segment:
        task = self.segments.get(self.current_task) if self.current_task else None
        if task is None:
            task = Segment(id="task:0", kind="task", created_at_call=ordinal, label="(preamble)")
            self.segments[task.id] = task
            self._idx().tasks.append(task.id)
            self.current_task = task.id
        return task

    def _observe_assistant(self, message: Message, key: str) -> None:
        idx = self._idx()
        ordinal = self.calls
        self.calls += 1
        self._note_mentions(message, ordinal)
        task = self._work_task(ordinal)
        task.done_at_call = None  # any new work resumes a task that had declared done
        task.keys.append(key)
        idx.by_key[key] = task.id
        if not message.tool_calls:
            task.done_at_call = self.calls  # a final answer: the agent yields the turn
            return
        task.work_units += 1
        unit_id = f"unit:{key}"
        effects: list[Effect] = []
        resources: list[str] = []
        labels: list[str] = []
        done = False
        for call in message.tool_calls:
            facts = call_facts(call.name, call.arguments, self.open_file)
            if facts.open_file is not None:
                self.open_file = facts.open_file
            effects.extend(e.model_copy(update={"call_id": call.id}) for e in facts.effects)
            resources.extend(
                r if len(r) <= _MAX_SOURCE else r[: _MAX_SOURCE - 1] + "…" for r in facts.resources
            )
            labels.append(facts.label)
            done = done or facts.done
        label = "; ".join(labels)
        unit = Segment(
            id=unit_id,
            kind="unit",
            keys=[key],
            created_at_call=ordinal,
            task=task.id,
            label=label if len(label) <= _MAX_UNIT_LABEL else label[: _MAX_UNIT_LABEL - 1] + "…",
            pending=list(dict.fromkeys(c.id for c in message.tool_calls)),
            effects=effects,
            resources=list(dict.fromkeys(resources))[:_MAX_UNIT_RESOURCES],
        )
        self.segments[unit_id] = unit
        idx.by_key[key] = unit_id
        idx.units.append(unit_id)
        idx.alive[unit_id] = None
        for call_id in unit.pending:
            idx.pending[call_id] = unit_id
        self._register_refs(unit)
        if done:
            task.done_at_call = self.calls

    def _observe_result(self, message: Message, key: str) -> None:
        idx = self._idx()
        task = self._work_task(self.calls)
        task.keys.append(key)
        call_id = message.tool_call_id or ""
        unit_id = idx.pending.pop(call_id, None)
        if unit_id is None:
            idx.by_key[key] = task.id  # an unpaired result stays with its task
            return
        unit = self.segments[unit_id]
        unit.keys.append(key)
        idx.by_key[key] = unit_id
        text = message.text
        unit.output_chars += len(text)
        if self.output_refs:
            self._register_output(unit.id, text)
        if looks_failed(text):
            for i, effect in enumerate(unit.effects):
                if effect.call_id == call_id and effect.op in {"edit", "write"}:
                    # The file did not change: the failed attempt is stale like a read is.
                    unit.effects[i] = effect.model_copy(
                        update={"op": "read", "span": f"failed-{effect.op}"}
                    )
        if call_id in unit.pending:
            unit.pending.remove(call_id)
        if not unit.pending:
            self._finalize(unit)

    def _close_pending(self) -> None:
        idx = self._idx()
        if not idx.pending:
            return
        for unit_id in dict.fromkeys(idx.pending.values()):
            unit = self.segments[unit_id]
            unit.pending.clear()  # unanswered calls: the unit is closed with what it has
            self._finalize(unit)
        idx.pending.clear()

    def _finalize(self, unit: Segment) -> None:
        """A unit got all its results: let its effects supersede earlier units', index them."""
        idx = self._idx()
        touched: set[tuple[str, str]] = set()
        for effect in unit.effects:
            effect.call_id = None
            table, slot = self._slot(effect)
            for cand_id, at in table.get(slot, ()):
                if cand_id == unit.id:
                    continue
                cand = self.segments[cand_id]
                if cand.state is SegmentState.EVICTABLE or at >= len(cand.effects):
                    continue
                old = cand.effects[at]
                if (
                    old.superseded_by is None
                    and supersedes(effect, old)
                    and (self.edit_supersedes_read or (effect.op, old.op) != ("edit", "read"))
                ):
                    old.superseded_by = unit.id
                    touched.add(("files" if table is idx.files else "runs", slot))
                    if all(e.superseded_by is not None for e in cand.effects):
                        cand.superseded_by = unit.id
        for name, slot in touched:
            table = idx.files if name == "files" else idx.runs
            table[slot] = [
                (u, i)
                for u, i in table[slot]
                if self.segments[u].state is not SegmentState.EVICTABLE
                and i < len(self.segments[u].effects)
                and self.segments[u].effects[i].superseded_by is None
            ]
        for at, effect in enumerate(unit.effects):
            if effect.superseded_by is None:
                table, slot = self._slot(effect)
                table.setdefault(slot, []).append((unit.id, at))

    def _slot(self, effect: Effect) -> tuple[dict[str, list[tuple[str, int]]], str]:
        idx = self._idx()
        if effect.op == "run":
            return idx.runs, effect.target
        return idx.files, posixpath.basename(effect.target)

    def _register_refs(self, unit: Segment) -> None:
        refs = self._idx().refs
        for resource in unit.resources:
            kind, _, value = resource.partition(":")
            if kind == "path":
                for variant in path_variants(value):
                    refs.setdefault(variant, set()).add(unit.id)
            elif kind == "id":
                refs.setdefault(value, set()).add(unit.id)

    def _register_output(self, unit_id: str, text: str) -> None:
        refs = self._idx().refs
        for token in output_facts(text[:_MAX_SCAN]):
            refs.setdefault(token, set()).add(unit_id)

    def _backfill_outputs(self, messages: Sequence[Message], keys: Sequence[str]) -> None:
        idx = self._idx()
        idx.outputs_ready = True
        if not self.output_refs or not idx.seen:
            return
        for message, key in zip(messages, keys, strict=True):
            if message.role != "tool" or key not in idx.seen:
                continue
            unit_id = idx.by_key.get(key)
            if unit_id is not None and unit_id in idx.alive:
                self._register_output(unit_id, message.text)

    def _note_mentions(self, message: Message, ordinal: int) -> None:
        refs = self._idx().refs
        if not refs:
            return
        for token in message_mentions(message):
            holders = refs.get(token)
            if not holders:
                continue
            for unit_id in list(holders):
                unit = self.segments[unit_id]
                if unit.state is SegmentState.EVICTABLE:
                    holders.discard(unit_id)
                    continue
                if unit.last_ref_call is None or unit.last_ref_call < ordinal:
                    unit.last_ref_call = ordinal

    # --- private index ---------------------------------------------------------------------

    def _idx(self) -> _Index:
        # Read through the private-attribute dict: `self._index` goes through pydantic's
        # `__getattr__`, and this runs several times per observed message.
        private = self.__pydantic_private__
        index = private.get("_index") if private is not None else None
        if index is None:
            index = self._index = self._build_index()
        return cast(_Index, index)

    def _build_index(self) -> _Index:
        idx = _Index()
        self._index = idx
        idx.seen.update(self.outside_keys)
        for seg in self.segments.values():
            idx.seen.update(seg.keys)
            if seg.kind == "task":
                idx.tasks.append(seg.id)
                for key in seg.keys:
                    idx.by_key.setdefault(key, seg.id)
        for seg in self.segments.values():
            if seg.kind != "unit":
                continue
            for key in seg.keys:
                idx.by_key[key] = seg.id
            idx.units.append(seg.id)
            if seg.state is SegmentState.EVICTABLE:
                continue
            idx.alive[seg.id] = None
            for call_id in seg.pending:
                idx.pending[call_id] = seg.id
            if not seg.pending:
                for at, effect in enumerate(seg.effects):
                    if effect.superseded_by is None:
                        table, slot = self._slot(effect)
                        table.setdefault(slot, []).append((seg.id, at))
            self._register_refs(seg)
        return idx


@runtime_checkable
class Estimator(Protocol):
    """Anything that proposes lifecycle deltas for a registry and its transcript."""

    def evaluate(
        self,
        registry: LifecycleRegistry,
        messages: Sequence[Message],
        keys: Sequence[str] | None = None,
    ) -> list[LifecycleDelta]:
        """Deltas to apply (the registry validates them; invalid ones are skipped)."""
        ...

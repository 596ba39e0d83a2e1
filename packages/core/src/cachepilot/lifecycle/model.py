"""Lifecycle data model: segment states, the transition table, segments and deltas.

Transition table (anything not listed is invalid; a delta to the current state is a no-op):

| from        | to          | when                                                        |
|-------------|-------------|-------------------------------------------------------------|
| `active`    | `completed` | its task ended (new user turn, or the agent declared done)  |
| `active`    | `evictable` | superseded while its task is still running                  |
| `completed` | `evictable` | nothing later needs it                                      |
| `completed` | `active`    | its task resumed after a declared end (no new user turn)    |
| `evictable` | —           | terminal: an evicted segment is never brought back          |

A later *reference* to a completed unit does not reopen it: it only keeps it `completed`
(alive, not evictable). Only a task resuming reopens (the task and its completed units).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

__all__ = [
    "TRANSITIONS",
    "Effect",
    "EffectOp",
    "InvalidTransition",
    "LifecycleDelta",
    "LifecycleDeltas",
    "ProposedDelta",
    "Segment",
    "SegmentKind",
    "SegmentState",
    "can_transition",
]


class SegmentState(StrEnum):
    """Where a segment is in its life."""

    ACTIVE = "active"
    """Still in use."""
    COMPLETED = "completed"
    """Its work is done but it is still useful (kept in context)."""
    EVICTABLE = "evictable"
    """No longer needed in context; may be replaced by a stub (terminal)."""


SegmentKind = Literal["task", "unit"]

TRANSITIONS: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.ACTIVE: frozenset({SegmentState.COMPLETED, SegmentState.EVICTABLE}),
    SegmentState.COMPLETED: frozenset({SegmentState.ACTIVE, SegmentState.EVICTABLE}),
    SegmentState.EVICTABLE: frozenset(),
}
"""Valid transitions: state -> states it may move to."""


def can_transition(current: SegmentState, target: SegmentState) -> bool:
    """True when `current -> target` is in `TRANSITIONS` (a self-transition is not)."""
    return target in TRANSITIONS[current]


class InvalidTransition(ValueError):  # noqa: N818 (public API name)
    """A delta that the transition table (or the registry) does not allow."""

    def __init__(
        self,
        segment_id: str,
        current: SegmentState | None,
        target: SegmentState,
        detail: str = "",
    ) -> None:
        self.segment_id = segment_id
        self.current = current
        self.target = target
        where = "unknown segment" if current is None else f"{current.value} -> {target.value}"
        super().__init__(f"invalid lifecycle transition for {segment_id!r}: {where} {detail}")


EffectOp = Literal["read", "edit", "write", "run"]


class _Compact(BaseModel):
    """Serializes without the fields that hold their default (loading restores them): the
    registry is saved with every call, so each record stays as short as its content."""

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        defaults = _defaults(type(self))
        return {
            name: value
            for name, value in data.items()
            if name not in defaults or value != defaults[name]
        }


_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}


def _defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The default of every optional field of `cls` (computed once per class)."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = {
            name: info.get_default(call_default_factory=True)
            for name, info in cls.model_fields.items()
            if not info.is_required()
        }
        _DEFAULTS[cls] = found
    return found


class Effect(_Compact):
    """What one tool call did to one resource (used to detect supersession).

    `read` a file (whole when `span` is empty, else one range), `edit` it in place, `write` it
    whole (create, overwrite or delete), or `run` a command / call a tool (`target` is the
    call's normalised source key).
    """

    model_config = ConfigDict(extra="ignore")

    op: EffectOp
    target: str
    """Normalised path (read/edit/write) or source key (run)."""
    span: str = ""
    """Read range (`""`: the whole file)."""
    superseded_by: str | None = None
    """Id of the later unit whose call made this effect's output stale."""
    call_id: str | None = None
    """Tool-call id, kept only while the unit waits for that call's result."""


class Segment(_Compact):
    """A task or a work unit: a set of whole messages, addressed by their stable keys."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    id: str
    """`task:<n>` (n counts user turns from 1; `task:0` holds work before any user turn) or
    `unit:<key of the assistant message>`."""
    kind: SegmentKind
    keys: list[str] = Field(default_factory=list)
    """Message keys, in transcript order (a unit: its assistant message first, then its tool
    results; a task: every message of the turn, units included)."""
    state: SegmentState = SegmentState.ACTIVE
    reason: str = ""
    """Why the segment last changed state (short text)."""
    resources: list[str] = Field(default_factory=list)
    """What a unit touched: `path:<p>`, `id:<identifier>`, `src:<source key>`."""
    superseded_by: str | None = None
    """Id of the unit whose call superseded this unit's last live effect."""
    created_at_call: int = 0
    """0-based ordinal of the model call that produced the unit; for a task, the number of
    model calls before it."""
    task: str | None = None
    """Units: id of the task the unit belongs to."""
    label: str = ""
    """One line: a unit's calls (`Read src/a.py; Bash pytest -x`), a task's first line."""
    output_chars: int = 0
    """Units: characters of tool output received."""
    pending: list[str] = Field(default_factory=list)
    """Units: tool-call ids still waiting for their result."""
    effects: list[Effect] = Field(default_factory=list)
    """Units: what the calls did (cleared once the unit is evictable)."""
    last_ref_call: int | None = None
    """Units: ordinal of the last later message that mentioned one of its resources."""
    ended_at_call: int | None = None
    """Tasks: ordinal of the first call of the next task (set by the next user turn)."""
    done_at_call: int | None = None
    """Tasks: set when the agent declared done (final answer or a finishing tool)."""
    work_units: int = 0
    """Tasks: work units (tool exchanges) observed in the task; 0 is a tool-less exchange,
    conversation rather than finished work."""

    @property
    def evictable(self) -> bool:
        """True in the terminal state."""
        return self.state is SegmentState.EVICTABLE


class ProposedDelta(BaseModel):
    """One state change as an estimator (or a model) proposes it."""

    model_config = ConfigDict(extra="ignore")

    segment_id: str
    to_state: SegmentState
    reason: str = ""


class LifecycleDelta(ProposedDelta):
    """A proposed state change, as applied by `LifecycleRegistry.apply`."""

    from_state: SegmentState | None = None
    """Expected current state; when set and different, the delta is stale and skipped."""
    source: str = "rules"
    """Which estimator proposed it (`rules`, `llm`, …)."""


class LifecycleDeltas(BaseModel):
    """The JSON shape the LLM estimator asks for: `{"deltas": [...]}`."""

    model_config = ConfigDict(extra="ignore")

    deltas: list[ProposedDelta] = Field(default_factory=list)

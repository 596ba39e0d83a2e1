"""Item types of the session memory graph: kinds, statuses, valid transitions, edges."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ACTION_WEIGHTS",
    "INITIAL_STATUS",
    "TRANSITIONS",
    "Edge",
    "ItemKind",
    "MemoryItem",
    "Relation",
    "Status",
    "item_id",
]

logger = logging.getLogger(__name__)


class ItemKind(StrEnum):
    """What a memory item stands for."""

    TASK = "task"
    """A user request (goal text); open until done."""
    FILE = "file"
    """A path the agent read, edited, created, ran or searched."""
    COMMAND = "command"
    """A shell command, with its last exit code and a one-line result."""
    ERROR = "error"
    """An error line, traceback or failing test; open until a later run passes."""
    DECISION = "decision"
    """An assistant statement of intent or reason ("The fix is…", "because…")."""
    IDENTIFIER = "identifier"
    """An exact value: symbol, ticket id, argument id, number with a unit."""
    ENVIRONMENT = "environment"
    """A fact about the environment: cwd, python version, package manager, branch, repo."""
    MILESTONE = "milestone"
    """A completed step the transcript proves: a commit, a finish/submit call."""


class Status(StrEnum):
    """Lifecycle state of an item."""

    OPEN = "open"
    DONE = "done"
    RESOLVED = "resolved"
    ACTIVE = "active"
    """Items without a lifecycle (files, commands, facts…)."""


class Relation(StrEnum):
    """Kinds of dependency edges between items."""

    TOUCHES = "touches"
    """command → file: the command names the file."""
    RAISED = "raised"
    """file → error: the error points into the file (traceback frame, path in the line)."""
    PRODUCED = "produced"
    """command → error: the command's output showed the error."""
    PART_OF = "part_of"
    """error / milestone → task: it happened while the task was current."""


INITIAL_STATUS: Mapping[ItemKind, Status] = MappingProxyType(
    {
        ItemKind.TASK: Status.OPEN,
        ItemKind.ERROR: Status.OPEN,
        ItemKind.MILESTONE: Status.DONE,
    }
)
"""Status a new item starts in (`Status.ACTIVE` for kinds not listed)."""

TRANSITIONS: Mapping[ItemKind, Mapping[Status, frozenset[Status]]] = MappingProxyType(
    {
        ItemKind.TASK: MappingProxyType(
            {Status.OPEN: frozenset({Status.DONE}), Status.DONE: frozenset({Status.OPEN})}
        ),
        ItemKind.ERROR: MappingProxyType(
            {
                Status.OPEN: frozenset({Status.RESOLVED}),
                Status.RESOLVED: frozenset({Status.OPEN}),
            }
        ),
    }
)
"""Valid status changes per kind (tasks reopen, errors recur); every other change is refused."""


def item_id(kind: ItemKind, key: str) -> str:
    """The graph id of an item: `<kind>:<key>`."""
    return f"{kind.value}:{key}"


class MemoryItem(BaseModel):
    """One node of the session graph.

    Attributes:
        kind: what the item is.
        key: identity within its kind (normalized path, command, error signature…).
        text: what a resume block shows (exact path, command, error line, sentence, value).
        status: lifecycle state (see `TRANSITIONS`).
        detail: last action or result, one line (e.g. `exit 1: 2 failed, 5 passed`).
        first_seen: sequence number of the message that created it.
        last_seen: sequence number of the latest message that touched it.
        hits: number of messages that touched it.
        weight: accumulated evidence of importance (source-dependent increments).
        actions: for files, what was done to them (`read`, `edit`, `create`, `run`…).
        call_id: the tool call that last touched it, when there was one.
        exit_code: last exit code of a command, when the output showed it.
        group: grouping key (a command family for commands and errors, a fact's origin).
        source: id of the item that produced this one (the command behind an error).
        changed_at: for files, sequence number of the latest edit, create or delete.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    kind: ItemKind
    key: str
    text: str
    status: Status = Status.ACTIVE
    detail: str = ""
    first_seen: int = 0
    last_seen: int = 0
    hits: int = 1
    weight: float = 0.0
    actions: list[str] = Field(default_factory=list)
    call_id: str | None = None
    exit_code: int | None = None
    group: str = ""
    source: str | None = None
    changed_at: int | None = None

    @property
    def id(self) -> str:
        """The graph id, `<kind>:<key>`."""
        return item_id(self.kind, self.key)

    def transition(self, new: Status) -> bool:
        """Move to `new` when `TRANSITIONS` allows it.

        Returns:
            True when the status changed; False (logged at debug level) for an invalid or
            no-op change.
        """
        if new == self.status:
            return False
        allowed = TRANSITIONS.get(self.kind, {}).get(self.status, frozenset())
        if new not in allowed:
            logger.debug("memory: refused %s transition %s -> %s", self.kind, self.status, new)
            return False
        self.status = new
        return True

    def add_action(self, action: str) -> None:
        """Record an action (kept sorted and unique; the latest one goes into `detail`)."""
        if action not in self.actions:
            self.actions.append(action)
            self.actions.sort()


class Edge(BaseModel):
    """A dependency between two items (`src` and `dst` are item ids)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    src: str
    rel: Relation
    dst: str


ACTION_WEIGHTS: dict[str, float] = {
    "create": 3.0,
    "edit": 3.0,
    "delete": 2.0,
    "run": 1.5,
    "read": 1.2,
    "error": 1.0,
    "git": 0.6,
    "use": 0.5,
    "search": 0.4,
    "mention": 0.3,
}
"""Evidence a file action adds to the file's weight."""

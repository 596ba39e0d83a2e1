"""`PilotState`: a thread's state, small and JSON-serialisable, kept by the framework's
persistence (graph state, session store)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from cachepilot.canonical import CanonicalState
from cachepilot.lifecycle import LifecycleRegistry
from cachepilot.maintenance.policy import Decision
from cachepilot.pilot.breakpoints import CacheAnchors
from cachepilot.plan.epochs import Plan
from cachepilot.reduce import IngestMemory

__all__ = ["PilotState"]


_STATE_VERSION = 1


class PilotState(BaseModel):
    """Per-thread state: small, JSON-serialisable, owned by the framework's persistence."""

    version: int = _STATE_VERSION
    canonical: CanonicalState = Field(default_factory=CanonicalState)
    """Frozen volatile values and their placeholders."""
    ingest: IngestMemory = Field(default_factory=IngestMemory)
    """What the reduction passes remember (seen outputs, reads, recent calls, recalls)."""
    plan: Plan = Field(default_factory=Plan)
    """Maintenance epochs."""
    usage: dict[str, int] = Field(default_factory=dict)
    """Usage totals (`Usage.to_dict` keys)."""
    calls: int = 0
    """Model calls prepared."""
    last_request_time: float | None = None
    """Unix time of the last prepared call."""
    tools_fingerprint: str | None = None
    """Fingerprint of the tool set of the last call (a change breaks the prefix)."""
    recalls: int = 0
    """Successful recalls served."""
    lifecycle: LifecycleRegistry = Field(default_factory=LifecycleRegistry)
    """Tasks and work units with their states (what may be evicted)."""
    decisions: list[Decision] = Field(default_factory=list)
    """The latest scheduler decisions (bounded), for explanations."""
    views: dict[str, str] = Field(default_factory=dict)
    """Tool results already ingested: view key -> ref of the archived reduced view (`""` when
    the model reads the result unchanged). See `cachepilot.reduce.views`."""
    archive_failures: int = 0
    """Tool results whose original could not be archived (the store failed): they reached the
    model whole when under the size limit, else as a head/tail preview with the middle lost."""
    anchors: CacheAnchors = Field(default_factory=CacheAnchors)
    """Stable cache anchors for explicit-breakpoint providers (see `cache_breakpoints`)."""
    revision: int = 0
    """Bumped by every change (ingest, prepare, recall, usage): of two copies of a thread's
    state, the one with the higher revision is the newer (plugins merge parallel updates by
    it)."""

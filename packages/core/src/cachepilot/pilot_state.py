"""`PilotState`: a thread's state, small and JSON-serialisable, kept by the framework's
persistence (graph state, session store)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from cachepilot.breakpoints import CacheAnchors
from cachepilot.canonical import CanonicalState
from cachepilot.lifecycle import LifecycleRegistry
from cachepilot.maintenance import Decision
from cachepilot.plan import Plan
from cachepilot.reduce import IngestMemory

__all__ = ["PilotState"]


_STATE_VERSION = 2


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
    the model reads the result unchanged). See `cachepilot.views`."""
    archive_failures: int = 0
    """Tool results whose original could not be archived (the store failed): they reached the
    model whole when under the size limit, else as a head/tail preview with the middle lost."""
    anchors: CacheAnchors = Field(default_factory=CacheAnchors)
    """Stable cache anchors for explicit-breakpoint providers (see `cache_breakpoints`)."""
    recall_offered: bool = False
    """The `recall` tool is in this thread's tool list (it stays from the call it joined on,
    so the list changes at most once)."""
    context_tokens: int = 0
    """Tokens of the last prepared request while `recall` is not offered (what its joining
    would re-miss)."""
    recall_forgone_usd: float = 0.0
    """What the results kept whole while `recall` was not offered would have saved (the
    ingestion gate offers it once this covers the prefix break)."""
    revision: int = 0
    """Bumped by every change (ingest, prepare, recall, usage): of two copies of a thread's
    state, the one with the higher revision is the newer (plugins merge parallel updates by
    it)."""

    @model_validator(mode="before")
    @classmethod
    def _offered_before_version_2(cls, data: Any) -> Any:
        # Before version 2 the recall tool was offered from the first call: a thread saved
        # then keeps it, so its tool list does not change on the upgrade.
        if isinstance(data, dict) and "version" in data and int(data["version"]) < 2:
            offered = data.get("recall_offered", int(data.get("calls", 0) or 0) > 0)
            data = {**data, "recall_offered": offered, "version": _STATE_VERSION}
        return data

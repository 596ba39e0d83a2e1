"""`Config`: the settings of a `CachePilot`, validated when built."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cachepilot.canonical import CanonicalConfig
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.reduce import ReduceConfig
from cachepilot.sim import get_profile
from cachepilot.tokens import DEFAULT_ENCODING

__all__ = ["Config"]


class Config(BaseModel):
    """Settings of a `CachePilot`. Every field is validated when the config is built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    canonicalize: bool = True
    """Move volatile values (dates, paths, ids) out of the system prompt."""
    reduce: bool = True
    """Reduce tool outputs at ingestion (originals archived, recallable)."""
    recall_tool: bool = True
    """Offer the `recall` tool from the first model call on."""
    canonical: CanonicalConfig = Field(default_factory=CanonicalConfig)
    """Canonicalizer settings."""
    reduction: ReduceConfig = Field(default_factory=ReduceConfig)
    """Reduction pipeline settings (per-tool profiles, limits, gate)."""
    encoding: str = DEFAULT_ENCODING
    """tiktoken encoding for token counts."""
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    """When and how already-sent history is rewritten (pruning, eviction, scheduler)."""
    provider: str = "openai-gpt-5.4-mini"
    """Provider profile (prices, cache TTL) the cost model uses."""
    max_threads_in_memory: int = Field(default=512, ge=1)
    """Threads whose per-call caches (rendered view, message keys) stay in memory. Past it the
    least recently used thread's caches go (its next call rebuilds them from its state, byte
    for byte) and so does its state when the caller keeps it elsewhere (`mark_persisted`)."""
    max_cache_bytes: int = Field(default=256 * 1024 * 1024, ge=1024 * 1024)
    """Approximate bytes the threads' cached views may hold in all (same eviction order)."""
    state_idle_seconds: float = Field(default=600.0, ge=0.0)
    """A persisted thread's state leaves memory only after this long without a call (longer
    than any model call, so a state is never dropped between a call's request and the
    framework saving what it recorded)."""

    @field_validator("encoding", "provider")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a non-empty name")
        return value

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str) -> str:

        get_profile(value)
        return value

"""Archive of original tool outputs: the `ArtifactStore` protocol and its stores.

Every lossy edit archives the original first; `recall` serves it back byte-identical. Artifacts
are content-addressed (the ref is a sha256 prefix, see `cachepilot.refs`) and namespaced per
thread: a ref from another thread is "not found".

Part `artifacts` of the core (docs/architecture.md). May import: `refs`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.artifacts.base import (
    DEFAULT_MAX_BYTES_PER_THREAD,
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_RETENTION_SECONDS,
    Artifact,
    ArtifactInfo,
    ArtifactStore,
    BaseArtifactStore,
    Clock,
    StoreLimits,
)
from cachepilot.artifacts.memory import InMemoryArtifactStore
from cachepilot.artifacts.sqlite import SCHEMA_VERSION, SQLiteArtifactStore, default_store_path

__all__ = [
    "DEFAULT_MAX_BYTES_PER_THREAD",
    "DEFAULT_MAX_TOTAL_BYTES",
    "DEFAULT_RETENTION_SECONDS",
    "SCHEMA_VERSION",
    "Artifact",
    "ArtifactInfo",
    "ArtifactStore",
    "BaseArtifactStore",
    "Clock",
    "InMemoryArtifactStore",
    "SQLiteArtifactStore",
    "StoreLimits",
    "default_store_path",
]

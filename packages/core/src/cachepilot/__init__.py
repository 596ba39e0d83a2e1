"""cachepilot: cache-aware context management for long-running LLM agents."""

from __future__ import annotations

from cachepilot.artifacts import InMemoryArtifactStore, SQLiteArtifactStore
from cachepilot.messages import Message, TextPart, ToolCall
from cachepilot.pilot import CachePilot, Config, PilotState
from cachepilot.usage import Usage

__all__ = [
    "CachePilot",
    "Config",
    "InMemoryArtifactStore",
    "Message",
    "PilotState",
    "SQLiteArtifactStore",
    "TextPart",
    "ToolCall",
    "Usage",
    "__version__",
]

__version__ = "0.1.0"

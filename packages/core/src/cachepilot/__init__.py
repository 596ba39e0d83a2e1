"""cachepilot: cache-aware context management for long-running LLM agents."""

from __future__ import annotations

from cachepilot.artifacts import InMemoryArtifactStore, SQLiteArtifactStore
from cachepilot.convert import (
    Conversation,
    from_anthropic,
    from_openai_chat,
    from_responses,
    to_anthropic,
    to_messages,
    to_openai_chat,
    to_responses,
)
from cachepilot.messages import Message, TextPart, ToolCall
from cachepilot.pilot.facade import CachePilot, Config, PilotState
from cachepilot.usage import Usage

__all__ = [
    "CachePilot",
    "Config",
    "Conversation",
    "InMemoryArtifactStore",
    "Message",
    "PilotState",
    "SQLiteArtifactStore",
    "TextPart",
    "ToolCall",
    "Usage",
    "__version__",
    "from_anthropic",
    "from_openai_chat",
    "from_responses",
    "to_anthropic",
    "to_messages",
    "to_openai_chat",
    "to_responses",
]

__version__ = "0.1.0"

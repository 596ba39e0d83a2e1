"""Typed session memory: a bounded graph of the session that feeds zero-LLM resume blocks.

```python
from cachepilot.memory import SessionMemory, resume_block, RESUME_TIERS

memory = SessionMemory()
memory.update(messages, keys)            # incremental: only unseen keys are processed
text = memory.resume_block(300)          # fits 300 tokens under the default counter
```

Items (`MemoryItem`) are tasks, files, commands, errors, decisions, identifiers, environment
facts and milestones, linked by dependency edges (command → file, file → error, command →
error, error → task). Tasks and errors have a status lifecycle with valid transitions only.
The fold uses the resume block when no summarizer model is configured; cold resumes too.

Part `memory` of the core (docs/architecture.md). May import: `messages`, `support`, `tokens`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.memory.model import (
    INITIAL_STATUS,
    TRANSITIONS,
    Edge,
    ItemKind,
    MemoryItem,
    Relation,
    Status,
    item_id,
)
from cachepilot.memory.render import HEADER, RESUME_TIERS, SECTIONS, project_root, resume_block
from cachepilot.memory.store import ACTION_WEIGHTS, CAP_SHARES, PendingCall, SessionMemory
from cachepilot.memory.tools import CallFacts, FileTouch, analyze_call, shell_facts

__all__ = [
    "ACTION_WEIGHTS",
    "CAP_SHARES",
    "HEADER",
    "INITIAL_STATUS",
    "RESUME_TIERS",
    "SECTIONS",
    "TRANSITIONS",
    "CallFacts",
    "Edge",
    "FileTouch",
    "ItemKind",
    "MemoryItem",
    "PendingCall",
    "Relation",
    "SessionMemory",
    "Status",
    "analyze_call",
    "item_id",
    "project_root",
    "resume_block",
    "shell_facts",
]

"""cachepilot for the OpenAI Agents SDK: cache-aware context management through the SDK's own
extension points (`call_model_input_filter`, the model provider, sessions). It changes only
what the model reads; the run's items, hooks, guardrails and sessions stay the plain SDK's.

```python
from cachepilot import CachePilot
from cachepilot_agents import CachePilotAgents

cp = CachePilotAgents(CachePilot())
session = SQLiteSession("user-1")
result = await Runner.run(agent, task, session=session, run_config=cp.run_config(session=session))
```
"""

from __future__ import annotations

from cachepilot_agents.filter import PilotInputFilter
from cachepilot_agents.hooks import CachePilotHooks, RequestUsage
from cachepilot_agents.items import Transcript, TranscriptBuilder
from cachepilot_agents.model import PilotModel, PilotProvider
from cachepilot_agents.plugin import CachePilotAgents, PromptCacheKeyMode, prompt_cache_key_for
from cachepilot_agents.session import CachePilotSession
from cachepilot_agents.state import (
    MemoryStateStore,
    RedisStateStore,
    SQLAlchemyStateStore,
    SQLiteStateStore,
    StateStore,
)

__all__ = [
    "CachePilotAgents",
    "CachePilotHooks",
    "CachePilotSession",
    "MemoryStateStore",
    "PilotInputFilter",
    "PilotModel",
    "PilotProvider",
    "PromptCacheKeyMode",
    "RedisStateStore",
    "RequestUsage",
    "SQLAlchemyStateStore",
    "SQLiteStateStore",
    "StateStore",
    "Transcript",
    "TranscriptBuilder",
    "prompt_cache_key_for",
]

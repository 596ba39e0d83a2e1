"""cachepilot for the OpenAI Agents SDK: cache-aware context management through the SDK's own
extension points (tool wrappers, `call_model_input_filter`, run hooks, sessions).

```python
from cachepilot import CachePilot
from cachepilot_agents import CachePilotAgents

cp = CachePilotAgents(CachePilot())
agent = cp.wrap(Agent(name="coder", instructions=..., tools=[...]))
result = await Runner.run(agent, task, run_config=cp.run_config(), hooks=cp.hooks,
                          session=cp.session(SQLiteSession("user-1")))
```
"""

from __future__ import annotations

from cachepilot_agents.hooks import CachePilotHooks, RequestUsage
from cachepilot_agents.items import Transcript, TranscriptBuilder
from cachepilot_agents.plugin import CachePilotAgents, PilotInputFilter, prompt_cache_key_for
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
    "RedisStateStore",
    "RequestUsage",
    "SQLAlchemyStateStore",
    "SQLiteStateStore",
    "StateStore",
    "Transcript",
    "TranscriptBuilder",
    "prompt_cache_key_for",
]

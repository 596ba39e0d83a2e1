"""Provider prompt-cache simulation: request rendering, provider profiles, the simulator.

```python
from cachepilot.sim import CacheSimulator, Request, get_profile

sim = CacheSimulator(get_profile("openai-gpt-5.4-mini"), hidden_prefix_tokens=0)
usage = sim.submit(Request(system="You are…", messages=history), output_tokens=120)
usage.cached_tokens, sim.last.prefix_extends
```

The replay provider (an OpenAI-compatible endpoint serving a recorded session) and the
calibration against recorded usage are measurement tools: `cachepilot_bench.replay`,
`cachepilot_bench.calibrate`.

Part `sim` of the core (docs/architecture.md). May import: `messages`, `pricing`, `support`,
`tokens`, `usage`; tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.sim.engine import CacheSimulator, SubmitRecord
from cachepilot.sim.profiles import (
    DEFAULT_PROFILE,
    LOGICAL_STEP_SECONDS,
    PROFILES,
    CacheKind,
    MatchRule,
    ProviderProfile,
    get_profile,
)
from cachepilot.sim.render import (
    RenderedRequest,
    Request,
    Segment,
    canonical_tool,
    common_prefix,
    render_request,
)

__all__ = [
    "DEFAULT_PROFILE",
    "LOGICAL_STEP_SECONDS",
    "PROFILES",
    "CacheKind",
    "CacheSimulator",
    "MatchRule",
    "ProviderProfile",
    "RenderedRequest",
    "Request",
    "Segment",
    "SubmitRecord",
    "canonical_tool",
    "common_prefix",
    "get_profile",
    "render_request",
]

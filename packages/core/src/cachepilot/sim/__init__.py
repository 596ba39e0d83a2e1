"""Provider prompt-cache simulation: request rendering, provider profiles, the simulator.

```python
from cachepilot.sim import CacheSimulator, Request, get_profile

sim = CacheSimulator(get_profile("openai-gpt-5.4-mini"), hidden_prefix_tokens=0)
usage = sim.submit(Request(system="You are…", messages=history), output_tokens=120)
usage.cached_tokens, sim.last.prefix_extends
```

The replay provider (`ReplayProvider`, `ReplayScript`, `ReplayTurn`, `ReplayRecord`, from
`cachepilot.sim.replay`) serves a recorded session as an OpenAI-compatible endpoint on
loopback; it loads on first use, so importing this package stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from cachepilot.sim.replay import ReplayProvider, ReplayRecord, ReplayScript, ReplayTurn

_LAZY = frozenset({"ReplayProvider", "ReplayRecord", "ReplayScript", "ReplayTurn"})

__all__ = [
    "DEFAULT_PROFILE",
    "LOGICAL_STEP_SECONDS",
    "PROFILES",
    "CacheKind",
    "CacheSimulator",
    "MatchRule",
    "ProviderProfile",
    "RenderedRequest",
    "ReplayProvider",
    "ReplayRecord",
    "ReplayScript",
    "ReplayTurn",
    "Request",
    "Segment",
    "SubmitRecord",
    "canonical_tool",
    "common_prefix",
    "get_profile",
    "render_request",
]


def __getattr__(name: str) -> Any:
    # The replay provider pulls in http.server: load it only when asked for.
    if name in _LAZY:
        from cachepilot.sim import replay

        return getattr(replay, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

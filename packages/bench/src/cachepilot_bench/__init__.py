"""Replay benchmark: strategies (ours and peers) over recorded sessions, priced by the simulator."""

from __future__ import annotations

from cachepilot_bench.harness import (
    BenchConfig,
    CallResult,
    SessionResult,
    chain_sessions,
    prepare_sessions,
    run_bench,
    run_session,
)
from cachepilot_bench.registry import (
    ALL_STRATEGIES,
    PEER_STRATEGIES,
    available_strategies,
    make_strategy,
)
from cachepilot_bench.strategy import (
    CallContext,
    ExtraCall,
    PreparedCall,
    SessionContext,
    StatefulStrategy,
    Strategy,
)

__all__ = [
    "ALL_STRATEGIES",
    "PEER_STRATEGIES",
    "BenchConfig",
    "CallContext",
    "CallResult",
    "ExtraCall",
    "PreparedCall",
    "SessionContext",
    "SessionResult",
    "StatefulStrategy",
    "Strategy",
    "available_strategies",
    "chain_sessions",
    "make_strategy",
    "prepare_sessions",
    "run_bench",
    "run_session",
]

"""Peer baselines for `cachepilot bench`: other tools' context management, run as they ship.

Each strategy runs the peer's own published code where it exists (LangChain middlewares,
the Agents SDK's `ToolOutputTrimmer`, Headroom's `HeadroomChatModel`); OpenCode's pruning is
TypeScript and is mirrored line by line (see `opencode_prune`).

Importing this package loads no framework: the classes are resolved on first attribute
access, and the modules of the LangChain / Agents SDK peers import their framework then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachepilot_bench.peers.agents_trimmer import AgentsTrimmer
    from cachepilot_bench.peers.headroom import Headroom
    from cachepilot_bench.peers.keep_last_n import KeepLastN
    from cachepilot_bench.peers.lc_clear_tool_uses import LcClearToolUses, LcClearToolUsesScaled
    from cachepilot_bench.peers.lc_summarization import LcSummarization
    from cachepilot_bench.peers.opencode_prune import OpenCodePrune

__all__ = [
    "AgentsTrimmer",
    "Headroom",
    "KeepLastN",
    "LcClearToolUses",
    "LcClearToolUsesScaled",
    "LcSummarization",
    "OpenCodePrune",
]

_MODULES = {
    "AgentsTrimmer": "agents_trimmer",
    "Headroom": "headroom",
    "KeepLastN": "keep_last_n",
    "LcClearToolUses": "lc_clear_tool_uses",
    "LcClearToolUsesScaled": "lc_clear_tool_uses",
    "LcSummarization": "lc_summarization",
    "OpenCodePrune": "opencode_prune",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

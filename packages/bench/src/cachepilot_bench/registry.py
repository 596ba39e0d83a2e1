"""Strategy names and where their code lives (imported lazily: peers need optional extras)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from cachepilot_bench.strategy import Strategy
from cachepilot_bench.variants import is_variant, parse_variant

__all__ = [
    "ALL_STRATEGIES",
    "OPTIONAL_STRATEGIES",
    "OUR_STRATEGIES",
    "PEER_STRATEGIES",
    "available_strategies",
    "make_strategy",
    "validate_names",
]

_TARGETS: dict[str, str] = {
    "vanilla": "cachepilot_bench.baselines:Vanilla",
    "keep-last-n": "cachepilot_bench.peers.keep_last_n:KeepLastN",
    "opencode-prune": "cachepilot_bench.peers.opencode_prune:OpenCodePrune",
    "lc-clear-tool-uses": "cachepilot_bench.peers.lc_clear_tool_uses:LcClearToolUses",
    "lc-clear-tool-uses-scaled": "cachepilot_bench.peers.lc_clear_tool_uses:LcClearToolUsesScaled",
    "lc-summarization": "cachepilot_bench.peers.lc_summarization:LcSummarization",
    "agents-trimmer": "cachepilot_bench.peers.agents_trimmer:AgentsTrimmer",
    "cachepilot": "cachepilot_bench.ours:CachePilotStrategy",
    "cachepilot-no-canonical": "cachepilot_bench.ours:CachePilotNoCanonical",
    "cachepilot-no-reduce": "cachepilot_bench.ours:CachePilotNoReduce",
    "cachepilot-no-evict": "cachepilot_bench.ours:CachePilotNoEvict",
    "cachepilot-no-schedule": "cachepilot_bench.ours:CachePilotNoSchedule",
    "cachepilot-llm": "cachepilot_bench.ours:CachePilotLLM",
    "headroom": "cachepilot_bench.peers.headroom:Headroom",
    "cachepilot+lc-clear-tool-uses": (
        "cachepilot_bench.peers.cachepilot_lc_clear:CachePilotLcClearToolUses"
    ),
}

_INSTALL_HINTS: dict[str, str] = {
    # Headroom pulls litellm and more: it stays out of the workspace and runs in an
    # environment layered on it for the bench run.
    "headroom": (
        "Headroom is not installed in this environment; run the bench where it is, e.g. "
        "uv run --with 'headroom-ai[langchain]==0.42.0' cachepilot bench TRACES "
        "--strategy headroom (or: pip install 'headroom-ai[langchain]')"
    ),
}
_DEFAULT_HINT = "install it with: pip install 'cachepilot[bench]'"

PEER_STRATEGIES: tuple[str, ...] = (
    "keep-last-n",
    "opencode-prune",
    "lc-clear-tool-uses",
    "lc-clear-tool-uses-scaled",
    "lc-summarization",
    "agents-trimmer",
)
OUR_STRATEGIES: tuple[str, ...] = (
    "cachepilot",
    "cachepilot-no-canonical",
    "cachepilot-no-reduce",
    "cachepilot-no-evict",
    "cachepilot-no-schedule",
)
ALL_STRATEGIES: tuple[str, ...] = ("vanilla", *PEER_STRATEGIES, *OUR_STRATEGIES)
"""Every strategy `cachepilot bench` runs when none is named, in report order."""
OPTIONAL_STRATEGIES: tuple[str, ...] = ("cachepilot-llm", "headroom")
"""Strategies run only when named: options a user turns on (the observation compressor) and
peers whose code is not part of the workspace (Headroom)."""


def available_strategies() -> list[str]:
    """Names accepted by `make_strategy` (and `cachepilot[key=value,...]`, see
    `cachepilot_bench.variants`)."""
    return list(_TARGETS)


def make_strategy(name: str) -> Strategy:
    """A fresh instance of the named strategy (`cachepilot[key=value,...]`: cachepilot with
    those maintenance settings).

    Raises:
        ValueError: on an unknown name, or when the strategy's optional dependencies are
            missing (the message names the extra to install).
    """
    if is_variant(name):
        from cachepilot.pilot.facade import Config
        from cachepilot_bench.ours import CachePilotStrategy

        tuned = CachePilotStrategy(Config(maintenance=parse_variant(name)))
        tuned.name = name
        return tuned
    target = _TARGETS.get(name)
    if target is None:
        raise ValueError(
            f"unknown strategy {name!r}; choose from: {', '.join(available_strategies())} "
            "or cachepilot[key=value,...]"
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(name, _DEFAULT_HINT)
        raise ValueError(
            f"strategy {name!r} needs an optional dependency ({exc.name or exc}); {hint}"
        ) from exc
    strategy = getattr(module, attr)()
    if not isinstance(strategy, Strategy):
        raise TypeError(f"{target} did not build a Strategy")
    return strategy


def validate_names(names: Sequence[str]) -> list[str]:
    """Check strategy names early (before any replay starts); duplicates removed, order kept."""
    out: list[str] = []
    for name in names:
        if is_variant(name):
            parse_variant(name)
        elif name not in _TARGETS:
            raise ValueError(
                f"unknown strategy {name!r}; choose from: {', '.join(available_strategies())} "
                "or cachepilot[key=value,...]"
            )
        if name not in out:
            out.append(name)
    return out

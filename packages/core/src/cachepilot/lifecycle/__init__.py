"""Segment lifecycle (DESIGN §6 "Lifecycle"): what history can be evicted, and why.

A transcript is split into **tasks** (a user turn and everything until the next one) and
**work units** (one assistant message with tool calls plus all its tool results: whole
messages, so evicting a unit never orphans a call or a result, and a reasoning part stays
with its message). Each segment moves `active -> completed -> evictable` (see
`model.TRANSITIONS`); estimators propose `LifecycleDelta`s, the registry applies the valid
ones. The maintenance layer stubs evictable units at its scheduled points.

    reg = LifecycleRegistry()
    applied = reg.update(messages, keys, RuleEstimator(), every=3)   # observe; evaluate when due
    for unit in reg.evictable(exclude_keys=protected):
        ...

`LLMEstimator(model)` asks any LangChain chat model or OpenAI client instead of (or after)
the rules.

Part `lifecycle` of the core (docs/architecture.md). May import: `messages`, `reduce`,
`support`; tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.lifecycle.llm import SYSTEM_PROMPT, LLMEstimator, LLMPrompt
from cachepilot.lifecycle.model import (
    TRANSITIONS,
    Effect,
    EffectOp,
    InvalidTransition,
    LifecycleDelta,
    LifecycleDeltas,
    ProposedDelta,
    Segment,
    SegmentKind,
    SegmentState,
    can_transition,
)
from cachepilot.lifecycle.registry import (
    DEFAULT_CONTINUE_PATTERNS,
    Estimator,
    LifecycleRegistry,
    supersedes,
)
from cachepilot.lifecycle.resources import CallFacts, call_facts, shell_facts
from cachepilot.lifecycle.rules import RuleEstimator

__all__ = [
    "DEFAULT_CONTINUE_PATTERNS",
    "SYSTEM_PROMPT",
    "TRANSITIONS",
    "CallFacts",
    "Effect",
    "EffectOp",
    "Estimator",
    "InvalidTransition",
    "LLMEstimator",
    "LLMPrompt",
    "LifecycleDelta",
    "LifecycleDeltas",
    "LifecycleRegistry",
    "ProposedDelta",
    "RuleEstimator",
    "Segment",
    "SegmentKind",
    "SegmentState",
    "call_facts",
    "can_transition",
    "shell_facts",
    "supersedes",
]

"""LLM compression under optimized guidelines (Acon-style), an opt-in for cachepilot.

- `ObservationCompressor`: at ingestion, a compressor model rewrites tool outputs above
  `threshold_tokens` given the recent history, under an observation guideline. Originals are
  archived and recallable; answers are stored, never recomputed; failures and timeouts fall
  back to the rule passes. Pass it as `CachePilot(compressor=...)`.
- `Guideline`, `load_guideline`: guideline files for the observation compressor and for the
  fold's summarizer (`fold.ChatModelSummarizer(model, guideline=...)`).
- `optimize_guideline` (`cachepilot optimize-guideline`): improves a guideline from paired
  runs (full context vs compressed context, with success flags) with an optimizer model.
- `StandInCompressor`: a deterministic stand-in for benchmark replays (not a model).

Part `compress` of the core (docs/architecture.md). May import: `artifacts`, `fold`, `memory`,
`messages`, `reduce`, `refs`, `support`, `tokens`; tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.compress.chat import ChatModel, CompressorTimeoutError, content_text
from cachepilot.compress.guideline import (
    DEFAULT_HISTORY_GUIDELINE,
    DEFAULT_OBSERVATION_GUIDELINE,
    GUIDELINE_FORMAT,
    Guideline,
    GuidelineTarget,
    default_guideline,
    guideline_digest,
    guideline_text,
    load_guideline,
)
from cachepilot.compress.observation import (
    META_KEY,
    CompletionModel,
    Compressed,
    CompressorCall,
    CompressorConfig,
    ObservationCompressor,
    build_observation_prompt,
)
from cachepilot.compress.optimize import (
    OptimizeConfig,
    OptimizeResult,
    Trajectory,
    TrajectoryPair,
    load_trajectories,
    optimize_guideline,
    pair_trajectories,
)
from cachepilot.compress.standin import StandInCompressor

__all__ = [
    "DEFAULT_HISTORY_GUIDELINE",
    "DEFAULT_OBSERVATION_GUIDELINE",
    "GUIDELINE_FORMAT",
    "META_KEY",
    "ChatModel",
    "CompletionModel",
    "Compressed",
    "CompressorCall",
    "CompressorConfig",
    "CompressorTimeoutError",
    "Guideline",
    "GuidelineTarget",
    "ObservationCompressor",
    "OptimizeConfig",
    "OptimizeResult",
    "StandInCompressor",
    "Trajectory",
    "TrajectoryPair",
    "build_observation_prompt",
    "content_text",
    "default_guideline",
    "guideline_digest",
    "guideline_text",
    "load_guideline",
    "load_trajectories",
    "optimize_guideline",
    "pair_trajectories",
]

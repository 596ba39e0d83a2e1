"""Ingestion-time observation reduction (DESIGN §6 "Reduction passes" and "Gate").

`normalize_output` turns a tool's return value into a `ToolResult`; `Pipeline.run` passes it
through small, separately testable passes (each declares whether it loses information) and
returns a `Reduction`: the text for the transcript, whether the original must be archived
(`lossy`) and its ref. Every stub names the ref and the `recall(ref="…")` call that returns
the original byte for byte.

    pipeline = default_pipeline()
    memory = IngestMemory()
    reduction = pipeline.run("bash", {"command": "pytest"}, "call_1",
                             normalize_output(output), memory)

Part `reduce` of the core (docs/architecture.md). May import: `memory`, `messages`, `refs`,
`support`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.reduce.config import (
    PASS_NAMES,
    STUB_OVERHEAD,
    ReduceConfig,
    ResolvedProfile,
    ToolKind,
    ToolProfile,
    classify_tool,
)
from cachepilot.reduce.memory import (
    CallRecord,
    IngestMemory,
    ReadRecord,
    call_signature,
    coerce_args,
    source_key,
)
from cachepilot.reduce.normalize import ResultKind, ToolResult, normalize_output
from cachepilot.reduce.passes import PASSES, PASSES_BY_NAME, PassContext, ReductionPass
from cachepilot.reduce.pipeline import (
    COMPRESS_STEP,
    Pipeline,
    Reduction,
    StepReport,
    default_pipeline,
)
from cachepilot.reduce.stubs import NO_OUTPUT, REDUCED_STUB_RE, recall_call, reduced_stub

__all__ = [
    "COMPRESS_STEP",
    "NO_OUTPUT",
    "PASSES",
    "PASSES_BY_NAME",
    "PASS_NAMES",
    "REDUCED_STUB_RE",
    "STUB_OVERHEAD",
    "CallRecord",
    "IngestMemory",
    "PassContext",
    "Pipeline",
    "ReadRecord",
    "ReduceConfig",
    "Reduction",
    "ReductionPass",
    "ResolvedProfile",
    "ResultKind",
    "StepReport",
    "ToolKind",
    "ToolProfile",
    "ToolResult",
    "call_signature",
    "classify_tool",
    "coerce_args",
    "default_pipeline",
    "normalize_output",
    "recall_call",
    "reduced_stub",
    "source_key",
]

"""The pass interface and the read-only context every pass receives."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from cachepilot.reduce.config import ReduceConfig, ResolvedProfile
from cachepilot.reduce.normalize import ResultKind, ToolResult

__all__ = ["ALL_KINDS", "TEXT_KINDS", "PassContext", "ReductionPass"]

TEXT_KINDS: frozenset[ResultKind] = frozenset({"text", "json", "invalid_utf8"})
"""Result kinds whose text the text passes work on."""
ALL_KINDS: frozenset[ResultKind] = frozenset(
    {"text", "json", "binary", "empty", "image", "invalid_utf8"}
)


@dataclass(frozen=True, slots=True)
class PassContext:
    """Everything a pass may read about the current result (computed once by the pipeline).

    Passes never see `IngestMemory` itself: the pipeline derives the facts they need from it
    before the passes run and updates it after, so passes stay pure functions.
    """

    tool_name: str
    args: Mapping[str, Any]
    call_id: str
    result: ToolResult
    config: ReduceConfig
    profile: ResolvedProfile
    source: str
    """`source_key` of the call."""
    ref: str
    """`make_ref(result.original)`: the ref the original is archived under when lossy."""
    signature: str
    """`call_signature` of the call (same tool and arguments)."""
    read_key: str | None
    """For file reads: the source plus the arguments' signature; None for other tools."""
    previous_read_ref: str | None
    """Ref of the last read with the same read key (None on a first read)."""
    previous_read_call: str | None
    """Call id of that read."""
    first_seen_call: str | None
    """Call id of an earlier result with identical original content (None when new)."""
    loop_run: int
    """Identical calls (same signature) in a row, including this one."""
    loop_same_output: bool
    """True when the earlier calls of that run all returned this same content."""
    loop_last_call: str | None
    """Call id of the previous call of the run."""
    gate_open: bool
    """The source was recalled often enough: lossy passes are skipped (not the hard cap)."""
    recall: bool = True
    """The model is offered the recall tool (else stubs name no recall call)."""

    @property
    def shown_ref(self) -> str | None:
        """The ref a stub names: `ref` when the model can recall it, else None."""
        return self.ref if self.recall else None

    @property
    def first_read(self) -> bool:
        """True for a file read whose read key has no earlier read."""
        return self.read_key is not None and self.previous_read_ref is None


class ReductionPass(ABC):
    """One reduction step.

    Class attributes:
        name: unique pass name (used in configs, logs and step reports).
        lossless: True when the model loses no information (the bytes may still change, so
            the pipeline archives the original whenever the final text differs from it).
        mandatory: runs even when the recall gate is open (hard cap, binary, images).
        scans: reads the whole text (skipped for outputs over `max_scan_chars`).
        kinds: the result kinds the pass applies to.
    """

    name: ClassVar[str]
    lossless: ClassVar[bool]
    mandatory: ClassVar[bool] = False
    scans: ClassVar[bool] = True
    kinds: ClassVar[frozenset[ResultKind]] = TEXT_KINDS

    @abstractmethod
    def apply(self, text: str, ctx: PassContext) -> str | None:
        """The reduced text, or None when the pass does not apply. Must not mutate inputs."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, lossless={self.lossless})"

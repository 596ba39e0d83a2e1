"""The built-in reduction passes, in pipeline order.

Order: payload stubs (binary, image) and pointer stubs (identical-call loop, unchanged
re-read, duplicate) first, since they replace the whole output; image payloads inside JSON
and whole SVG documents next (both are images, not text); then text cleanup (ANSI,
progress lines, whitespace); structure-aware slimming (HTML, JSON) before the line-based
passes that could break its syntax; line-number strip, repeated and near-identical line
folding; the size gate; notes (invalid UTF-8, loop); the hard cap last.
"""

from __future__ import annotations

from types import MappingProxyType

from cachepilot.reduce.passes.base import ALL_KINDS, TEXT_KINDS, PassContext, ReductionPass
from cachepilot.reduce.passes.cleanup import AnsiPass, ProgressPass, WhitespacePass
from cachepilot.reduce.passes.html import HtmlPass
from cachepilot.reduce.passes.image_blocks import ImageBlocksPass
from cachepilot.reduce.passes.json_slim import JsonPass
from cachepilot.reduce.passes.lines import LineNumbersPass, RepeatsPass, SimilarLinesPass
from cachepilot.reduce.passes.payload import BinaryPass, ImagePass, InvalidUtf8Pass
from cachepilot.reduce.passes.pointers import (
    DuplicatePass,
    LoopNotePass,
    LoopStubPass,
    SupersededReadPass,
)
from cachepilot.reduce.passes.size import HardCapPass, SizeGatePass
from cachepilot.reduce.passes.svg import SvgPass

__all__ = [
    "ALL_KINDS",
    "PASSES",
    "PASSES_BY_NAME",
    "TEXT_KINDS",
    "AnsiPass",
    "BinaryPass",
    "DuplicatePass",
    "HardCapPass",
    "HtmlPass",
    "ImageBlocksPass",
    "ImagePass",
    "InvalidUtf8Pass",
    "JsonPass",
    "LineNumbersPass",
    "LoopNotePass",
    "LoopStubPass",
    "PassContext",
    "ProgressPass",
    "ReductionPass",
    "RepeatsPass",
    "SimilarLinesPass",
    "SizeGatePass",
    "SupersededReadPass",
    "SvgPass",
    "WhitespacePass",
]

PASSES: tuple[ReductionPass, ...] = (
    BinaryPass(),
    ImagePass(),
    LoopStubPass(),
    SupersededReadPass(),
    DuplicatePass(),
    ImageBlocksPass(),
    SvgPass(),
    AnsiPass(),
    ProgressPass(),
    WhitespacePass(),
    HtmlPass(),
    JsonPass(),
    LineNumbersPass(),
    RepeatsPass(),
    SimilarLinesPass(),
    SizeGatePass(),
    InvalidUtf8Pass(),
    LoopNotePass(),
    HardCapPass(),
)
"""One instance of every built-in pass, in pipeline order (passes are stateless)."""

PASSES_BY_NAME = MappingProxyType({p.name: p for p in PASSES})
"""Built-in passes by name."""

"""The pass pipeline: runs the passes over one tool result and updates the thread's memory."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachepilot.reduce.config import STUB_OVERHEAD, ReduceConfig
from cachepilot.reduce.handles import HANDLED_SLACK, host_handles, with_handles
from cachepilot.reduce.memory import IngestMemory, call_signature, coerce_args, source_key
from cachepilot.reduce.normalize import ResultKind, ToolResult, normalize_output
from cachepilot.reduce.passes import PASSES, PassContext, ReductionPass
from cachepilot.reduce.passes.size import head_tail_preview
from cachepilot.reduce.stubs import NO_OUTPUT, blank_stub, compressed_note
from cachepilot.refs import make_ref
from cachepilot.support.redact import redact

__all__ = [
    "COMPRESS_STEP",
    "REDACT_STEP",
    "Pipeline",
    "Reduction",
    "StepReport",
    "default_pipeline",
]

logger = logging.getLogger(__name__)

COMPRESS_STEP = "llm_compress"
"""Step name of a model-compressed output (see `cachepilot.compress`)."""
# A model-compressed text replaces the output right before the size gate: after the pointer
# stubs (a repeated output stays a pointer) and the cleanups, before the gate and the notes.
_AFTER_COMPRESS = frozenset({"size_gate", "invalid_utf8", "loop_note", "hard_cap"})
_POINTERS = frozenset({"binary", "image", "loop_stub", "superseded_read", "duplicate"})
REDACT_STEP = "redact_secrets"
"""Step name of credential redaction (`cachepilot.support.redact`) in a text the pipeline
changed."""


@dataclass(frozen=True, slots=True)
class StepReport:
    """One pass that changed the text."""

    pass_name: str
    lossless: bool
    chars_before: int
    chars_after: int


@dataclass(frozen=True, slots=True)
class Reduction:
    """What the pipeline made of one tool result.

    Attributes:
        text: the reduced text for the transcript (never empty).
        lossy: True when the original must be archived: the text differs from the original
            (even by a lossless cleanup) or the original is not text (binary, invalid UTF-8).
            An empty output is not lossy: the model sees `[no output]`, nothing is lost.
        ref: `make_ref(original)` when lossy (the ref every stub names), else None.
        steps: the passes that changed the text, in order.
        reason: the names of those passes joined by `, ` (None when nothing changed).
        source: the call's `source_key` (the recall gate counts recalls per source).
        kind: the result kind from `normalize_output`.
        loop_run, loop_same_output: the identical-call run this result extends.
    """

    text: str
    lossy: bool
    ref: str | None
    steps: list[StepReport] = field(default_factory=list)
    reason: str | None = None
    source: str = ""
    kind: ResultKind = "text"
    loop_run: int = 1
    """Identical calls (same tool and arguments) in a row, this one included."""
    loop_same_output: bool = False
    """Every call of that run returned this same output."""


class Pipeline:
    """Runs the reduction passes over tool results.

    Args:
        config: settings (`ReduceConfig()` when omitted).
        passes: the passes to run, in order (default: the built-in `PASSES` the config
            enables). Custom passes must subclass `ReductionPass` and have unique names.

    Raises:
        ValueError: on duplicate pass names or objects that are not passes.
    """

    def __init__(
        self, config: ReduceConfig | None = None, passes: Sequence[ReductionPass] | None = None
    ) -> None:
        self.config = config if config is not None else ReduceConfig()
        if passes is None:
            active = set(self.config.active_passes())
            chosen = tuple(p for p in PASSES if p.name in active)
        else:
            chosen = tuple(passes)
            for candidate in chosen:
                if not isinstance(candidate, ReductionPass):
                    raise ValueError(f"not a ReductionPass: {candidate!r}")
            names = [p.name for p in chosen]
            if len(set(names)) != len(names):
                raise ValueError(f"pass names must be unique, got {names}")
            chosen = tuple(p for p in chosen if p.name not in self.config.disabled)
        self.passes: tuple[ReductionPass, ...] = chosen
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()

    @property
    def pass_names(self) -> tuple[str, ...]:
        """Names of the passes this pipeline runs, in order."""
        return tuple(p.name for p in self.passes)

    def run(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        call_id: str,
        result: ToolResult | object,
        memory: IngestMemory | None = None,
        *,
        compressed: str | None = None,
        memory_lock: contextlib.AbstractContextManager[Any] | None = None,
        recall: bool = True,
    ) -> Reduction:
        """Reduce one tool result and record it in `memory`. Total: never raises.

        Args:
            tool_name: the tool's name (selects the profile).
            args: the call's arguments (mapping or JSON text).
            call_id: the tool call id (named by pointer stubs).
            result: a `normalize_output` result (anything else is normalized first).
            memory: the thread's `IngestMemory` (updated in place); a fresh one when None.
            compressed: a model's compression of this output (`cachepilot.compress`): it
                replaces the text before the size gate (step `llm_compress`, with a recall
                note) unless a pointer stub fired, the recall gate is open, or the rules
                already made the text shorter.
            memory_lock: held while `memory` is read and while it is updated, not while the
                passes run (they work on this call's text only), so a long output never keeps
                other callers of the lock waiting.
            recall: the model is offered the recall tool; without it stubs say what was
                elided and name no recall call (the original is archived all the same).
        """
        try:
            normalized = result if isinstance(result, ToolResult) else normalize_output(result)
        except Exception:  # normalize_output is total; belt and braces
            normalized = normalize_output(None)
        try:
            return self._run(
                str(tool_name), args, "" if call_id is None else str(call_id), normalized,
                memory if memory is not None else IngestMemory(), compressed=compressed,
                memory_lock=memory_lock if memory_lock is not None else contextlib.nullcontext(),
                recall=recall,
            )  # fmt: skip
        except Exception as exc:
            self._warn("pipeline", exc)
            return self._fallback(normalized)

    def _run(
        self,
        tool_name: str,
        raw_args: Mapping[str, Any] | str | None,
        call_id: str,
        result: ToolResult,
        memory: IngestMemory,
        *,
        compressed: str | None,
        memory_lock: contextlib.AbstractContextManager[Any],
        recall: bool = True,
    ) -> Reduction:
        config = self.config
        args = coerce_args(raw_args)
        ref = make_ref(result.original)
        source = source_key(tool_name, args)
        signature = call_signature(tool_name, args)
        profile = config.profile_for(tool_name, args)
        read_key = f"{source}#{signature}" if profile.tool_kind == "file_read" else None
        with memory_lock:
            previous = memory.reads.get(read_key) if read_key is not None else None
            if previous is not None and previous.call_id == call_id:
                previous = None  # the same call ingested twice
            first_seen = memory.seen.get(ref)
            run, same_output, last_call = memory.loop_state(signature, ref, call_id)
            gate_open = memory.gate_open(source, ref, config.gate_threshold)
        ctx = PassContext(
            tool_name=tool_name,
            args=args,
            call_id=call_id,
            result=result,
            config=config,
            profile=profile,
            source=source,
            ref=ref,
            signature=signature,
            read_key=read_key,
            previous_read_ref=previous.ref if previous is not None else None,
            previous_read_call=previous.call_id if previous is not None else None,
            first_seen_call=None if first_seen == call_id else first_seen,
            loop_run=run,
            loop_same_output=same_output,
            loop_last_call=last_call,
            gate_open=gate_open,
            recall=recall,
        )
        steps: list[StepReport] = []
        text = self._apply_passes(result.text, ctx, steps, compressed)
        if not text:
            text = NO_OUTPUT if not result.text else blank_stub(ctx.shown_ref)
        text = _redacted(text, result.text, steps)
        lossy = result.kind != "empty" and (text != result.text or not result.exact)
        try:
            with memory_lock:
                memory.remember(
                    ref=ref,
                    call_id=call_id,
                    source=source,
                    signature=signature,
                    read_key=read_key,
                    max_entries=config.memory_max_entries,
                )
        except Exception as exc:  # a corrupted memory must not cost the turn
            self._warn("memory", exc)
        reason = ", ".join(s.pass_name for s in steps) or (None if not lossy else result.kind)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "reduced %s output of tool %r: %d -> %d chars (%s)",
                result.kind, tool_name, len(result.text), len(text), reason or "unchanged",
            )  # fmt: skip
        return Reduction(
            text=text,
            lossy=lossy,
            ref=ref if lossy else None,
            steps=steps,
            reason=reason,
            source=source,
            kind=result.kind,
            loop_run=run,
            loop_same_output=same_output,
        )

    def _eligible(self, step: ReductionPass, ctx: PassContext) -> bool:
        if ctx.result.kind not in step.kinds or step.name in ctx.profile.disabled:
            return False
        return not (ctx.gate_open and not step.lossless and not step.mandatory)

    def _apply_passes(
        self,
        initial: str,
        ctx: PassContext,
        steps: list[StepReport],
        compressed: str | None = None,
    ) -> str:
        text = initial
        too_big: list[ReductionPass] = []
        max_scan = self.config.max_scan_chars
        # The host's own handles on the full output stay in view (DESIGN §2.7); its own
        # capped preview, a few characters over the limit, is not reduced again.
        handles = host_handles(ctx.result.text)
        capped = bool(handles) and len(initial) <= ctx.profile.limit * (1 + HANDLED_SLACK)
        for step in self.passes:
            if compressed is not None and step.name in _AFTER_COMPRESS:
                text = self._apply_compressed(compressed, text, ctx, steps)
                compressed = None
            if not self._eligible(step, ctx) or (
                capped and not step.lossless and not step.mandatory
            ):
                continue
            if step.scans and len(text) > max_scan:
                too_big.append(step)
                continue
            text = self._apply_one(step, text, initial, ctx, steps)
        if too_big and len(text) <= max_scan:
            # A huge output went straight to the gate; tidy the preview losslessly.
            for step in too_big:
                if step.lossless:
                    text = self._apply_one(step, text, initial, ctx, steps)
        if compressed is not None:
            text = self._apply_compressed(compressed, text, ctx, steps)
        if handles and any(not s.lossless for s in steps):
            text = with_handles(text, handles, before=len(ctx.result.text), ref=ctx.shown_ref)
        return text

    @staticmethod
    def _apply_compressed(
        compressed: str, text: str, ctx: PassContext, steps: list[StepReport]
    ) -> str:
        if ctx.gate_open or ctx.result.kind not in ("text", "json") or not compressed.strip():
            return text
        if any(s.pass_name in _POINTERS for s in steps):
            return text
        body = compressed.strip()
        out = f"{body}\n{compressed_note(len(ctx.result.text), len(body), ctx.shown_ref)}"
        if len(out) >= len(text):
            return text
        steps.append(StepReport(COMPRESS_STEP, False, len(text), len(out)))
        return out

    def _apply_one(
        self,
        step: ReductionPass,
        text: str,
        initial: str,
        ctx: PassContext,
        steps: list[StepReport],
    ) -> str:
        try:
            out = step.apply(text, ctx)
        except Exception as exc:
            self._warn(step.name, exc)
            return text
        if out is None or out is text:
            return text
        if not isinstance(out, str):
            self._warn(step.name, TypeError(f"returned {type(out).__name__}, not str"))
            return text
        if len(out) > min(len(text), len(initial)) + STUB_OVERHEAD:
            logger.debug("pass %s grew the output past the stub overhead; discarded", step.name)
            return text
        if out == text:
            return text
        steps.append(StepReport(step.name, step.lossless, len(text), len(out)))
        return out

    def _warn(self, name: str, exc: BaseException) -> None:
        with self._warn_lock:
            first = name not in self._warned
            self._warned.add(name)
        level = logging.WARNING if first else logging.DEBUG
        logger.log(
            level, "reduction step %r failed (%s); skipped, the output goes on",
            name, type(exc).__name__,
        )  # fmt: skip

    def _fallback(self, result: ToolResult) -> Reduction:
        """Hard cap only: used when the pipeline itself failed."""
        text = result.text
        ref = make_ref(result.original)
        cap = self.config.hard_cap
        if len(text) > cap:
            tail = self.config.tail_chars
            text = head_tail_preview(
                text, cap - tail - 2 * STUB_OVERHEAD, tail, ref, original_chars=len(text)
            )
        if not text:
            text = NO_OUTPUT
        text = _redacted(text, result.text, [])
        lossy = result.kind != "empty" and (text != result.text or not result.exact)
        return Reduction(
            text=text, lossy=lossy, ref=ref if lossy else None, reason="fallback",
            kind=result.kind,
        )  # fmt: skip


def _redacted(text: str, original: str, steps: list[StepReport]) -> str:
    """`text` without credential shapes when the pipeline wrote it (it differs from the output).

    An output passed through unchanged is the tool's own text and stays as it is; a preview,
    stub or cleaned copy is cachepilot's, so credentials in it are replaced by markers (the
    archived original keeps them, for `recall` in the same thread). Recorded as a lossy step,
    so the text names the ref of the original.
    """
    if text == original:
        return text
    cleaned = redact(text)
    if cleaned is not text:
        steps.append(StepReport(REDACT_STEP, False, len(text), len(cleaned)))
    return cleaned


def default_pipeline(config: ReduceConfig | None = None) -> Pipeline:
    """A pipeline with every built-in pass the config enables."""
    return Pipeline(config)

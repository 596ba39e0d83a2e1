"""Ingestion: once per tool result, reduce it and archive the original when lossy."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cachepilot.messages import ImagePart, Message, ToolCall
from cachepilot.pilot.base import PilotBase, check_pilot_thread
from cachepilot.pilot.events import LoopEvent
from cachepilot.reduce import Reduction, ToolResult, coerce_args, normalize_output, source_key
from cachepilot.reduce.images import image_replacement
from cachepilot.reduce.memory import canonical_args
from cachepilot.reduce.passes.size import unarchived_preview
from cachepilot.reduce.stubs import invalid_utf8_note, pointer, recall_call
from cachepilot.reduce.views import view_key, views_meta
from cachepilot.refs import make_ref
from cachepilot.support.foreground import foreground
from cachepilot.support.log_labels import thread_label

if TYPE_CHECKING:
    from cachepilot.compress.observation import Compressed

__all__ = ["IngestReport", "Ingestion"]

logger = logging.getLogger(__name__)


_ARGS_META_LIMIT = 2_000


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What `ingest_report` did with one tool result."""

    text: str
    """The text to put in the transcript."""
    ref: str | None
    """Ref of the archived original, when the result was changed."""
    original_chars: int
    steps: tuple[str, ...] = field(default_factory=tuple)
    """Names of the passes that changed the text, in order."""
    chars_saved: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    """(pass name, characters it removed) for each of `steps` (negative when a pass added a
    note)."""
    loop: LoopEvent | None = None
    """Set when the call repeats the previous ones (see `CachePilot(on_loop=…)`)."""


class Ingestion(PilotBase):
    """The ingestion gate of `CachePilot`: each tool result reduced once, the original
    archived whenever the text changed (`ingest`, `ingest_report`, `reduce_results`)."""

    def ingest(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        output: object,
        call_id: str,
        thread: str = "default",
    ) -> str:
        """Reduce one tool result at the ingestion gate; archive the original when lossy.

        Never raises on bad output (binary, huge, empty, non-UTF-8, odd types): the original is
        archived whenever the returned text differs from it, and problems are logged.
        """
        return self.ingest_report(tool_name, args, output, call_id, thread).text

    def ingest_report(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        output: object,
        call_id: str,
        thread: str = "default",
    ) -> IngestReport:
        """`ingest` with details (ref, passes that fired)."""
        check_pilot_thread(thread)
        parsed_args = coerce_args(args)  # total: a mapping, JSON text, other text or junk
        result = normalize_output(output)
        original_chars = len(result.text)
        state = self.state(thread)
        if not self.config.reduce:
            if result.exact or result.kind == "empty":
                return IngestReport(result.text, None, original_chars)
            # Binary or invalid UTF-8: the text is a lossy decoding, so archive the original
            # and tell the model where it is.
            ref = make_ref(result.original)
            shown = ref if self.config.recall_tool else None
            return self._archive(
                thread,
                result,
                f"{result.text}\n{invalid_utf8_note(shown)}",
                tool_name=tool_name,
                args=parsed_args,
                call_id=call_id,
                reason="decoded",
                saved=(),
            )
        compressed = None
        if self._compressor is not None:
            try:  # outside the lock: a model call must not hold up other threads
                compressed = self._compressor.compress(
                    tool_name, parsed_args, call_id, result, thread=thread,
                    memory=state.ingest, reduce_config=self.config.reduction, store=self.store,
                )  # fmt: skip
            except Exception:
                logger.warning("observation compressor unavailable; rule passes apply")
        try:
            # The passes run outside the pilot's lock (only the thread's memory is read and
            # updated under it): a huge output never holds up other threads' calls.
            reduction = self._pipeline.run(
                tool_name, parsed_args, call_id, result, state.ingest,
                compressed=compressed.text if compressed is not None else None,
                memory_lock=self._lock, recall=self.config.recall_tool,
            )  # fmt: skip
            with self._lock:
                state.revision += 1
        except Exception:
            logger.warning(
                "reduction failed for tool %r; output kept as is", tool_name, exc_info=True
            )
            logger.debug("reduction failed for call %s", call_id)
            return IngestReport(result.text, None, original_chars)
        loop = self._loop_event(thread, tool_name, call_id, reduction)
        report = self._ingest_reduced(
            thread,
            tool_name,
            parsed_args,
            call_id,
            result,
            reduction=reduction,
            compressed=compressed,
        )
        return report if loop is None else replace(report, loop=loop)

    def _loop_event(
        self, thread: str, tool_name: str, call_id: str, reduction: Reduction
    ) -> LoopEvent | None:
        """The loop event of a result that extends a run of identical calls, sent to the
        host's hook (whose errors are logged)."""
        run = reduction.loop_run
        if run < self.config.reduction.loop_flag_after:
            return None
        event = LoopEvent(thread, tool_name, call_id, run, reduction.loop_same_output)
        logger.info(
            "thread %s: tool %r called identically %d times in a row",
            thread_label(thread),
            tool_name,
            run,
        )
        if self._on_loop is not None:
            try:
                self._on_loop(event)
            except Exception:
                logger.warning(
                    "thread %s: the on_loop hook failed", thread_label(thread), exc_info=True
                )
        return event

    def _ingest_reduced(
        self,
        thread: str,
        tool_name: str,
        parsed_args: dict[str, Any],
        call_id: str,
        result: ToolResult,
        *,
        reduction: Reduction,
        compressed: Compressed | None,
    ) -> IngestReport:
        """The report of a reduced result: archived when the reduction is lossy."""
        original_chars = len(result.text)
        steps = tuple(s.pass_name for s in reduction.steps)
        saved = tuple((s.pass_name, s.chars_before - s.chars_after) for s in reduction.steps)
        if not reduction.lossy:
            return IngestReport(reduction.text, None, original_chars, steps, saved)
        text = reduction.text
        lossy_steps = [s.pass_name for s in reduction.steps if not s.lossless]
        ref = reduction.ref or make_ref(result.original)
        shown = ref if self.config.recall_tool else None
        # Every stub names the recall call of `ref`, or (no recall tool) ends "… elided]".
        named = recall_call(ref) if shown is not None else " elided]"
        if (lossy_steps or not result.exact) and named not in text:
            # A pass left content out without naming the ref (e.g. folded similar lines, slimmed
            # JSON): the model could not get it back. Name it, unless the whole output is shorter.
            note = f"[output shortened ({', '.join(lossy_steps) or result.kind}); "
            note += f"{pointer(shown)}]"
            if result.exact and len(text) + len(note) + 1 >= len(result.text):
                return IngestReport(result.text, None, original_chars)
            text = f"{text}\n{note}"
        report = self._archive(
            thread,
            result,
            text,
            tool_name=tool_name,
            args=parsed_args,
            call_id=call_id,
            reason=reduction.reason or (steps[-1] if steps else "reduced"),
            saved=saved,
            extra_meta=compressed.meta if compressed is not None else None,
        )
        if report.ref is not None and reduction.ref is not None and report.ref != reduction.ref:
            logger.error(
                "artifact ref mismatch (%s != %s); passing output through",
                report.ref,
                reduction.ref,
            )
            return IngestReport(result.text, None, original_chars)
        return report

    def _archive(
        self,
        thread: str,
        result: ToolResult,
        text: str,
        *,
        tool_name: str,
        args: dict[str, Any],
        call_id: str,
        reason: str,
        saved: tuple[tuple[str, int], ...],
        extra_meta: Mapping[str, Any] | None = None,
    ) -> IngestReport:
        """Archive `result.original`; the report of `text` naming its ref (or, when the store
        fails, of the output as `_unarchived` bounds it)."""
        original_chars = len(result.text)
        steps = tuple(name for name, _ in saved)
        meta = {
            "tool": tool_name,
            "args": _clip_args(args),
            "call_id": call_id,
            "source": source_key(tool_name, args),
            "original_chars": original_chars,
            "reduced_chars": len(text),
            "reason": reason,
            "kind": result.kind,
            **(extra_meta or {}),
        }
        try:
            ref = self.store.put(thread, result.original, meta=meta, media_type=result.media_type)
        except Exception:
            return self._unarchived(thread, result, tool_name, args, call_id)
        if self._archive_down:
            self._archive_down = False
            logger.warning("the artifact archive accepts originals again")
        return IngestReport(text, ref, original_chars, steps, saved)

    def _unarchived(
        self,
        thread: str,
        result: ToolResult,
        tool_name: str,
        args: dict[str, Any],
        call_id: str,
    ) -> IngestReport:
        """The store failed: the output whole when under the tool's size limit (nothing is
        lost), else a head/tail preview that says the middle was not kept. Counted in the
        thread's `archive_failures`; logged with a traceback once per outage."""
        with self._lock:
            state = self.state(thread)
            state.archive_failures += 1
            state.revision += 1
        first, self._archive_down = not self._archive_down, True
        logger.log(
            logging.ERROR if first else logging.WARNING,
            "thread %s: could not archive the original of a tool %r output; outputs over the "
            "size limit are cut to a preview until the archive is back",
            thread_label(thread),
            tool_name,
            exc_info=first,
        )
        logger.debug("the output not archived: call %s", call_id)
        profile = self.config.reduction.profile_for(tool_name, args)
        text = result.text
        if len(text) > min(profile.limit, self.config.reduction.hard_cap):
            text = unarchived_preview(text, profile.head_chars, profile.tail_chars)
        return IngestReport(text, None, len(result.text))

    async def aingest(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        output: object,
        call_id: str,
        thread: str = "default",
    ) -> str:
        """Async twin of `ingest` (runs the work in a worker thread)."""
        return await asyncio.to_thread(self.ingest, tool_name, args, output, call_id, thread)

    def ingest_view(
        self,
        tool_name: str,
        args: Mapping[str, Any] | str | None,
        output: str,
        call_id: str,
        thread: str = "default",
        *,
        alias: str | None = None,
    ) -> str:
        """Ingest one text result now, as `reduce_results` does on first sight of it.

        A later `reduce_results` over a transcript holding this exact result shows the same
        view without reducing again (for a host that rewrites results after its tools ran
        but before its model call). Returns the view key; `alias`, when given, is recorded in
        `PilotState.views` as pointing at that key (see `view_of`).
        """
        check_pilot_thread(thread)
        key = view_key(Message(role="tool", content=output, tool_call_id=call_id))
        state = self.state(thread)
        if key not in state.views:
            report = self.ingest_report(tool_name, args, output, call_id, thread)
            ref = ""
            if report.text != output:
                ref = self.store.put(
                    thread,
                    report.text,
                    meta=views_meta(key, report.ref, call_id),
                    media_type="text/plain; charset=utf-8",
                )
            with self._lock:
                state.views[key] = ref
                state.revision += 1
        if alias is not None:
            with self._lock:
                state.views[alias] = key
                state.revision += 1
        return key

    def view_of(self, thread: str, alias: str) -> tuple[str, str] | None:
        """(view key, view ref) recorded under `alias` by `ingest_view`; the ref is `""` when
        the model reads the result unchanged. None when unknown."""
        views = self.state(thread).views
        key = views.get(alias)
        if key is None or key not in views:
            return None
        return key, views[key]

    def reduce_results(
        self,
        messages: Sequence[Message],
        thread: str = "default",
        *,
        recall: bool | None = None,
        native: Collection[str] = (),
        calls: Mapping[str, ToolCall] | None = None,
    ) -> list[Message]:
        """The transcript as the model reads it: each tool result shown as its reduced view.

        The framework keeps the plain transcript; call this on it before `prepare`, once per
        model call. Each result is ingested the first time it is seen (reduced, the original
        archived when the reduction is lossy) and shows the same text on every later call,
        including in a new process that loaded the thread's state. Results of the recall tool
        are shown as they are. Inputs are never mutated; unchanged messages are returned as
        the same objects.

        Args:
            messages: the plain transcript.
            thread: the scope.
            recall: whether the model can call `recall` (default: `Config.recall_tool`).
                Without it no result is reduced: a ref the model cannot follow is never shown.
            native: call ids of results a native context manager (e.g. LangChain's
                `ContextEditingMiddleware`) already cleared: shown as they are, never
                ingested or archived (the placeholder is not a tool output).
            calls: calls answered by results of `messages` that `messages` do not hold, by
                id (a server-held conversation's, e.g. Responses `previous_response_id`): a
                result is reduced with its call's tool name and arguments.
        """
        check_pilot_thread(thread)
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise ValueError("messages must be a sequence of cachepilot Message objects")
        offer = self.config.recall_tool if recall is None else bool(recall)
        if not offer or not self.config.reduce:
            return list(messages)
        state = self.state(thread)

        def ingest(name: str, arguments: str, output: object, call_id: str, key: str) -> str:
            report = self.ingest_report(name, arguments, output, call_id, thread)
            ref = ""
            if report.text != output:
                try:
                    ref = self.store.put(
                        thread,
                        report.text,
                        meta=views_meta(key, report.ref, call_id),
                        media_type="text/plain; charset=utf-8",
                    )
                except Exception:  # the view still holds in this process
                    logger.warning(
                        "thread %s: the reduced view of a tool output could not be archived; "
                        "it is reduced again until it is",
                        thread_label(thread),
                        exc_info=True,
                    )
                    return report.text
            with self._lock:
                state.views[key] = ref
                state.revision += 1
            return report.text

        def load(ref: str) -> str | None:
            try:
                found = self.store.get(thread, ref)
            except Exception:
                logger.warning(
                    "thread %s: the archive is unavailable", thread_label(thread), exc_info=True
                )
                return None
            return None if found is None else found.text

        def shrink(part: ImagePart, key: str) -> str | None:
            replacement = image_replacement(part, self.config.reduction.image_max_bytes)
            ref = ""
            if replacement is not None:
                try:  # the original first: nothing may be lost
                    original = self.store.put(
                        thread, part.url, meta={"kind": "image", "reason": "image over the limit"}
                    )
                    ref = self.store.put(thread, replacement, meta=views_meta(key, original, ""))
                except Exception:
                    logger.warning(
                        "thread %s: an image could not be archived; kept", thread_label(thread)
                    )
                    return None
            with self._lock:
                state.views[key] = ref
                state.revision += 1
            return replacement

        with foreground():  # a precomputation steps aside meanwhile
            return self._result_views.apply(
                thread,
                messages,
                state.views,
                ingest=ingest,
                load=load,
                shrink=shrink,
                native=frozenset(native),
                calls=calls,
                archive_down=lambda: self._archive_down,
            )

    async def areduce_results(
        self,
        messages: Sequence[Message],
        thread: str = "default",
        *,
        recall: bool | None = None,
        native: Collection[str] = (),
        calls: Mapping[str, ToolCall] | None = None,
    ) -> list[Message]:
        """Async twin of `reduce_results` (ingestion runs in a worker thread)."""
        return await asyncio.to_thread(
            self.reduce_results, messages, thread, recall=recall, native=native, calls=calls
        )


def _clip_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as JSON-ready metadata (total: odd values through `str`, cycles `repr`)."""
    text = canonical_args(args)
    if len(text) <= _ARGS_META_LIMIT:
        try:
            loaded = json.loads(text)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            return loaded
    return {"_truncated": text[:_ARGS_META_LIMIT]}

"""The observation compressor: an optional model-written reduction of large tool outputs.

For a tool output above `CompressorConfig.threshold_tokens` (T_obs), a compressor model (any
LangChain chat model or OpenAI client) is asked to compress the output given the recent
history of the thread, under a guideline (Acon-style). It runs at ingestion only, so it never
rewrites history that was already sent; the original is archived and recallable like with
every lossy pass, and the compressed text replaces the size gate's preview::

    pilot = CachePilot(compressor=ObservationCompressor(ChatOpenAI(model="gpt-5.4-nano")))

Deterministic given the model's answer: the answer is stored with the archived original
(artifact metadata, under the guideline's digest) and in a per-process memo, so ingesting
the same output again (a replay, a retried tool call) gives the same text without calling
the model. A failing, empty, too-long or slow answer (`timeout_seconds`) falls back to the
rule passes, with one warning per compressor; after `failures_before_pause` failures in a
row the compressor rests for `pause_outputs` eligible outputs, so a dead endpoint does not
cost the agent a timeout on every call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from cachepilot.artifacts import ArtifactStore
from cachepilot.compress.chat import ChatModel
from cachepilot.compress.guideline import Guideline, guideline_digest, guideline_text
from cachepilot.messages import Message
from cachepilot.reduce import IngestMemory, ReduceConfig, ToolResult, source_key
from cachepilot.reduce.memory import canonical_args
from cachepilot.refs import make_ref
from cachepilot.support.redact import redact
from cachepilot.tokens import DEFAULT_ENCODING, get_counter

__all__ = [
    "META_KEY",
    "CompletionModel",
    "Compressed",
    "CompressorCall",
    "CompressorConfig",
    "ObservationCompressor",
    "build_observation_prompt",
]

logger = logging.getLogger(__name__)

META_KEY = "llm_compressed"
"""Artifact metadata key holding `{"key": <compressor key>, "text": <answer>}`."""

_SYSTEM = (
    "You compress the output of a tool call made by an AI agent. The agent will read your "
    "version instead of the original."
)
_MEMO_CAP = 512


class CompressorConfig(BaseModel):
    """Settings of the observation compressor. Every field is validated when built."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    threshold_tokens: int = 1_024
    """Outputs with fewer tokens than this (T_obs) are left to the rule passes."""
    timeout_seconds: float = 20.0
    """Longest wait for one answer; a slower call is abandoned and the rule passes apply."""
    max_output_tokens: int = 1_024
    """Output limit of one compression."""
    max_ratio: float = 0.8
    """An answer longer than this fraction of the original (characters) is discarded."""
    history_messages: int = 6
    """Recent transcript messages shown to the compressor (what the call is for)."""
    history_chars: int = 6_000
    """Character budget of that history (each message clipped, the oldest dropped first)."""
    max_input_chars: int = 100_000
    """Longer outputs are sent as head and tail with the middle cut (the original is
    archived whole)."""
    tools: tuple[str, ...] | None = None
    """Only these tool names are compressed; None: every tool."""
    skip_tools: tuple[str, ...] = ()
    """Tool names never compressed."""
    skip_file_reads: bool = True
    """Leave file reads to the rule passes: the agent copies file text into its edits, so it
    must see the file's own bytes (a re-read is still gated by the rules)."""
    failures_before_pause: int = 3
    """Failures in a row after which the compressor rests."""
    pause_outputs: int = 20
    """Eligible outputs skipped (left to the rule passes) while the compressor rests."""
    encoding: str = DEFAULT_ENCODING
    """tiktoken encoding used to count the threshold."""

    @field_validator("threshold_tokens", "max_output_tokens", "failures_before_pause")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @field_validator("history_messages", "history_chars", "pause_outputs")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        return value

    @model_validator(mode="after")
    def _check(self) -> CompressorConfig:
        if not self.timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be > 0, got {self.timeout_seconds}")
        if not 0 < self.max_ratio <= 1:
            raise ValueError(f"max_ratio must be in (0, 1], got {self.max_ratio}")
        if self.max_input_chars < 2_000:
            raise ValueError(f"max_input_chars must be >= 2000, got {self.max_input_chars}")
        if self.tools is not None and not self.tools:
            raise ValueError("tools must name at least one tool (None: every tool)")
        return self


@runtime_checkable
class CompletionModel(Protocol):
    """Anything that answers `(system, prompt)` with text (e.g. `compress.ChatModel`)."""

    def complete(self, system: str | None, prompt: str) -> str:
        """The answer's text."""
        ...


@dataclass(frozen=True, slots=True)
class CompressorCall:
    """One model call the compressor made (for billing and audits)."""

    system: str
    prompt: str
    answer: str
    tool_name: str
    ref: str


@dataclass(frozen=True, slots=True)
class Compressed:
    """A compressed tool output.

    Attributes:
        text: the model's answer (the pipeline adds the recall note).
        key: the compressor key (guideline digest and model) the answer belongs to.
        ref: the original's ref.
        origin: `model` (just asked), `memo` (this process asked before) or `archive`
            (read back from the artifact metadata).
    """

    text: str
    key: str
    ref: str
    origin: str = "model"

    @property
    def meta(self) -> dict[str, Any]:
        """Artifact metadata that lets a later ingestion reuse this answer."""
        return {META_KEY: {"key": self.key, "text": self.text}}


class ObservationCompressor:
    """Compresses large tool outputs at ingestion with a chat model, under a guideline.

    Args:
        model: a LangChain chat model, an OpenAI client (with `model_name`), a
            `compress.ChatModel`, or any object with `complete(system, prompt) -> str`.
        guideline: what the compression keeps: text or an observation `Guideline`
            (default `DEFAULT_OBSERVATION_GUIDELINE`).
        config: thresholds, timeout and filters (`CompressorConfig()` when omitted).
        model_name: the `model=` argument for an OpenAI client.
        on_call: called after every model call that returned (billing, audits).

    Raises:
        ValueError: for a model of no known kind or a bad guideline.
    """

    def __init__(
        self,
        model: Any,
        *,
        guideline: Guideline | str | None = None,
        config: CompressorConfig | None = None,
        model_name: str | None = None,
        on_call: Callable[[CompressorCall], None] | None = None,
    ) -> None:
        self.config = config or CompressorConfig()
        self.guideline = guideline_text(guideline, "observation")
        if isinstance(model, CompletionModel) and not isinstance(model, ChatModel):
            self.model: CompletionModel = model
        else:
            self.model = ChatModel(
                model,
                model_name=model_name,
                max_tokens=self.config.max_output_tokens,
                timeout=self.config.timeout_seconds,
            )
        name = model_name or getattr(self.model, "model_name", None) or type(self.model).__name__
        self.key = f"{guideline_digest(self.guideline)}:{name}"
        """Names the (guideline, model) pair; stored answers of another key are not reused."""
        self.on_call = on_call
        self._history: OrderedDict[str, tuple[Message, ...]] = OrderedDict()
        self._memo: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._lock = threading.Lock()
        self._failures = 0
        self._resting = 0
        self._warned = False
        self.calls = 0
        """Model calls made."""
        self.failures = 0
        """Model calls that failed, timed out or gave an unusable answer."""

    # --- history ---------------------------------------------------------------------------

    def note_history(self, thread: str, messages: Sequence[Message]) -> None:
        """Remember the end of a thread's transcript (called by the pilot at every model call).

        Only the last `history_messages` messages are kept (references, not copies).
        """
        keep = self.config.history_messages
        tail = tuple(messages[-keep:]) if keep else ()
        with self._lock:
            self._history.pop(thread, None)
            self._history[thread] = tail
            while len(self._history) > _MEMO_CAP:
                self._history.popitem(last=False)

    def history(self, thread: str) -> tuple[Message, ...]:
        """The recent messages remembered for a thread."""
        with self._lock:
            return self._history.get(thread, ())

    # --- eligibility -----------------------------------------------------------------------

    def eligible(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        call_id: str,
        result: ToolResult,
        *,
        memory: IngestMemory | None = None,
        reduce_config: ReduceConfig | None = None,
    ) -> bool:
        """True when this output should go to the model (size, kind, tool filters, gate)."""
        cfg = self.config
        if result.kind not in ("text", "json") or not result.exact:
            return False
        if cfg.tools is not None and tool_name not in cfg.tools:
            return False
        if tool_name in cfg.skip_tools:
            return False
        text = result.text
        # Cheap bound first: a token is at least one character.
        if len(text) < cfg.threshold_tokens:
            return False
        reduce_config = reduce_config or ReduceConfig()
        if cfg.skip_file_reads and reduce_config.profile_for(tool_name, args).tool_kind == (
            "file_read"
        ):
            return False
        if memory is not None:
            ref = make_ref(result.original)
            first = memory.seen.get(ref)
            if first is not None and first != call_id:
                return False  # the rules turn a repeated output into a pointer stub
            threshold = reduce_config.gate_threshold
            if memory.gate_open(source_key(tool_name, args), ref, threshold):
                return False  # the agent recalled this source: it wants it whole
        return get_counter(cfg.encoding).count(text) >= cfg.threshold_tokens

    # --- compression -----------------------------------------------------------------------

    def compress(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        call_id: str,
        result: ToolResult,
        *,
        thread: str = "default",
        memory: IngestMemory | None = None,
        reduce_config: ReduceConfig | None = None,
        store: ArtifactStore | None = None,
    ) -> Compressed | None:
        """The compressed output, or None (not eligible, resting, or the call failed).

        Never raises. Answers are reused from the memo or the archive before the model is
        asked.
        """
        try:
            if not self.eligible(
                tool_name, args, call_id, result, memory=memory, reduce_config=reduce_config
            ):
                return None
            ref = make_ref(result.original)
            known = self._known(thread, ref, store)
            if known is not None:
                return known
            with self._lock:
                if self._resting > 0:
                    self._resting -= 1
                    return None
            system, prompt = build_observation_prompt(
                tool_name,
                args,
                result.text,
                self.history(thread),
                guideline=self.guideline,
                config=self.config,
            )
        except Exception as exc:  # eligibility or prompt building on odd input
            self._fail(exc, tool_name)
            return None
        try:
            answer = self.model.complete(system, prompt)
        except Exception as exc:
            self._fail(exc, tool_name)
            return None
        return self._accept(
            thread=thread, ref=ref, tool_name=tool_name, result=result, system=system,
            prompt=prompt, answer=answer,
        )  # fmt: skip

    async def acompress(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        call_id: str,
        result: ToolResult,
        *,
        thread: str = "default",
        memory: IngestMemory | None = None,
        reduce_config: ReduceConfig | None = None,
        store: ArtifactStore | None = None,
    ) -> Compressed | None:
        """Async `compress` (the model's `acomplete` when it has one, else a worker thread)."""
        try:
            if not self.eligible(
                tool_name, args, call_id, result, memory=memory, reduce_config=reduce_config
            ):
                return None
            ref = make_ref(result.original)
            known = await asyncio.to_thread(self._known, thread, ref, store)
            if known is not None:
                return known
            with self._lock:
                if self._resting > 0:
                    self._resting -= 1
                    return None
            system, prompt = build_observation_prompt(
                tool_name,
                args,
                result.text,
                self.history(thread),
                guideline=self.guideline,
                config=self.config,
            )
        except Exception as exc:
            self._fail(exc, tool_name)
            return None
        try:
            acomplete = getattr(self.model, "acomplete", None)
            if acomplete is not None:
                answer = await acomplete(system, prompt)
            else:
                answer = await asyncio.wait_for(
                    asyncio.to_thread(self.model.complete, system, prompt),
                    timeout=self.config.timeout_seconds,
                )
        except Exception as exc:
            self._fail(exc, tool_name)
            return None
        return self._accept(
            thread=thread, ref=ref, tool_name=tool_name, result=result, system=system,
            prompt=prompt, answer=answer,
        )  # fmt: skip

    def _known(self, thread: str, ref: str, store: ArtifactStore | None) -> Compressed | None:
        with self._lock:
            memo_key = (thread, ref)
            if memo_key in self._memo:
                text = self._memo[memo_key]
                return None if text is None else Compressed(text, self.key, ref, "memo")
        if store is None:
            return None
        try:
            artifact = store.get(thread, ref)
        except Exception:  # the archive is a cache here; the model can still be asked
            logger.debug("compressor: archive lookup failed", exc_info=True)
            return None
        stored = artifact.meta.get(META_KEY) if artifact is not None else None
        if isinstance(stored, Mapping) and stored.get("key") == self.key:
            text = stored.get("text")
            if isinstance(text, str) and text.strip():
                self._remember(thread, ref, text)
                return Compressed(text, self.key, ref, "archive")
        return None

    def _remember(self, thread: str, ref: str, text: str | None) -> None:
        with self._lock:
            self._memo[(thread, ref)] = text
            while len(self._memo) > _MEMO_CAP:
                self._memo.popitem(last=False)

    def _accept(
        self,
        *,
        thread: str,
        ref: str,
        tool_name: str,
        result: ToolResult,
        system: str,
        prompt: str,
        answer: object,
    ) -> Compressed | None:
        # The answer is text cachepilot writes (into the view and the archive's metadata):
        # credential shapes the model copied from the output are replaced.
        text = redact(answer.strip()) if isinstance(answer, str) else ""
        with self._lock:
            self.calls += 1
        if self.on_call is not None:
            try:
                self.on_call(CompressorCall(system, prompt, text, tool_name, ref))
            except Exception:
                logger.debug("compressor: on_call hook failed", exc_info=True)
        if not text:
            self._fail(ValueError("empty answer"), tool_name)
            return None
        if len(text) > self.config.max_ratio * len(result.text):
            # Not a failure of the model: the output did not compress. Remember, so the same
            # output is not sent again.
            logger.debug("compressor: answer for tool %r too long; rules apply", tool_name)
            self._remember(thread, ref, None)
            with self._lock:
                self._failures = 0
            return None
        with self._lock:
            self._failures = 0
        self._remember(thread, ref, text)
        return Compressed(text, self.key, ref, "model")

    def _fail(self, exc: BaseException, tool_name: str) -> None:
        with self._lock:
            self.failures += 1
            self._failures += 1
            first = not self._warned
            self._warned = True
            rest = self._failures >= self.config.failures_before_pause
            if rest:
                self._failures = 0
                self._resting = self.config.pause_outputs
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "observation compressor failed on tool %r (%s: %s); the rule passes apply%s",
            tool_name,
            type(exc).__name__,
            redact(str(exc)[:200]),
            "" if not first else " (further failures are logged at DEBUG)",
        )
        if rest:
            logger.debug("observation compressor resting for %d outputs", self.config.pause_outputs)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = max(0, limit - head)
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted:,} characters cut here …]\n{text[len(text) - tail :]}"


def _history_block(history: Sequence[Message], budget: int) -> str:
    if not history or budget <= 0:
        return ""
    per_message = max(200, budget // max(1, len(history)))
    blocks: list[str] = []
    used = 0
    for message in reversed(history):
        label = message.role if message.role != "tool" else f"tool result {message.name or ''}"
        lines = [f"[{label.strip()}]"]
        if message.text:
            lines.append(_clip(message.text, per_message))
        for call in message.tool_calls:
            lines.append(f"→ {call.name}({_clip(call.arguments, 400)})")
        block = "\n".join(lines)
        if used + len(block) > budget and blocks:
            break
        blocks.append(block)
        used += len(block)
    return "\n\n".join(reversed(blocks))


def build_observation_prompt(
    tool_name: str,
    args: Mapping[str, Any],
    output: str,
    history: Sequence[Message] = (),
    *,
    guideline: str,
    config: CompressorConfig | None = None,
) -> tuple[str, str]:
    """The compression request `(system, user prompt)`: deterministic for equal inputs.

    The system prompt holds the guideline (the same for every call, so the compressor's own
    provider cache serves it); the user prompt holds the recent history, the call and the
    output.
    """
    cfg = config or CompressorConfig()
    system = f"{_SYSTEM}\n\n{guideline.strip()}"
    parts: list[str] = []
    block = _history_block(history, cfg.history_chars)
    if block:
        parts.append(f"<recent-history>\n{block}\n</recent-history>")
    parts.append(f"<tool-call>\n{tool_name}({_clip(canonical_args(args), 2_000)})\n</tool-call>")
    body = _clip(output, cfg.max_input_chars)
    parts.append(f"<tool-output chars={len(output)}>\n{body}\n</tool-output>")
    parts.append(
        f"Write the compressed tool output now, in at most about {cfg.max_output_tokens:,} tokens."
    )
    return system, "\n\n".join(parts)

"""The LLM estimator: a chat model proposes lifecycle deltas as validated JSON.

Works with any LangChain chat model (duck-typed: `.invoke(messages)` / `.ainvoke(messages)`
returning an object with `.content`) or an OpenAI client (duck-typed:
`client.chat.completions.create(model=…, messages=…, response_format={"type": "json_object"})`,
sync or async). Nothing is imported from either library.

The prompt is deterministic (no timestamps): a fixed instruction, then a compact listing of
the segments that may change (short aliases `T<n>` for tasks, `U<n>` for units) and the tail
of the conversation. The answer must be `{"deltas": [{"segment_id", "to_state", "reason"}]}`;
it is validated with pydantic (`LifecycleDeltas`). Unknown ids, invalid transitions and
protected units are dropped (DEBUG); a malformed answer or a failing call gives no deltas and
one WARNING. The estimator never raises once built.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from cachepilot.lifecycle.model import (
    LifecycleDelta,
    LifecycleDeltas,
    ProposedDelta,
    Segment,
    SegmentState,
    can_transition,
)
from cachepilot.lifecycle.registry import LifecycleRegistry
from cachepilot.messages import Message, message_keys

__all__ = ["SYSTEM_PROMPT", "LLMEstimator", "LLMPrompt"]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = """\
You manage the context window of a long-running, tool-using AI agent.
The conversation is split into segments:
- tasks (T<n>): a user request and all the work that followed it;
- work units (U<n>): one assistant message with tool calls, together with the tool results.
Each segment has a state:
- active: still in use;
- completed: finished, but still useful to keep in context;
- evictable: no longer needed in context. It will be replaced by a one-line stub; its full
  text stays recallable, so evicting is safe but costs a recall if it is needed again.
Valid changes: active -> completed, active -> evictable, completed -> evictable,
completed -> active (only when work on it resumes). Evictable is final.
Mark a unit evictable when its output is superseded (the same file read again or changed
later, the same command run again) or when its task is finished and nothing still to be done
needs its details (paths, identifiers, values, errors). Keep units whose output the agent is
still using or will likely need. Mark a task completed when its request has been handled.
When unsure, leave the segment unchanged.
Reply with one JSON object and nothing else:
{"deltas": [{"segment_id": "U3", "to_state": "evictable", "reason": "short reason"}]}
Use the segment ids exactly as listed. {"deltas": []} is a valid answer."""

_ClientKind = Literal["openai", "langchain"]


@dataclass(frozen=True, slots=True)
class LLMPrompt:
    """A built prompt: chat messages plus the alias -> segment id map to read the answer."""

    messages: list[dict[str, str]]
    aliases: dict[str, str]
    candidates: int
    """Segments listed that may change (0: no call is needed)."""


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _first_line(text: str, limit: int) -> str:
    for line in text.splitlines():
        if line.strip():
            return _one_line(line, limit)
    return ""


def _response_text(response: Any) -> str | None:
    """Text of a LangChain message or an OpenAI chat completion (`None` when absent)."""
    choices = getattr(response, "choices", None)
    if choices:
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        return content if isinstance(content, str) else None
    content = getattr(response, "content", response)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for block in content:
            if isinstance(block, str):
                pieces.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                pieces.append(block["text"])
        return "".join(pieces)
    return None


def _extract_json(text: str) -> Any:
    """The JSON value in a model answer (code fences and chatter around it tolerated)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        return json.loads(body)
    except ValueError:
        pass
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(body[start : end + 1])
        except ValueError:
            return None
    return None


class LLMEstimator:
    """Asks a chat model which segments are completed or evictable.

    Args:
        model: a LangChain chat model (`invoke`/`ainvoke`) or an OpenAI client
            (`chat.completions.create`, sync or async).
        model_name: model id for an OpenAI client (required there, ignored otherwise).
        protect_last_units: the most recent units are never listed nor marked evictable.
        max_units: most units listed (the oldest candidates first).
        tail_messages: messages of the recent conversation shown.
        max_line_chars: cap on each rendered line.
        request_options: extra keyword arguments for `chat.completions.create`.

    Raises:
        ValueError: when `model` is neither kind, or `model_name` is missing for a client.
    """

    name = "llm"

    def __init__(
        self,
        model: Any,
        *,
        model_name: str | None = None,
        protect_last_units: int = 3,
        max_units: int = 80,
        tail_messages: int = 8,
        max_line_chars: int = 240,
        request_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._kind = self._detect(model)
        if self._kind == "openai" and not model_name:
            raise ValueError("LLMEstimator: model_name is required with an OpenAI client")
        if protect_last_units < 0 or max_units < 1 or tail_messages < 0 or max_line_chars < 40:
            raise ValueError(
                "LLMEstimator: protect_last_units >= 0, max_units >= 1, tail_messages >= 0 "
                "and max_line_chars >= 40 are required"
            )
        self.model = model
        self.model_name = model_name
        self.protect_last_units = protect_last_units
        self.max_units = max_units
        self.tail_messages = tail_messages
        self.max_line_chars = max_line_chars
        self.request_options = dict(request_options or {})

    @staticmethod
    def _detect(model: Any) -> _ClientKind:
        chat = getattr(model, "chat", None)
        completions = getattr(chat, "completions", None)
        if callable(getattr(completions, "create", None)):
            return "openai"
        if callable(getattr(model, "invoke", None)) or callable(getattr(model, "ainvoke", None)):
            return "langchain"
        raise ValueError(
            "LLMEstimator needs a LangChain chat model (with .invoke) or an OpenAI client "
            f"(with .chat.completions.create), got {type(model).__name__}"
        )

    # --- prompt ----------------------------------------------------------------------------

    def build_prompt(
        self,
        registry: LifecycleRegistry,
        messages: Sequence[Message],
        keys: Sequence[str] | None = None,
    ) -> LLMPrompt:
        """The deterministic prompt for the registry's current state."""
        keys = message_keys(messages) if keys is None else keys
        by_key = dict(zip(keys, messages, strict=False))
        unit_ids = registry.unit_ids
        ordinal = {unit_id: n for n, unit_id in enumerate(unit_ids, start=1)}
        protected = set(registry.recent_unit_ids(self.protect_last_units))
        aliases: dict[str, str] = {}

        def alias(seg: Segment) -> str:
            name = f"U{ordinal[seg.id]}" if seg.kind == "unit" else "T" + seg.id.split(":")[1]
            aliases[name] = seg.id
            return name

        listed = [u for u in registry.alive_units() if u.id not in protected and not u.pending]
        omitted = max(0, len(listed) - self.max_units)
        listed = listed[: self.max_units]
        by_task: dict[str, list[Segment]] = {}
        for unit in listed:
            by_task.setdefault(unit.task or "", []).append(unit)
        lines: list[str] = []
        candidates = 0
        for task in registry.tasks():
            units = by_task.get(task.id, [])
            if task.state is SegmentState.EVICTABLE and not units:
                continue
            if task.state is not SegmentState.EVICTABLE:
                candidates += 1
            label = _one_line(task.label, 80)
            state = task.state.value
            lines.append(f'{alias(task)} task {state}, from call {task.created_at_call}: "{label}"')
            for unit in units:
                candidates += 1
                lines.append("  " + self._unit_line(unit, alias(unit), by_key, ordinal))
        evicted = sum(1 for u in registry.units() if u.state is SegmentState.EVICTABLE)
        notes = [f"{len(protected)} most recent unit(s) are protected and not listed."]
        if omitted:
            notes.append(f"{omitted} newer candidate unit(s) not listed.")
        if evicted:
            notes.append(f"{evicted} unit(s) already evictable (not listed).")
        tail = self._tail(messages)
        body = "\n".join(
            [
                f"Model calls so far: {registry.calls}. Current task: "
                + (
                    "T" + registry.current_task.split(":", 1)[1]
                    if registry.current_task
                    else "none"
                ),
                "",
                "Segments (oldest first):",
                *(lines or ["(none)"]),
                *notes,
                "",
                f"Recent conversation (last {len(tail)} messages):",
                *(tail or ["(none)"]),
                "",
                "Which segments changed state? Answer with the JSON object only.",
            ]
        )
        return LLMPrompt(
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": body},
            ],
            aliases=aliases,
            candidates=candidates,
        )

    def _unit_line(
        self,
        unit: Segment,
        name: str,
        by_key: Mapping[str, Message],
        ordinal: Mapping[str, int],
    ) -> str:
        first = ""
        for key in unit.keys[1:]:
            message = by_key.get(key)
            if message is not None:
                first = _first_line(message.text, 80)
                if first:
                    break
        hints: list[str] = []
        if unit.superseded_by in ordinal:
            hints.append(f"superseded by U{ordinal[unit.superseded_by or '']}")
        if unit.last_ref_call is not None:
            hints.append(f"last mentioned at call {unit.last_ref_call}")
        hint = f" [{'; '.join(hints)}]" if hints else ""
        head = (
            f"{name} {unit.state.value}, call {unit.created_at_call}, "
            f"{unit.output_chars:,} chars{hint}: "
        )
        room = max(40, self.max_line_chars - len(head) - 4)
        label = _one_line(unit.label, max(20, room - min(len(first), room // 2) - 6))
        return _one_line(f'{head}{label} -> "{first}"', self.max_line_chars)

    def _tail(self, messages: Sequence[Message]) -> list[str]:
        if not self.tail_messages:
            return []
        shown = [m for m in messages[-self.tail_messages * 2 :] if m.role != "system"]
        out: list[str] = []
        for message in shown[-self.tail_messages :]:
            if message.role == "tool":
                text = message.text
                out.append(
                    f'[tool {message.name or ""}] {len(text):,} chars: "{_first_line(text, 100)}"'
                )
                continue
            pieces = [_one_line(message.text, self.max_line_chars)] if message.text.strip() else []
            if message.tool_calls:
                calls = "; ".join(
                    f"{c.name}({_one_line(c.arguments, 80)})" for c in message.tool_calls
                )
                pieces.append(f"calls: {calls}")
            line = f"[{message.role}] " + " | ".join(pieces)
            out.append(_one_line(line, self.max_line_chars + 120))
        return out

    # --- answer ----------------------------------------------------------------------------

    def parse(
        self, text: str | None, prompt: LLMPrompt, registry: LifecycleRegistry
    ) -> list[LifecycleDelta]:
        """Validated deltas from a model answer (see the module docstring for what is dropped)."""
        value = _extract_json(text) if isinstance(text, str) else None
        if isinstance(value, list):
            value = {"deltas": value}
        if not isinstance(value, dict) or not isinstance(value.get("deltas", []), list):
            logger.warning(
                "lifecycle LLM estimator: malformed answer (%s chars); no deltas",
                len(text) if isinstance(text, str) else 0,
            )
            return []
        try:
            items = LifecycleDeltas.model_validate(value).deltas
        except ValidationError:
            items = []
            for raw in value.get("deltas", []):
                try:
                    items.append(ProposedDelta.model_validate(raw))
                except ValidationError:
                    logger.debug("lifecycle LLM estimator: dropped an invalid delta item")
        protected = set(registry.recent_unit_ids(self.protect_last_units))
        simulated: dict[str, SegmentState] = {}
        out: list[LifecycleDelta] = []
        for item in items:
            raw_id = item.segment_id.strip()
            seg_id = prompt.aliases.get(raw_id, raw_id)
            seg = registry.segments.get(seg_id)
            if seg is None:
                logger.debug("lifecycle LLM estimator: unknown segment %r dropped", raw_id)
                continue
            current = simulated.get(seg_id, seg.state)
            if item.to_state is current:
                continue
            if not can_transition(current, item.to_state):
                logger.debug(
                    "lifecycle LLM estimator: invalid %s %s -> %s dropped",
                    seg_id,
                    current.value,
                    item.to_state.value,
                )
                continue
            if item.to_state is SegmentState.EVICTABLE and (seg.id in protected or seg.pending):
                logger.debug("lifecycle LLM estimator: protected %s not evicted", seg_id)
                continue
            simulated[seg_id] = item.to_state
            out.append(
                LifecycleDelta(
                    segment_id=seg_id,
                    to_state=item.to_state,
                    reason=_one_line(item.reason, 200),
                    from_state=current,
                    source=self.name,
                )
            )
        return out

    # --- calls -----------------------------------------------------------------------------

    def _openai_kwargs(self, prompt: LLMPrompt) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "messages": prompt.messages,
            "response_format": {"type": "json_object"},
            **self.request_options,
        }

    def _call(self, prompt: LLMPrompt) -> str | None:
        if self._kind == "openai":
            result = self.model.chat.completions.create(**self._openai_kwargs(prompt))
        else:
            invoke = getattr(self.model, "invoke", None)
            if not callable(invoke):
                logger.warning("lifecycle LLM estimator: model has no .invoke; use aevaluate")
                return None
            result = invoke(prompt.messages)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            logger.warning(
                "lifecycle LLM estimator: async client used from evaluate; use aevaluate"
            )
            return None
        return _response_text(result)

    async def _acall(self, prompt: LLMPrompt) -> str | None:
        result: Any
        if self._kind == "openai":
            create = self.model.chat.completions.create
            kwargs = self._openai_kwargs(prompt)
            if inspect.iscoroutinefunction(create):
                result = await create(**kwargs)
            else:
                result = await asyncio.to_thread(create, **kwargs)
        else:
            ainvoke = getattr(self.model, "ainvoke", None)
            if callable(ainvoke):
                result = await ainvoke(prompt.messages)
            else:
                result = await asyncio.to_thread(self.model.invoke, prompt.messages)
        if inspect.isawaitable(result):
            result = await result
        return _response_text(result)

    def evaluate(
        self,
        registry: LifecycleRegistry,
        messages: Sequence[Message],
        keys: Sequence[str] | None = None,
    ) -> list[LifecycleDelta]:
        """Observe `messages`, ask the model, return validated deltas (never raises)."""
        prompt = self._prepare(registry, messages, keys)
        if prompt is None:
            return []
        try:
            text = self._call(prompt)
        except Exception as exc:
            logger.warning(
                "lifecycle LLM estimator: call failed (%s); no deltas", type(exc).__name__
            )
            return []
        return self.parse(text, prompt, registry)

    async def aevaluate(
        self,
        registry: LifecycleRegistry,
        messages: Sequence[Message],
        keys: Sequence[str] | None = None,
    ) -> list[LifecycleDelta]:
        """Async `evaluate` (`ainvoke` / an async client when available)."""
        prompt = self._prepare(registry, messages, keys)
        if prompt is None:
            return []
        try:
            text = await self._acall(prompt)
        except Exception as exc:
            logger.warning(
                "lifecycle LLM estimator: call failed (%s); no deltas", type(exc).__name__
            )
            return []
        return self.parse(text, prompt, registry)

    def _prepare(
        self,
        registry: LifecycleRegistry,
        messages: Sequence[Message],
        keys: Sequence[str] | None,
    ) -> LLMPrompt | None:
        keys = message_keys(messages) if keys is None else keys
        if messages:
            registry.observe(messages, keys)
        prompt = self.build_prompt(registry, messages, keys)
        if prompt.candidates == 0:
            logger.debug("lifecycle LLM estimator: nothing to judge; no call")
            return None
        return prompt

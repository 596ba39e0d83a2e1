"""Per-thread frozen values (`CanonicalState`) and the `Canonicalizer` that applies them."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cachepilot.canonical.config import CanonicalConfig, Placement
from cachepilot.canonical.detect import _CACHE_ENTRIES
from cachepilot.canonical.notes import (
    MAX_NOTES,
    ChainMemo,
    HistoryMark,
    ValueNote,
    history_chain,
    message_digest,
    note_due,
    shown_values,
)
from cachepilot.canonical.text import LEARNED_KIND, _Assigner, render_block, render_note
from cachepilot.canonical.tools import (
    canonical_json,
    canonicalize_tool,
    tool_fingerprint,
    tool_name,
)
from cachepilot.canonical.volatility import (
    SEPARATOR,
    Baseline,
    LearnedSpan,
    learn,
    merge_learned,
    text_digest,
)
from cachepilot.messages import ContentPart, Message, TextPart
from cachepilot.support.identity_memo import IdentityMemo

__all__ = [
    "CanonicalState",
    "Canonicalizer",
]

logger = logging.getLogger(__name__)


class CanonicalState(BaseModel):
    """Per-thread canonicalization state (JSON-serialisable, small; updated by `apply`)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    values: dict[str, str] = Field(default_factory=dict)
    """Frozen placeholder label → value, the values the block shows (while `in_place`, the
    values the previous call's prompt held in place)."""
    in_place: bool = True
    """The values are still in place (no block): none has changed within the conversation
    (see `CanonicalConfig.move_when_changed`)."""
    placement: Placement | None = None
    """Where this thread's block is placed; None until the block is first emitted."""
    epoch: int = 0
    """Refreshes that changed the frozen values (0: the values of the first call)."""
    calls: int = 0
    """Calls canonicalized in this thread."""
    prefix_digest: str | None = None
    """Digest of the previous call's canonical tools + system (detects a changed prefix)."""
    tool_fingerprint: str | None = None
    """`tool_fingerprint` of the previous call's tools, as returned."""
    tool_changes: int = 0
    """Times the tool set changed mid-thread (a prefix break cause)."""
    learned: list[LearnedSpan] = Field(default_factory=list)
    """Spans learned as volatile in this thread (see `cachepilot.canonical.volatility`)."""
    baselines: dict[str, Baseline] = Field(default_factory=dict)
    """Per group of texts (``system``, ``tools``), the previous call's canonical text: what
    the next call is compared with to learn volatile spans."""
    notes: list[ValueNote] = Field(default_factory=list)
    """Update notes since the block was last written: the current value of a frozen
    placeholder that changed, attached to the message where the change was first seen."""
    history: HistoryMark | None = None
    """The previous call's messages (after leading system messages): a request that does not
    continue them is another conversation (nothing learned across it, values refreshed)."""

    @model_validator(mode="before")
    @classmethod
    def _stored_block(cls, data: Any) -> Any:
        """A state stored before `in_place` existed whose block was emitted keeps its block."""
        if isinstance(data, dict) and "in_place" not in data and data.get("placement"):
            return {**data, "in_place": False}
        return data

    @property
    def by_value(self) -> dict[str, str]:
        """Frozen value → label (first label wins)."""
        out: dict[str, str] = {}
        for label, value in self.values.items():
            out.setdefault(value, label)
        return out

    @property
    def shown(self) -> dict[str, str]:
        """What the model was last told each placeholder stands for (block, then notes)."""
        return shown_values(self.values, self.notes)

    @property
    def ordinals(self) -> dict[str, int]:
        """Highest ordinal per kind among the frozen labels."""
        out: dict[str, int] = {}
        for label in self.values:
            kind, _, n = label.rpartition("_")
            if kind and n.isdigit():
                out[kind] = max(out.get(kind, 0), int(n))
        return out

    @property
    def block_emitted(self) -> bool:
        """Whether a dynamic-context block has been emitted in this thread."""
        return self.placement is not None


# --------------------------------------------------------------------------------------------
# The canonicalizer


class Canonicalizer:
    """Applies canonicalization to each model request of a thread.

    Stateless apart from small memos: of the last tool list (so an unchanged tool list comes
    back as the same dict objects), and of the messages it rewrote (so an unchanged rewrite
    comes back as the same `Message` object, and identity memos downstream keep hitting);
    per-thread state lives in `CanonicalState`.
    """

    def __init__(self, config: CanonicalConfig | None = None) -> None:
        """Create a canonicalizer (the default `CanonicalConfig` when None)."""
        self.config = config or CanonicalConfig()
        self._tools_memo: tuple[tuple[str, ...], list[dict[str, Any]], str] | None = None
        self._described_memo: tuple[str, list[dict[str, Any]]] | None = None
        self._rewrites: IdentityMemo[Message, Message] = IdentityMemo(_CACHE_ENTRIES)
        # Per thread state, the previous call's messages and their chain (an unchanged head
        # is not digested again; a restored state digests its history once).
        self._chains: IdentityMemo[CanonicalState, ChainMemo] = IdentityMemo(1024)
        # Where built-in detectors are off (tool descriptions), ISO timestamps are still
        # frozen: a clock in a description would otherwise change the tools on every call.
        self._clocks = CanonicalConfig(
            **{
                **self.config.model_dump(),
                "enabled_kinds": frozenset({"datetime"}),
                "patterns": {},
                "named_values": {},
            }
        )

    def apply(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        state: CanonicalState,
        *,
        maintenance: bool = False,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Canonicalize one request; updates `state` in place, never mutates the inputs.

        Args:
            system: the raw system prompt (pass the original every call, not a canonical one).
            messages: the transcript; only leading system messages and the first user message
                (which carries the block) can change, every other message is returned as is.
            tools: tool schemas in any of the usual shapes.
            state: this thread's state.
            maintenance: this call is a maintenance point (refreshes values with
                ``refresh="maintenance"``).

        Returns:
            ``(system, messages, tools)`` to send. Deterministic for equal inputs and state.
        """
        try:
            return self._apply(system, messages, tools, state, maintenance=maintenance)
        except Exception:  # invariant 6: never crash the agent
            logger.warning(
                "canonicalization failed; request sent unchanged (%d messages, %d tools)",
                len(messages),
                len(tools),
                exc_info=True,
            )
            return system, list(messages), [dict(t) for t in tools if isinstance(t, Mapping)]

    # -- internals ----------------------------------------------------------------------------

    def _stable(self, original: Message, rewritten: Message) -> Message:
        """`rewritten`, or the equal message this canonicalizer returned for `original` before
        (the same object every call while the rewrite does not change)."""
        if rewritten is original:
            return original
        hit = self._rewrites.get(original)
        if hit is not None and hit == rewritten:
            return hit
        return self._rewrites.put(original, rewritten)

    def _tools(self, tools: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], str]:
        """The tools to send, and their `tool_fingerprint` (memoised with them)."""
        cfg = self.config
        keyed = [(tool_name(t), canonical_json(t), t) for t in tools]
        if cfg.sort_tools:
            keyed.sort(key=lambda item: (item[0], item[1]))
        key = tuple(j for _, j, _ in keyed)
        memo = self._tools_memo
        if memo is not None and memo[0] == key:
            return list(memo[1]), memo[2]
        out = [canonicalize_tool(t) if cfg.canonical_tool_keys else dict(t) for _, _, t in keyed]
        self._tools_memo = (key, out, tool_fingerprint(out))
        return list(out), self._tools_memo[2]

    def _apply(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        state: CanonicalState,
        *,
        maintenance: bool,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        cfg = self.config
        rendered = self._render(system, messages, tools, state)
        continues, mark, chain = history_chain(
            messages, rendered.leading, state.history, self._chains.get(state)
        )
        self._chains.put(state, chain)
        continues = continues and all(
            note.at < len(messages) and message_digest(messages[note.at]) == note.digest
            for note in state.notes
        )
        if not continues:
            # Another conversation under this thread: its texts are not the previous call's
            # successor (nothing learned across it), and its messages hold no earlier note.
            state.baselines = {}
            state.notes = []
        if cfg.learn_volatile and self._learn(state, rendered.assigner):
            rendered = self._render(system, messages, tools, state)  # with the new spans
        if cfg.learn_volatile:
            _keep_baselines(state, rendered.assigner.texts, cfg.learn_max_chars)
        assigner, system_out, out = rendered.assigner, rendered.system, rendered.messages
        tools_out, fingerprint, n_leading = rendered.tools, rendered.fingerprint, rendered.leading

        digest = _digest(fingerprint, system_out, out[:n_leading])
        current = assigner.values
        move = False
        if cfg.move_when_changed and state.in_place:
            # A value that changed within the conversation is what the block is for; until
            # then the prompt goes as written (no block to pay for). The move happens on a
            # call whose prompt changed anyway, so it adds no break of its own.
            move = continues and state.calls > 0 and current != state.values
            if not move:
                tools_as_written = self._in_place(tools, state, current, digest=digest, mark=mark)
                return system, list(messages), tools_as_written
            state.in_place = False
            logger.info("a volatile value changed: values move into the dynamic-context block")
        self._update_state(
            state,
            current,
            digest,
            fingerprint,
            maintenance=maintenance,
            diverged=not continues,
            moved=move,
        )
        state.history = mark
        self._note_changes(state, current, messages, n_leading)

        first_user = next((i for i, m in enumerate(out) if m.role == "user"), None)
        block = ""
        if current:
            block = render_block(((label, state.values[label]) for label in current), cfg)
            if state.placement is None:
                state.placement = cfg.placement if first_user is not None else "system_tail"
            if not (state.placement == "first_user" and first_user is not None):
                if n_leading:
                    out[n_leading - 1] = self._stable(
                        out[n_leading - 1], _append_block(out[n_leading - 1], block)
                    )
                else:
                    system_out = _append_text(system_out, block)
                block = ""
        noted: dict[int, list[str]] = {}
        for note in state.notes:
            noted.setdefault(note.at, []).append(render_note(note.values.items(), cfg))
        targets = set(noted)
        if block and first_user is not None:
            targets.add(first_user)
        for index in sorted(targets):
            message = out[index]
            if block and index == first_user:
                message = _prepend_block(message, block)
            for text in noted.get(index, ()):
                message = _append_note(message, text)
            out[index] = self._stable(messages[index], message)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "canonicalized request: %d spans, %d placeholders, placement=%s, epoch=%d, "
                "%d notes",
                assigner.spans,
                len(current),
                state.placement,
                state.epoch,
                len(state.notes),
            )
        return system_out, out, tools_out

    def _in_place(
        self,
        tools: Sequence[Mapping[str, Any]],
        state: CanonicalState,
        values: Mapping[str, str],
        *,
        digest: str,
        mark: HistoryMark,
    ) -> list[dict[str, Any]]:
        """Record a call sent with its values in place; the tools to send (sorted and keyed
        as usual, their descriptions as written). System and messages go as the client wrote
        them.

        The state still follows the canonical form (values, digest, learned spans), so the
        call where a value first changes is recognised and can move the values out.
        """
        tools_out, fingerprint = self._tools(tools)
        if state.tool_fingerprint is not None and fingerprint != state.tool_fingerprint:
            state.tool_changes += 1
            logger.info(
                "tool set changed mid-thread (%s -> %s): the cached prefix breaks at the tools",
                state.tool_fingerprint,
                fingerprint,
            )
        state.values = dict(values)
        state.notes = []
        state.placement = None
        state.prefix_digest = digest
        state.tool_fingerprint = fingerprint
        state.history = mark
        state.calls += 1
        return tools_out

    def _note_changes(
        self,
        state: CanonicalState,
        current: Mapping[str, str],
        messages: Sequence[Message],
        n_leading: int,
    ) -> None:
        """Add a note for the values that changed since the model was last told them.

        The note goes to the newest user or tool message (the request's new turn: after the
        cached prefix). Without such a message, or past `MAX_NOTES`, the block is rewritten
        instead (the values refreshed: one prefix break, the state stays bounded).
        """
        cfg = self.config
        shown = state.shown
        changed = {
            label: value
            for label, value in current.items()
            if label in shown and note_due(label, shown[label], value, cfg)
        }
        if not changed:
            return
        at = next(
            (
                i
                for i in range(len(messages) - 1, n_leading - 1, -1)
                if messages[i].role in ("user", "tool")
            ),
            None,
        )
        if at is None or len(state.notes) >= MAX_NOTES:
            logger.info(
                "frozen values changed with %s: the block is rewritten",
                "no message to note them on" if at is None else "too many notes",
            )
            state.values = {**state.shown, **current}
            state.notes = []
            state.placement = None
            state.epoch += 1
            return
        note = ValueNote(at=at, digest=message_digest(messages[at]), values=changed)
        state.notes = [*state.notes, note]
        logger.debug("%d frozen value(s) changed: noted after the cached prefix", len(changed))

    def _render(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        state: CanonicalState,
    ) -> _Rendered:
        """The canonical tools, system and leading system messages (no block yet)."""
        cfg = self.config
        learned = state.learned if cfg.learn_volatile else ()
        assigner = _Assigner(cfg, learned, self._clocks)
        tools_out, fingerprint = self._tools(tools)
        if cfg.canonicalize_tool_descriptions or cfg.learn_volatile:
            described = [
                _canonical_descriptions(t, assigner, builtins=cfg.canonicalize_tool_descriptions)
                for t in tools_out
            ]
            if any(a is not b for a, b in zip(described, tools_out, strict=True)):
                fingerprint = tool_fingerprint(described)
                # Jittering descriptions frozen to the same text: the same objects again.
                memo = self._described_memo
                if memo is not None and memo[0] == fingerprint:
                    described = list(memo[1])
                else:
                    self._described_memo = (fingerprint, described)
            tools_out = described
        system_out = (
            assigner.canonicalize(system, group=_SYSTEM)[0] if isinstance(system, str) else system
        )
        out = list(messages)
        n_leading = 0
        if cfg.leading_system_messages:
            while n_leading < len(out) and out[n_leading].role == "system":
                out[n_leading] = self._stable(
                    out[n_leading], _canonical_message(out[n_leading], assigner)
                )
                n_leading += 1
        return _Rendered(assigner, system_out, out, tools_out, fingerprint, n_leading)

    def _learn(self, state: CanonicalState, assigner: _Assigner) -> bool:
        """Compare each group's texts with the previous call's; True when spans were learned.

        Learned placeholders are compared by value (the previous call's frozen values, this
        call's current ones): a value the learned shape missed then differs from its old value
        like any token, and is learned again with the same context (the span widens).
        """
        cfg = self.config
        texts = assigner.texts
        new_spans: list[LearnedSpan] = []
        for group in _GROUPS:
            base = state.baselines.get(group)
            if base is None:
                continue
            text = SEPARATOR.join(texts.get(group, ()))
            if text_digest(text) == base.digest:
                continue
            found = learn(
                self._by_value(base.text(), state.values),
                self._by_value(text, assigner.values),
                group,
                max_chars=cfg.learn_max_chars,
                placeholder=(cfg.placeholder_open, cfg.placeholder_close),
            )
            if found:
                new_spans.extend(found)
                logger.info(
                    "learned %d volatile span(s) in the %s texts (frozen from now on)",
                    len(found),
                    group,
                )
        if not new_spans:
            return False
        merged = merge_learned(state.learned, new_spans)
        if merged == state.learned:
            return False
        state.learned = merged
        return True

    def _by_value(self, text: str, values: Mapping[str, str]) -> str:
        """`text` with its learned placeholders replaced by their values."""
        for label, value in values.items():
            if label.startswith(LEARNED_KIND + "_"):
                text = text.replace(self.config.placeholder(label), value)
        return text

    def _update_state(
        self,
        state: CanonicalState,
        current: dict[str, str],
        digest: str,
        fingerprint: str,
        *,
        maintenance: bool,
        diverged: bool = False,
        moved: bool = False,
    ) -> None:
        cfg = self.config
        first = state.prefix_digest is None
        changed = not first and (digest != state.prefix_digest or diverged)
        if state.tool_fingerprint is not None and fingerprint != state.tool_fingerprint:
            state.tool_changes += 1
            logger.info(
                "tool set changed mid-thread (%s -> %s): the cached prefix breaks at the tools",
                state.tool_fingerprint,
                fingerprint,
            )
        refresh = (
            first
            or moved  # the values leave the prompt: the block is written with current ones
            or (diverged and not first)  # another conversation: never its predecessor's values
            or cfg.refresh == "always"
            or (cfg.refresh == "maintenance" and maintenance)
            or (changed and cfg.refresh != "never" and cfg.refresh_on_prefix_change)
        )
        if refresh:
            if not first and current and (current != state.values or state.notes):
                state.epoch += 1
            if current:
                state.values = dict(current)
                state.placement = None  # re-resolved below
            state.notes = []  # coalesced into the block
        else:
            missing = {k: v for k, v in current.items() if k not in state.values}
            if missing:
                state.values = {**state.values, **missing}
        state.prefix_digest = digest
        state.tool_fingerprint = fingerprint
        state.calls += 1


_SYSTEM = "system"
_TOOLS = "tools"
_GROUPS = (_SYSTEM, _TOOLS)


@dataclass(frozen=True, slots=True)
class _Rendered:
    assigner: _Assigner
    system: str | None
    messages: list[Message]
    tools: list[dict[str, Any]]
    fingerprint: str
    leading: int


def _keep_baselines(
    state: CanonicalState, texts: Mapping[str, Sequence[str]], max_chars: int
) -> None:
    """Remember this call's canonical texts per group (re-packed only when they changed)."""
    for group in _GROUPS:
        text = SEPARATOR.join(texts.get(group, ()))
        base = state.baselines.get(group)
        if base is not None and base.digest == text_digest(text):
            continue
        if not text or len(text) > max_chars:
            if group in state.baselines:
                state.baselines = {k: v for k, v in state.baselines.items() if k != group}
            continue
        state.baselines = {**state.baselines, group: Baseline.of(text)}


def _digest(fingerprint: str, system: str | None, leading: Sequence[Message]) -> str:
    h = hashlib.sha256()
    h.update(fingerprint.encode())
    h.update(b"\x00" if system is None else b"\x01" + system.encode("utf-8", "surrogatepass"))
    for message in leading:
        h.update(b"\x02" + message.text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def _canonical_descriptions(
    tool: dict[str, Any], assigner: _Assigner, *, builtins: bool
) -> dict[str, Any]:
    """`tool` with its ``description`` strings canonicalized (the same object when none
    changed, so identity memos downstream keep hitting)."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            changed = False
            for k, v in obj.items():
                if k == "description" and isinstance(v, str):
                    new = assigner.canonicalize(v, group=_TOOLS, builtins=builtins)[0]
                else:
                    new = walk(v)
                changed = changed or new is not v
                out[k] = new
            return out if changed else obj
        if isinstance(obj, list):
            items = [walk(v) for v in obj]
            return items if any(a is not b for a, b in zip(items, obj, strict=True)) else obj
        return obj

    out = walk(tool)
    return out if isinstance(out, dict) else tool


def _canonical_message(message: Message, assigner: _Assigner) -> Message:
    if isinstance(message.content, str):
        text, spans = assigner.canonicalize(message.content, group=_SYSTEM)
        return dataclasses.replace(message, content=text) if spans else message
    parts: list[ContentPart] = []
    changed = False
    for part in message.content:
        if isinstance(part, TextPart):
            text, spans = assigner.canonicalize(part.text, group=_SYSTEM)
            if spans:
                part = dataclasses.replace(part, text=text)  # noqa: PLW2901
                changed = True
        parts.append(part)
    return dataclasses.replace(message, content=tuple(parts)) if changed else message


def _append_text(text: str | None, block: str) -> str:
    if not text:
        return block
    if text.endswith(block) and text[: -len(block)].endswith("\n\n"):
        return text
    return f"{text}\n\n{block}"


def _append_block(message: Message, block: str) -> Message:
    if isinstance(message.content, str):
        return dataclasses.replace(message, content=_append_text(message.content, block))
    if message.content and message.content[-1] == TextPart(block):
        return message
    return dataclasses.replace(message, content=(*message.content, TextPart(block)))


def _append_note(message: Message, note: str) -> Message:
    """`message` with an update note at its end (a text part of its own in a part list)."""
    if isinstance(message.content, str):
        text = message.content
        return dataclasses.replace(message, content=f"{text}\n\n{note}" if text else note)
    return dataclasses.replace(message, content=(*message.content, TextPart(note)))


def _prepend_block(message: Message, block: str) -> Message:
    content = message.content
    if isinstance(content, str):
        if content == block or content.startswith(block + "\n\n"):
            return message  # already carries this block
        return dataclasses.replace(message, content=f"{block}\n\n{content}" if content else block)
    if content and content[0] == TextPart(block):
        return message
    return dataclasses.replace(message, content=(TextPart(block), *content))

"""Classifying the first difference between two rendered requests (a tool, the system
prompt, a message): the finding `cachepilot.diagnose.breaks.explain` reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from cachepilot.canonical import canonicalize_text, detect_volatile, tool_name
from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart, content_hash
from cachepilot.plan.epochs import FOLD_ID_PREFIX

__all__ = [
    "CauseKind",
    "Finding",
    "classify_messages",
    "classify_system",
    "classify_tools",
    "message_text",
    "volatile_kind",
]

CauseKind: TypeAlias = Literal[
    "none",
    "volatile_value",
    "tool_change",
    "system_change",
    "history_rewrite",
    "model_change",
    "parameter_change",
    "ttl_expiry",
    "below_minimum",
    "provider_miss",
    "provider_edit",
]
"""Why a request missed the cache where it did (see `cachepilot.diagnose.breaks`)."""

_STUB_RATIO = 0.5


def message_text(message: Message) -> str:
    """A message as readable text: its parts in order, then its tool calls.

    Reasoning shows as `[reasoning] …`, an image as `[image <url head>]`, a tool call as
    `[call name {arguments}]`. Divergence offsets in messages are offsets into this text.
    """
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ReasoningPart):
            pieces.append(f"[reasoning] {part.text}")
        elif isinstance(part, ImagePart):
            pieces.append(f"[image {part.url[:60]}]")
    pieces.extend(f"[call {call.name} {call.arguments}]" for call in message.tool_calls)
    return "\n".join(pieces)


def volatile_kind(before: str, after: str, offset: int) -> str | None:
    """The volatile kind whose value changed at `offset`, or None.

    Either the first difference falls inside a detected span of one side, or both texts
    canonicalize to the same text (only volatile values differ).
    """
    for text in (after, before):
        for span in detect_volatile(text):
            if span.start <= offset < span.end or (span.start == offset and span.end > offset):
                return span.kind
            if span.start > offset:
                break
    a, b = canonicalize_text(before), canonicalize_text(after)
    if a.text == b.text and a.values != b.values:
        for label, value in b.values.items():
            if a.values.get(label) != value:
                return label.rsplit("_", 1)[0]
    return None


@dataclass(frozen=True, slots=True)
class Finding:
    cause: CauseKind
    detail: str
    what: str
    notes: tuple[str, ...] = ()


def classify_tools(
    prev: Sequence[Mapping[str, Any]],
    cur: Sequence[Mapping[str, Any]],
    *,
    index: int,
    offset: int,
    before: str,
    after: str,
) -> Finding:
    names_p = [tool_name(t) for t in prev]
    names_c = [tool_name(t) for t in cur]
    added = sorted(set(names_c) - set(names_p))
    removed = sorted(set(names_p) - set(names_c))
    if added and removed:
        return Finding(
            "tool_change",
            "replaced",
            f"tools replaced: -{', -'.join(removed)} +{', +'.join(added)}",
        )
    if added:
        return Finding("tool_change", "added", f"tools added: {', '.join(added)}")
    if removed:
        return Finding("tool_change", "removed", f"tools removed: {', '.join(removed)}")
    if names_p != names_c:
        return Finding(
            "tool_change",
            "reordered",
            f"tools reordered: {', '.join(names_p)} → {', '.join(names_c)}",
        )
    name = names_c[index] if index < len(names_c) else "?"
    kind = volatile_kind(before, after, offset)
    if kind is not None:
        return Finding(
            "volatile_value", kind, f"volatile value ({kind}) in the schema of tool {name!r}"
        )
    return Finding("tool_change", "schema_changed", f"schema of tool {name!r} changed")


def classify_system(prev: str | None, cur: str | None, offset: int) -> Finding:
    if prev is None:
        return Finding("system_change", "added", "system prompt added")
    if cur is None:
        return Finding("system_change", "removed", "system prompt removed")
    kind = volatile_kind(prev, cur, offset)
    if kind is not None:
        return Finding("volatile_value", kind, f"volatile value ({kind}) in the system prompt")
    return Finding("system_change", "edited", "system prompt edited")


def _same_calls_modulo_json(p: Message, c: Message) -> bool:
    if len(p.tool_calls) != len(c.tool_calls):
        return False
    return all(
        a.name == b.name and a.id == b.id and a.parsed_arguments() == b.parsed_arguments()
        for a, b in zip(p.tool_calls, c.tool_calls, strict=True)
    )


def _reasoning(message: Message) -> tuple[str, ...]:
    return tuple(p.text for p in message.parts if isinstance(p, ReasoningPart))


def _classify_one(p: Message, c: Message, offset: int) -> Finding:
    """One message replaced by another at the same place."""
    if p.role != c.role:
        return Finding("history_rewrite", "role_changed", f"role changed {p.role} → {c.role}")
    before, after = message_text(p), message_text(c)
    kind = volatile_kind(before, after, offset)
    if kind is not None:
        return Finding("volatile_value", kind, f"volatile value ({kind}) in a {c.role} message")
    if p.role == "tool":
        if len(after) <= _STUB_RATIO * len(before):
            return Finding(
                "history_rewrite",
                "stubbed",
                f"tool result {p.name or p.tool_call_id} cleared or stubbed "
                f"({len(before):,} → {len(after):,} chars)",
            )
        return Finding("history_rewrite", "edited", f"tool result {p.name or ''} edited".strip())
    if p.role == "assistant":
        if p.text == c.text and p.tool_calls == c.tool_calls and _reasoning(p) != _reasoning(c):
            what = "reasoning dropped" if not _reasoning(c) else "reasoning changed"
            return Finding("history_rewrite", "reasoning_changed", f"{what} in an assistant turn")
        if p.text == c.text and _same_calls_modulo_json(p, c):
            return Finding(
                "history_rewrite",
                "reserialized",
                "tool-call arguments re-serialized (same JSON, different bytes)",
            )
    return Finding("history_rewrite", "edited", f"{c.role} message edited")


def classify_messages(
    prev: Sequence[Message], cur: Sequence[Message], i: int, offset: int
) -> Finding:
    hp = [content_hash(m) for m in prev]
    hc = [content_hash(m) for m in cur]
    p, c = prev[i], cur[i]
    if i + 1 < len(prev) and i + 1 < len(cur) and hp[i] == hc[i + 1] and hc[i] == hp[i + 1]:
        return Finding("history_rewrite", "reordered", f"messages {i} and {i + 1} swapped")
    if c.id is not None and c.id.startswith(FOLD_ID_PREFIX):
        return Finding("history_rewrite", "folded", "history folded into a summary")
    later_c = {h: k for k, h in reversed(list(enumerate(hc))) if k > i}
    later_p = {h: j for j, h in reversed(list(enumerate(hp))) if j > i}
    if hp[i] in later_c:
        n = later_c[hp[i]] - i
        return Finding("history_rewrite", "inserted", f"{n} message(s) inserted before message {i}")
    if hc[i] in later_p:
        n = later_p[hc[i]] - i
        return Finding("history_rewrite", "removed", f"{n} message(s) removed from message {i}")
    # Resynchronise: the first later current message that the previous request also has.
    resync = next(((k, later_p[h]) for k, h in enumerate(hc) if k > i and h in later_p), None)
    if resync is not None:
        k, j = resync
        if k == i + 1 and j > i + 1:
            replaced = sum(len(message_text(m)) for m in prev[i:j])
            if c.role in ("user", "system") and len(message_text(c)) < replaced:
                return Finding(
                    "history_rewrite",
                    "folded",
                    f"messages {i}..{j - 1} replaced by one summary message",
                )
            return Finding(
                "history_rewrite", "rewritten", f"messages {i}..{j - 1} replaced by one message"
            )
        if k != i + 1 or j != i + 1:
            return Finding(
                "history_rewrite",
                "rewritten",
                f"messages {i}..{j - 1} replaced by messages {i}..{k - 1}",
            )
    replaced = sum(len(message_text(m)) for m in prev[i:])
    if (
        resync is None
        and len(prev) - i > 2
        and c.role in ("user", "system")
        and len(message_text(c)) < replaced
    ):
        return Finding(
            "history_rewrite",
            "folded",
            f"messages {i}..{len(prev) - 1} replaced by a summary (compaction)",
        )
    finding = _classify_one(p, c, offset)
    # The same kind of edit usually comes in batches (every old tool result cleared at once).
    aligned = min(len(prev), len(cur))
    changed = sum(1 for x in range(i, aligned) if hp[x] != hc[x])
    if changed > 1 and finding.cause == "history_rewrite":
        notes = (f"{changed} of the {aligned - i} messages from message {i} on differ",)
        return Finding(finding.cause, finding.detail, finding.what, notes)
    return finding

"""The maintenance plan: ordered epochs of edits, applied deterministically to a transcript.

The view a model sees is `apply_plan(transcript, plan)`. Epochs are only ever appended, so the
view's already-sent part changes only when a new epoch is added (DESIGN §2.1). Edits address
messages by their stable key (`messages.message_keys`), never by position.

Edit kinds:

* `stub` / `evict` replace one tool result's content with `text`.
* `args` replaces the arguments of one tool call (`call_id`) of one assistant message with
  `text` (long values reduced, see `cachepilot.plan.arguments`); the call's id and name stay, so
  pairing holds.
* `fold` replaces the whole transcript range `[key .. end_key]` (inclusive, by the positions of
  those keys in the current transcript) with ONE user message whose content is `text` (see
  `fold_message`). Folds compose deterministically, in plan order (epoch order, then edit
  order): a fold whose range contains an earlier fold's whole range supersedes it (the
  differential fold: its summary covers the earlier summary plus the newer messages); a fold
  that overlaps an earlier one only partly is skipped with a warning; a fold whose keys are not
  in the transcript, are reversed, or whose range is not closed under tool-call pairing (a call
  answered outside the range, a result whose call is outside it) is skipped with a log line.
  A fold already written into the transcript (its summary carries the first folded message's
  key and the rest is gone), or superseded by a later fold of the plan written there, is
  recognised and left as it is.
  So the view keeps `pairing_issues(view) == []` whenever the transcript had it.
"""

from __future__ import annotations

import hashlib
import logging
import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, Field

from cachepilot.messages import Message, message_keys
from cachepilot.support.identity_memo import IdentityMemo

__all__ = [
    "FOLD_ID_PREFIX",
    "Edit",
    "Epoch",
    "Plan",
    "PlanRenderer",
    "PlanView",
    "apply_plan",
    "fold_message",
    "render_plan",
]

logger = logging.getLogger(__name__)


FOLD_ID_PREFIX = "cachepilot-fold-"
"""Prefix of the `id` of every fold summary message (the rest is a content digest)."""


class Edit(BaseModel):
    """One edit of one message (or, for a fold, of one range of messages)."""

    kind: Literal["stub", "evict", "fold", "args"]
    """`stub`: a pruned tool result; `evict`: a tool result of an evicted (superseded or
    finished) work unit. Both replace the result's content with `text`. `fold`: the range
    `key .. end_key` is replaced by one summary message with content `text`. `args`: the
    arguments of the tool call `call_id` of an assistant message become `text`. The originals
    are always archived first."""
    key: str
    """Stable key of the message the edit applies to (a fold: the first folded message)."""
    text: str
    """Replacement content."""
    ref: str | None = None
    """Artifact ref of the archived original."""
    end_key: str | None = None
    """Fold only: stable key of the last folded message (None: the range is `key` alone)."""
    call_id: str | None = None
    """`args` only: the id of the tool call whose arguments are replaced."""

    @property
    def last_key(self) -> str:
        """The key of the last message the edit covers (`end_key` for a fold, else `key`)."""
        return self.end_key if self.end_key is not None else self.key


class Epoch(BaseModel):
    """Edits appended together at one maintenance point."""

    index: int
    """0-based position in the plan."""
    reason: str
    """Why this maintenance point was taken (for explanations)."""
    edits: list[Edit] = Field(default_factory=list)

    def edited_keys(self) -> set[str]:
        """Keys of every message this epoch edits (a fold: its first and last keys)."""
        out: set[str] = set()
        for edit in self.edits:
            out.add(edit.key)
            if edit.end_key is not None:
                out.add(edit.end_key)
        return out


class Plan(BaseModel):
    """All epochs of one thread, oldest first."""

    epochs: list[Epoch] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when no edit was ever planned."""
        return not any(e.edits for e in self.epochs)

    def edited_keys(self) -> set[str]:
        """Keys of every message some epoch edited (a fold: its first and last keys)."""
        out: set[str] = set()
        for epoch in self.epochs:
            out |= epoch.edited_keys()
        return out

    def folds(self) -> list[Edit]:
        """Every fold edit, in plan order."""
        return [edit for epoch in self.epochs for edit in epoch.edits if edit.kind == "fold"]


# Identity memo of edited copies: the original is held weakly, so a message nothing else
# uses any more is not kept alive by its edits.
_EDIT_MEMO: IdentityMemo[Message, Message] = IdentityMemo(50_000)
_EDIT_LOCK = threading.Lock()


def _edited(message: Message, edit: Edit) -> Message:
    """The edited message, the same object on every call (token and hash memos keep hitting)."""
    hit = _EDIT_MEMO.get(message, edit.key, edit.text)
    if hit is not None:
        return hit
    return _EDIT_MEMO.put(message, replace(message, content=edit.text), edit.key, edit.text)


def _with_arguments(message: Message, edits: dict[str, Edit]) -> Message:
    """`message` with the arguments of the calls `edits` names replaced (the same object on
    every call, like `_edited`)."""
    calls = tuple(
        replace(c, arguments=edits[c.id].text) if c.id in edits else c for c in message.tool_calls
    )
    if all(a is b for a, b in zip(calls, message.tool_calls, strict=True)):
        return message
    arguments = "\x00".join(c.arguments for c in calls)
    hit = _EDIT_MEMO.get(message, "\x00args", arguments)
    if hit is not None:
        return hit
    return _EDIT_MEMO.put(message, replace(message, tool_calls=calls), "\x00args", arguments)


_FOLD_MEMO: OrderedDict[tuple[str, str, str, str | None], Message] = OrderedDict()
_FOLD_MEMO_MAX = 10_000
# Summaries are content-keyed (the memo holds their text): bounded by size as well.
_FOLD_MEMO_MAX_CHARS = 16 * 2**20
_fold_memo_chars = [0]  # a box: updated under _EDIT_LOCK


def fold_message(edit: Edit) -> Message:
    """The summary message that stands for a fold's range: the same object on every call.

    A user message with content `edit.text` and a deterministic id (`FOLD_ID_PREFIX` plus a
    digest of the range's keys and the text), so frameworks that need ids can persist it.
    """
    memo_key = (edit.key, edit.last_key, edit.text, edit.ref)
    with _EDIT_LOCK:
        hit = _FOLD_MEMO.get(memo_key)
        if hit is not None:
            _FOLD_MEMO.move_to_end(memo_key)
            return hit
    blob = "\x00".join((edit.key, edit.last_key, edit.text)).encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(blob).hexdigest()[:16]
    message = Message(role="user", content=edit.text, id=f"{FOLD_ID_PREFIX}{digest}")
    with _EDIT_LOCK:
        known = _FOLD_MEMO.get(memo_key)
        if known is not None:
            return known
        _FOLD_MEMO[memo_key] = message
        _fold_memo_chars[0] += _fold_chars(memo_key)
        while len(_FOLD_MEMO) > 1 and (
            len(_FOLD_MEMO) > _FOLD_MEMO_MAX or _fold_memo_chars[0] > _FOLD_MEMO_MAX_CHARS
        ):
            dropped, _ = _FOLD_MEMO.popitem(last=False)
            _fold_memo_chars[0] -= _fold_chars(dropped)
    return message


def _fold_chars(memo_key: tuple[str, str, str, str | None]) -> int:
    """Approximate size of one fold memo entry (the message shares the key's text)."""
    return 200 + sum(len(part) for part in memo_key if part is not None)


@dataclass(frozen=True, slots=True)
class PlanView:
    """A rendered view plus, for each view message, where it came from.

    Attributes:
        messages: the view (what `apply_plan` returns).
        keys: one key per view message: the transcript key of a kept or edited message;
            `id:<summary id>` for a fold summary (what `message_keys` gives it, unique per
            range and text, so per-key memos never mix two summaries).
        spans: per view message, the transcript keys of the first and last message it stands
            for (equal for every message but a fold summary).
        folds: per view message, the fold edit it renders, or None.
    """

    messages: list[Message]
    keys: list[str]
    spans: list[tuple[str, str]]
    folds: list[Edit | None]


@dataclass(slots=True)
class _Range:
    start: int
    end: int
    edit: Edit


def _closed(messages: Sequence[Message], start: int, end: int, answer_at: dict[str, int]) -> bool:
    """True when no tool call or result of `messages[start..end]` pairs with one outside it."""
    calls: set[str] = set()
    for message in messages[start : end + 1]:
        if message.role == "tool" and message.tool_call_id not in calls:
            return False
        for call in message.tool_calls:
            calls.add(call.id)
            at = answer_at.get(call.id)
            if at is not None and not start <= at <= end:
                return False
    return True


def _resolve_folds(
    messages: Sequence[Message], keys: Sequence[str], folds: Sequence[Edit]
) -> list[_Range]:
    position: dict[str, int] = {}
    for index, key in enumerate(keys):
        position.setdefault(key, index)
    answer_at: dict[str, int] = {}
    for index, message in enumerate(messages):
        if message.role == "tool" and message.tool_call_id is not None:
            answer_at.setdefault(message.tool_call_id, index)
    # (first key, summary text) -> plan index of the last fold with both.
    last_fold: dict[tuple[str, str], int] = {}
    for order, edit in enumerate(folds):
        last_fold[(edit.key, edit.text)] = order
    accepted: list[_Range] = []
    for order, edit in enumerate(folds):
        start, end = position.get(edit.key), position.get(edit.last_key)
        if start is None and end is None:
            logger.debug(
                "fold %s..%s: range not in the transcript; skipped", edit.key, edit.last_key
            )
            continue
        if (
            end is None
            and start is not None
            and last_fold.get((edit.key, messages[start].text), -1) >= order
        ):
            # Already applied in the transcript itself: a framework persisted the fold by
            # giving the summary the first folded message's id and removing the rest. The
            # summary there may be a later fold's that starts at the same message (a
            # differential fold planned on the persisted transcript), which supersedes this
            # one.
            logger.debug("fold %s..%s: already in the transcript", edit.key, edit.last_key)
            continue
        if start is None or end is None or end < start:
            logger.warning(
                "fold %s..%s: range does not resolve in the transcript; skipped",
                edit.key,
                edit.last_key,
            )
            continue
        if not _closed(messages, start, end, answer_at):
            logger.warning(
                "fold %s..%s would split a tool call from its result; skipped",
                edit.key,
                edit.last_key,
            )
            continue
        inside = [r for r in accepted if start <= r.start and r.end <= end]
        partial = [r for r in accepted if r not in inside and not (r.end < start or r.start > end)]
        if partial:
            logger.warning(
                "fold %s..%s overlaps the earlier fold %s..%s only partly; skipped",
                edit.key,
                edit.last_key,
                partial[0].edit.key,
                partial[0].edit.last_key,
            )
            continue
        accepted = [r for r in accepted if r not in inside]
        accepted.append(_Range(start, end, edit))
    accepted.sort(key=lambda r: r.start)
    return accepted


def render_plan(
    messages: Sequence[Message], plan: Plan, keys: Sequence[str] | None = None
) -> PlanView:
    """Render the view with its provenance (see `PlanView`); `apply_plan` is its `.messages`.

    Args:
        messages: the transcript.
        plan: the thread's plan.
        keys: the messages' stable keys, when the caller already has them.
    """
    keys = message_keys(messages) if keys is None else list(keys)
    if len(keys) != len(messages):
        raise ValueError(f"keys ({len(keys)}) must align with messages ({len(messages)})")
    return _render(messages, plan, keys).view


@dataclass(slots=True)
class _Rendered:
    """A full render plus what `PlanRenderer` needs to extend it."""

    view: PlanView
    edits: dict[str, Edit]
    """Stub and evict edits by key (the last one planned wins)."""
    args: dict[str, dict[str, Edit]]
    """Argument edits by message key, then call id (the last one planned wins)."""
    fold_keys: set[str]
    """First and last keys of every fold edit, resolved or not."""
    folded_calls: set[str]
    """Ids of the tool calls inside accepted fold ranges."""


def _render(messages: Sequence[Message], plan: Plan, keys: Sequence[str]) -> _Rendered:
    if plan.empty:
        view = PlanView(list(messages), list(keys), [(k, k) for k in keys], [None] * len(keys))
        return _Rendered(view, {}, {}, set(), set())
    edits: dict[str, Edit] = {}
    args: dict[str, dict[str, Edit]] = {}
    folds: list[Edit] = []
    for epoch in plan.epochs:
        for planned in epoch.edits:
            if planned.kind == "fold":
                folds.append(planned)
            elif planned.kind == "args":
                args.setdefault(planned.key, {})[planned.call_id or ""] = planned
            else:
                edits[planned.key] = planned
    ranges = _resolve_folds(messages, keys, folds) if folds else []
    out = PlanView([], [], [], [])
    next_range = 0
    index = 0
    while index < len(messages):
        if next_range < len(ranges) and ranges[next_range].start == index:
            fold = ranges[next_range]
            next_range += 1
            summary = fold_message(fold.edit)
            out.messages.append(summary)
            out.keys.append(f"id:{summary.id}")
            out.spans.append((fold.edit.key, fold.edit.last_key))
            out.folds.append(fold.edit)
            index = fold.end + 1
            continue
        key, message = keys[index], messages[index]
        found = edits.get(key)
        calls = args.get(key)
        if calls is not None and message.role == "assistant":
            out.messages.append(_with_arguments(message, calls))
        elif calls is not None:
            logger.warning("plan edit args does not fit message %s (%s)", key, message.role)
            out.messages.append(message)
        elif found is None:
            out.messages.append(message)
        elif message.role == "tool":
            out.messages.append(_edited(message, found))
        else:
            logger.warning(
                "plan edit %s does not fit message %s (%s)", found.kind, key, message.role
            )
            out.messages.append(message)
        out.keys.append(key)
        out.spans.append((key, key))
        out.folds.append(None)
        index += 1
    fold_keys = {k for edit in folds for k in (edit.key, edit.last_key)}
    folded_calls = {
        call.id
        for fold in ranges
        for message in messages[fold.start : fold.end + 1]
        for call in message.tool_calls
    }
    return _Rendered(out, edits, args, fold_keys, folded_calls)


def _plan_mark(plan: Plan) -> tuple[int, Epoch | None, int]:
    """What changes when an epoch is appended (epochs are append-only; see the module doc).

    The last epoch is held, not its `id`, so a replaced epoch cannot pass for the old one.
    """
    if not plan.epochs:
        return (0, None, 0)
    last = plan.epochs[-1]
    return (len(plan.epochs), last, len(last.edits))


def _same_mark(a: tuple[int, Epoch | None, int], b: tuple[int, Epoch | None, int]) -> bool:
    return a[0] == b[0] and a[1] is b[1] and a[2] == b[2]


class PlanRenderer:
    """`render_plan` for a transcript that grows between calls, in O(new messages).

    When the plan is the same object with no epoch appended and the transcript starts with
    the very message objects (and keys) of the previous render, only the new messages are
    rendered: a message that no edit names, that is no fold boundary and that answers no call
    inside a folded range is shown as is, exactly as a full render would show it. Anything
    else (a new epoch, another plan object, a changed or shortened transcript, a new message
    an edit or a fold could concern) falls back to a full `render_plan`. Not thread-safe:
    keep one per thread of conversation, under the caller's lock.
    """

    def __init__(self) -> None:
        self._plan: Plan | None = None
        self._mark: tuple[int, Epoch | None, int] = (0, None, 0)
        self._messages: list[Message] = []
        self._keys: list[str] = []
        self._key_set: set[str] = set()
        self._state: _Rendered | None = None
        self.extended_from: int | None = None
        """After `render`: the length of the previous view when the new view extends it
        (its first `extended_from` messages are the same objects), else None."""

    def render(self, messages: Sequence[Message], plan: Plan, keys: Sequence[str]) -> PlanView:
        """The view of `messages` under `plan` (equal to `render_plan(messages, plan, keys)`).

        The returned lists are fresh copies: the caller may keep or change them.
        """
        if len(keys) != len(messages):
            raise ValueError(f"keys ({len(keys)}) must align with messages ({len(messages)})")
        state = self._state
        known = len(self._messages)
        if (
            state is not None
            and plan is self._plan
            and _same_mark(_plan_mark(plan), self._mark)
            and len(messages) >= known
            and all(map(operator.is_, self._messages, messages))
            and self._keys == list(keys[:known])
            and self._extend(state, messages, keys, known)
        ):
            self.extended_from = len(state.view.messages) - (len(messages) - known)
        else:
            self._state = state = _render(messages, plan, list(keys))
            self._plan, self._mark = plan, _plan_mark(plan)
            self._messages, self._keys = list(messages), list(keys)
            self._key_set = set(self._keys)
            self.extended_from = None
        view = state.view
        return PlanView(list(view.messages), list(view.keys), list(view.spans), list(view.folds))

    def _extend(
        self, state: _Rendered, messages: Sequence[Message], keys: Sequence[str], known: int
    ) -> bool:
        """Append the messages after `known` to the view; False (nothing changed) when one of
        them needs a full render."""
        new_keys = list(keys[known:])
        seen: set[str] = set()
        for message, key in zip(messages[known:], new_keys, strict=True):
            if (
                key in self._key_set
                or key in seen  # a repeated key: positions resolve to its first occurrence
                or key in state.edits
                or key in state.args
                or key in state.fold_keys
                or (message.role == "tool" and message.tool_call_id in state.folded_calls)
            ):
                return False
            seen.add(key)
        view = state.view
        for message, key in zip(messages[known:], new_keys, strict=True):
            view.messages.append(message)
            view.keys.append(key)
            view.spans.append((key, key))
            view.folds.append(None)
        self._messages.extend(messages[known:])
        self._keys.extend(new_keys)
        self._key_set.update(new_keys)
        return True


def apply_plan(
    messages: Sequence[Message], plan: Plan, keys: Sequence[str] | None = None
) -> list[Message]:
    """Render the view: the transcript with every planned edit applied, in epoch order.

    Unedited messages are returned as the same objects, and so are edited ones and fold
    summaries across calls. Edits whose message is not in the transcript (yet, or any more)
    are ignored; an edit that does not fit its message (a stub on a non-tool message, a fold
    that would split a tool call from its result) is skipped with a log line, never applied
    half-way. Fold semantics: see the module docstring.

    Args:
        messages: the transcript.
        plan: the thread's plan.
        keys: the messages' stable keys, when the caller already has them.
    """
    if plan.empty:
        return list(messages)
    return render_plan(messages, plan, keys).messages

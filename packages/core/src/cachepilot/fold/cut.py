"""The cut: where a fold range starts (after the task statement) and ends (before the
protected tail, never between a tool call and its result)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cachepilot.fold.request import MIN_FOLD_MESSAGES, is_fold_summary
from cachepilot.messages import Message
from cachepilot.plan.epochs import Edit, PlanView
from cachepilot.tokens import TokenCounter, get_counter

__all__ = ["cut_before", "fold_start", "safe_cut", "straddled"]

logger = logging.getLogger(__name__)


def fold_start(messages: Sequence[Message], folds: Sequence[Edit | None] | None = None) -> int:
    """Where a fold range starts: after the leading system messages and the task statement.

    The first message after the leading system messages is kept out of the fold when it is a
    user message that is not itself a fold summary (`folds`: per message, its fold edit, as
    in `PlanView.folds`; summaries are also recognised by their id prefix or header, so a
    summary a framework persisted into its state still starts the next, differential fold).
    """
    index = 0
    while index < len(messages) and messages[index].role == "system":
        index += 1
    if index < len(messages) and messages[index].role == "user":
        planned = folds is not None and folds[index] is not None
        if not planned and not is_fold_summary(messages[index]):
            index += 1
    return index


def straddled(messages: Sequence[Message]) -> list[bool]:
    """`bad[c]`: cutting before message c would separate a tool call from its result."""
    call_at: dict[str, int] = {}
    diff = [0] * (len(messages) + 2)
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            call_at.setdefault(call.id, index)
        if message.role == "tool" and message.tool_call_id in call_at:
            at = call_at[message.tool_call_id]
            if at < index:
                diff[at + 1] += 1
                diff[index + 1] -= 1
    bad: list[bool] = []
    running = 0
    for index in range(len(messages) + 1):
        running += diff[index]
        bad.append(running > 0)
    return bad


def safe_cut(
    messages: Sequence[Message],
    keys: Sequence[str] | None = None,
    *,
    protect_tail_tokens: int,
    counter: TokenCounter | None = None,
    min_messages: int = MIN_FOLD_MESSAGES,
    start: int | None = None,
) -> int | None:
    """Where the folded range ends (exclusive), or None when there is nothing worth folding.

    Rules: the range is `[start, cut)` with `start = fold_start(messages)` (the task statement
    stays); the tail `messages[cut:]` holds at least `protect_tail_tokens` tokens (counted
    back from the end) and at least the last message; `cut` then moves back (the tail only
    grows) until the tail does not start with a tool message and no tool call before `cut`
    is answered at or after it (parallel calls included). Messages are never split.

    Args:
        messages: the view.
        keys: its keys (for the counter's memo), when known.
        protect_tail_tokens: tokens at the end that are never folded.
        counter: token counter (default: the shared one).
        min_messages: fewer messages than this in the range → None.
        start: where the range starts (default `fold_start(messages)`).

    Raises:
        ValueError: on negative arguments or misaligned keys.
    """
    if protect_tail_tokens < 0 or min_messages < 1:
        raise ValueError("need protect_tail_tokens >= 0 and min_messages >= 1")
    if keys is not None and len(keys) != len(messages):
        raise ValueError(f"keys ({len(keys)}) must align with messages ({len(messages)})")
    counter = counter or get_counter()
    begin = fold_start(messages) if start is None else start
    n = len(messages)
    cut = n
    tail = 0
    while cut > begin and tail < protect_tail_tokens:
        cut -= 1
        tail += counter.count_message(messages[cut], None if keys is None else keys[cut])
    cut = min(cut, n - 1)
    bad = straddled(messages)
    if begin < n and (bad[begin] or messages[begin].role == "tool"):
        logger.warning("fold: the range would start inside a tool exchange; not folding")
        return None
    while cut > begin and (messages[cut].role == "tool" or bad[cut]):
        cut -= 1
    if cut - begin < min_messages:
        return None
    return cut


def cut_before(
    view: PlanView, keep_from: str, start: int, min_messages: int = MIN_FOLD_MESSAGES
) -> int | None:
    """The view index of transcript key `keep_from` as the end of a fold starting at
    `start`, when it is a safe one (no tool exchange split, at least `min_messages`)."""
    cut = next((i for i, span in enumerate(view.spans) if span[0] == keep_from), None)
    if cut is None or cut - start < min_messages:
        return None
    bad = straddled(view.messages)
    if bad[cut] or bad[start] or view.messages[cut].role == "tool":
        logger.debug("fold: %s is inside a tool exchange; not folding there", keep_from)
        return None
    return cut

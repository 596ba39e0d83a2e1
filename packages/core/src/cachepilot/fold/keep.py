"""What a fold keeps in view: the conversation the model works with (DESIGN §2.7).

A fold replaces one contiguous range, so it keeps a message in view by starting after it: the
range is the stretch of work between the last message it must keep and the protected tail
(an earlier fold's summary stays where it is, and the conversation between the two stays
verbatim). Two levels:

- **strict** (the model cannot call `recall` in this request, e.g. a tool-less client through
  the proxy): no user message and no reply without tool calls is folded; only tool exchanges
  (the calls and their results) may be.
- **conversation** (recall offered; the lifecycle's finished-task fold and the cost-model
  fold): a tool-less exchange (a user turn whose answer holds no tool call: a plain chat turn,
  a file, repo map or few-shot example sent as messages) is never folded as finished work, and
  neither is a single user message or reply longer than `message_tokens` (pasted content, a
  plan the model wrote).

The fold past the context trigger (it must shrink) and the emergency fold after a provider
context-length error are not bounded here when recall is offered: they archive the range and
name it to a model that can recall it.
"""

from __future__ import annotations

from collections.abc import Sequence

from cachepilot.fold.cut import straddled
from cachepilot.fold.request import is_fold_summary
from cachepilot.messages import Message
from cachepilot.plan.epochs import Edit

__all__ = ["fold_begin", "fold_stretches", "is_conversation"]


def is_conversation(message: Message) -> bool:
    """A user message or a reply without tool calls (not a fold summary)."""
    if message.role == "user":
        return not is_fold_summary(message)
    return message.role == "assistant" and not message.tool_calls


def _tool_less_turns(
    messages: Sequence[Message], folds: Sequence[Edit | None] | None
) -> list[bool]:
    """Per message: it belongs to a user turn (a run of user messages up to the next one)
    whose answer holds no tool call. Messages before the first user message, and summaries,
    belong to no turn (False)."""
    out = [False] * len(messages)
    turn_start: int | None = None
    has_tools = False
    previous_user = False

    def close(end: int) -> None:
        if turn_start is not None and not has_tools:
            for i in range(turn_start, end):
                out[i] = True

    for index, message in enumerate(messages):
        summary = (folds is not None and folds[index] is not None) or is_fold_summary(message)
        if summary:
            # A summary ends the turn before it: what follows it continues folded work.
            close(index)
            turn_start = None
        elif message.role == "user" and not previous_user:
            close(index)
            turn_start, has_tools = index, False
        elif message.role == "tool" or message.tool_calls:
            has_tools = True
        previous_user = message.role == "user" and not summary
    close(len(messages))
    return out


def _kept(
    messages: Sequence[Message],
    start: int,
    end: int,
    *,
    sizes: Sequence[int],
    strict: bool,
    message_tokens: int,
    folds: Sequence[Edit | None] | None,
) -> list[int]:
    """Indices in `[start, end)` of the messages a fold keeps in view."""
    if len(sizes) != len(messages):
        raise ValueError(f"sizes ({len(sizes)}) must align with messages ({len(messages)})")
    if not 0 <= start <= end <= len(messages):
        raise ValueError(f"bad range [{start}, {end}) of {len(messages)} messages")
    tool_less = None if strict else _tool_less_turns(messages, folds)
    out: list[int] = []
    for index in range(start, end):
        message = messages[index]
        if (folds is not None and folds[index] is not None) or not is_conversation(message):
            continue
        if strict or (tool_less is not None and tool_less[index]) or sizes[index] > message_tokens:
            out.append(index)
    return out


def fold_stretches(
    messages: Sequence[Message],
    start: int,
    end: int,
    *,
    sizes: Sequence[int],
    strict: bool,
    message_tokens: int,
    folds: Sequence[Edit | None] | None = None,
) -> list[tuple[int, int]]:
    """The stretches `[a, b)` of `messages[start:end]` a fold may take: between the messages
    it keeps in view, none starting with a tool result or splitting a tool exchange, in
    order (empty ones left out). Arguments as `fold_begin`.

    Raises:
        ValueError: on misaligned `sizes` or a range outside `messages`.
    """
    kept = _kept(
        messages,
        start,
        end,
        sizes=sizes,
        strict=strict,
        message_tokens=message_tokens,
        folds=folds,
    )
    bad = straddled(messages)
    out: list[tuple[int, int]] = []
    for first, stop in zip([start, *(k + 1 for k in kept)], [*kept, end], strict=True):
        a, b = _skip_forward(messages, bad, first, stop), stop
        while b > a and b < len(messages) and (bad[b] or messages[b].role == "tool"):
            b -= 1
        if a < b:
            out.append((a, b))
    return out


def fold_begin(
    messages: Sequence[Message],
    start: int,
    end: int,
    *,
    sizes: Sequence[int],
    strict: bool,
    message_tokens: int,
    folds: Sequence[Edit | None] | None = None,
) -> int:
    """Where a fold of `messages[start:end]` must begin to keep the conversation in view.

    Returns the least `b >= start` such that `messages[b:end]` holds no message to keep and
    `b` starts no tool result and splits no tool exchange (`end` when there is none).

    Args:
        messages: the view.
        start: where the fold range would start (`fold_start`).
        end: where it ends (exclusive).
        sizes: tokens of each view message.
        strict: keep every user message and every reply without tool calls.
        message_tokens: (not strict) a user message or reply longer than this is kept.
        folds: per message, its fold edit (as in `PlanView.folds`): a summary is not kept.

    Raises:
        ValueError: on misaligned `sizes` or a range outside `messages`.
    """
    kept = _kept(
        messages,
        start,
        end,
        sizes=sizes,
        strict=strict,
        message_tokens=message_tokens,
        folds=folds,
    )
    if not kept:
        return start
    return _skip_forward(messages, straddled(messages), kept[-1] + 1, end)


def _skip_forward(messages: Sequence[Message], bad: Sequence[bool], i: int, end: int) -> int:
    """The first index from `i` (at most `end`) that starts no tool result and splits no
    tool exchange."""
    while i < end and (bad[i] or messages[i].role == "tool"):
        i += 1
    return i

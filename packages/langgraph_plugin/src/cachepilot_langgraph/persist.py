"""Persist a thread's maintenance plan into LangGraph state, so that state is the view.

Only same-id replacements and per-id `RemoveMessage`s are produced: they merge through
`add_messages` (and any reducer built on it) and through delta channels alike, and never
reorder or split a message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from langchain_core.messages import BaseMessage, RemoveMessage

from cachepilot.messages import Message, message_keys
from cachepilot.plan.epochs import Plan, render_plan
from cachepilot_langgraph.convert import MessageConverter, to_langchain

__all__ = ["persisted_edits"]

logger = logging.getLogger(__name__)


def persisted_edits(
    messages: Sequence[BaseMessage],
    core: Sequence[Message],
    plan: Plan,
    converter: MessageConverter,
) -> list[BaseMessage]:
    """The state updates that turn `messages` into the planned view.

    Args:
        messages: the thread's messages as graph state holds them.
        core: `converter.to_core(messages)` (the very objects: unchanged view messages are
            recognised by identity).
        plan: the thread's plan.
        converter: the converter that produced `core`.

    Returns:
        A same-id copy for each message the plan rewrites (a stub keeps its message's id and
        place); for a fold, the summary under the first folded message's id followed by a
        `RemoveMessage` for each other folded id. Messages already equal to their view, and
        messages without an id (which cannot be addressed), are left out.
    """
    keys = message_keys(core)
    index = {k: i for i, k in enumerate(keys)}
    rendered = render_plan(core, plan, keys)
    out: list[BaseMessage] = []
    for view_msg, (first, last) in zip(rendered.messages, rendered.spans, strict=True):
        start, end = index.get(first), index.get(last)
        if start is None or end is None:
            continue
        base = messages[start]
        if start == end:
            if view_msg is core[start]:
                continue
            if base.id is None:
                logger.debug("message without id: its edit cannot be persisted")
                continue
            edited = to_langchain(view_msg, converter, {base.id: base})
            if edited is not base and (
                edited.content != base.content
                or getattr(edited, "tool_calls", None) != getattr(base, "tool_calls", None)
            ):
                out.append(edited)
            continue
        # A fold: the summary takes the first folded message's id (and so its place); the
        # rest of the range is removed by id.
        if any(m.id is None for m in messages[start : end + 1]):
            logger.warning("a folded message has no id; the fold is not persisted")
            continue
        summary = to_langchain(view_msg, converter)
        out.append(summary.model_copy(update={"id": base.id}))
        out.extend(RemoveMessage(id=str(m.id)) for m in messages[start + 1 : end + 1])
    return out

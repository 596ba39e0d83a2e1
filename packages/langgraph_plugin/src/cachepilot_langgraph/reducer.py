"""`cachepilot_messages`: an `add_messages` drop-in that reduces tool results at ingestion.

```python
class State(PilotStateMixin):
    messages: Annotated[list[AnyMessage], cachepilot_messages(pilot)]
```

For tool messages that reach state without the cachepilot tool node (a plain node that
runs a tool, `update_state`, a subgraph): each new, not yet ingested `ToolMessage` is
reduced once, its original archived (`recall` serves it), then merged exactly as
`add_messages` merges.

**Which thread.** A reducer gets no config. The thread of a result is, in order: the thread
(or the run's own scope, for a run without a `thread_id`) in which a cachepilot component
(model wrapper, maintenance node, tool node) saw the tool call it answers; else the thread of
the running context, when there is one; else the reducer's `thread` argument when one was
given. A result of no known thread is merged as it came (with a warning the first time):
never ingested into a thread another run could read.

**Idempotent.** Only messages new to the state are looked at (a same-id replacement, such as
a maintenance stub, is not); a result whose tool call already has a result in state is not
ingested again; every message that passed the gate carries
`response_metadata["cachepilot"] == "ingested"` (never sent to a provider) and is skipped
thereafter. Inputs are never mutated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.graph.message import Messages, add_messages

from cachepilot import CachePilot
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot_langgraph._shared import (
    current_config,
    is_ingested,
    link_of,
    mark_ingested,
    tool_output,
    with_content,
)
from cachepilot_langgraph.state import scoped, thread_of

__all__ = ["cachepilot_messages"]

logger = logging.getLogger(__name__)

MessagesReducer = Callable[[Messages, Messages], Messages]


def _calls(messages: Sequence[object]) -> dict[str, tuple[str, Any]]:
    out: dict[str, tuple[str, Any]] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    out[str(call["id"])] = (str(call.get("name", "")), call.get("args"))
    return out


def cachepilot_messages(
    pilot: CachePilot, *, namespace: str | None = None, thread: str | None = None
) -> MessagesReducer:
    """A messages reducer (`add_messages` semantics) that reduces new tool results.

    Args:
        pilot: the pilot shared with the graph's other cachepilot components.
        namespace: prefix of the cachepilot thread (as given to the other components).
        thread: a fixed thread for results of no known thread (see the module docstring);
            only for a graph that serves one conversation.

    Raises:
        ValueError: on a pilot that is not a `CachePilot` or an empty thread.
    """
    if not isinstance(pilot, CachePilot):
        raise ValueError(f"pilot must be a CachePilot, not {type(pilot).__name__}")
    if thread is not None and (not isinstance(thread, str) or not thread):
        raise ValueError("thread must be a non-empty str or None")
    link = link_of(pilot)
    fallback = scoped(thread, namespace) if thread is not None else None

    def thread_for(call_id: str) -> str | None:
        found = link.thread_of_call(call_id)
        if found is not None:
            return found
        config = current_config()
        current = thread_of(config, namespace)
        if current is None:
            current = link.scopes.resolve(config, namespace, create=False)
        if current is not None:
            return current
        if fallback is None:
            link.warn_once(
                "reducer-thread",
                "cachepilot_messages: the thread of a tool result is unknown (no cachepilot "
                "component saw its call); it is kept as it came",
            )
        return fallback

    def reduce(left: Messages, right: Messages) -> Messages:
        merged = add_messages(left, right)
        if not isinstance(merged, list):
            return merged
        before = left if isinstance(left, list) else [left]
        known = {m.id for m in before if isinstance(m, BaseMessage) and m.id}
        answered = {m.tool_call_id for m in before if isinstance(m, ToolMessage)}
        calls: dict[str, tuple[str, Any]] | None = None
        out = list(merged)
        for index, message in enumerate(out):
            if (
                not isinstance(message, ToolMessage)
                or message.id in known
                or is_ingested(message)
                or message.tool_call_id in answered
            ):
                continue
            answered.add(message.tool_call_id)
            if calls is None:
                calls = _calls(out)
            name, args = calls.get(message.tool_call_id, (message.name or "", None))
            if name == RECALL_TOOL_NAME:
                out[index] = mark_ingested(message)
                continue
            call_id = str(message.tool_call_id)
            target = thread_for(call_id)
            if target is None:
                continue
            try:
                text = pilot.ingest(name, args, tool_output(message), call_id, target)
            except Exception:  # the run goes on with the message as it came
                logger.warning(
                    "cachepilot_messages: ingestion of a tool result failed", exc_info=True
                )
                logger.debug("ingestion failed for call %s", call_id)
                continue
            out[index] = mark_ingested(with_content(message, text))
        return out

    reduce.__name__ = "cachepilot_messages"
    return reduce

"""LangChain's own context editing next to cachepilot (`ContextEditingMiddleware`).

`ClearToolUsesEdit` replaces old tool results by a placeholder in a copy of the request and
marks each one in its `response_metadata["context_editing"]` (`cleared: True`); it skips
results that already carry the mark. cachepilot reads the mark both ways:

* a result LangChain cleared before cachepilot's `wrap_model_call` (LangChain's middleware
  listed first) is shown as it is: the placeholder is never ingested, archived or stubbed;
* a result cachepilot's plan stubbed (a one-line stub naming its `recall` ref) is handed to
  the inner middlewares with the mark, so a `ContextEditingMiddleware` listed after
  cachepilot leaves the stub, and the ref it names, in place instead of clearing it again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from cachepilot.maintenance.policy import is_stub
from cachepilot.messages import Message

__all__ = ["CONTEXT_EDITING_KEY", "STRATEGY", "mark_stubs", "natively_cleared"]

CONTEXT_EDITING_KEY = "context_editing"
"""The `response_metadata` key LangChain's `ClearToolUsesEdit` writes and reads."""

STRATEGY = "cachepilot"
"""`context_editing["strategy"]` of a result cachepilot stubbed."""


def _edit_of(message: BaseMessage) -> Mapping[str, Any] | None:
    metadata = getattr(message, "response_metadata", None)
    if not isinstance(metadata, Mapping):
        return None
    edit = metadata.get(CONTEXT_EDITING_KEY)
    return edit if isinstance(edit, Mapping) else None


def natively_cleared(messages: Sequence[BaseMessage]) -> frozenset[str]:
    """Call ids of the tool results a native context editor cleared (not cachepilot)."""
    out: set[str] = set()
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        edit = _edit_of(message)
        if edit is not None and edit.get("cleared") and edit.get("strategy") != STRATEGY:
            out.add(str(message.tool_call_id))
    return frozenset(out)


def mark_stubs(
    view: Sequence[Message], sent: list[BaseMessage], originals: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """`sent` with each tool result the plan stubbed marked as cleared (copies only).

    Args:
        view: cachepilot's view (what `sent` was converted from, index for index).
        sent: the LangChain messages handed to the inner handler.
        originals: the request's own messages; these objects are never changed.
    """
    own = {id(m) for m in originals}
    out = list(sent)
    for index, (core, message) in enumerate(zip(view, sent, strict=False)):
        if core.role != "tool" or not isinstance(message, ToolMessage):
            continue
        if id(message) in own or not is_stub(core.text):
            continue
        metadata = dict(message.response_metadata)
        metadata[CONTEXT_EDITING_KEY] = {"cleared": True, "strategy": STRATEGY}
        out[index] = message.model_copy(update={"response_metadata": metadata})
    return out

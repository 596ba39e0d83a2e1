"""Anthropic `cache_control` marks on the request a LangChain Anthropic chat model receives.

Anthropic caches a prompt prefix only where a request marks one (at most four marks). When
the model is `langchain_anthropic.ChatAnthropic` (recognised by its class, without importing
the package) and the pilot's provider profile uses explicit breakpoints (`anthropic`,
`anthropic-1h`), the planner (`CachePilot.cache_breakpoints`: last message, bridge, stable
anchor, end of tools + system) chooses where, and each chosen message is sent as a copy whose
last markable content block carries `{"type": "ephemeral"}` (`"ttl": "1h"` under the 1-hour
profile). Graph state never sees a mark.

The caller's own marks (on content blocks, the system prompt, tool dicts, or the
`cache_control` call option) are kept and count against the four. A message whose wire form
cannot carry a mark at its end (an assistant message with only tool calls: LangChain rebuilds
its `tool_use` blocks) passes the mark to the closest earlier block that can: a slightly
shorter prefix, still stable.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from cachepilot import CachePilot
from cachepilot.messages import Message
from cachepilot.sim import get_profile
from cachepilot.support.log_labels import thread_label

__all__ = ["MarkedRequest", "is_anthropic_model", "mark_request", "uses_breakpoints"]

logger = logging.getLogger(__name__)

_HEADER = -1
_MAX_MARKS = 4
_MARKABLE = ("text", "tool_result", "image", "document")


def is_anthropic_model(model: object) -> bool:
    """True for `langchain_anthropic.ChatAnthropic` (or a subclass), also inside bindings."""
    seen = 0
    while model is not None and seen < 8:  # a RunnableBinding chain is short
        for cls in type(model).__mro__:
            if cls.__name__ == "ChatAnthropic" and cls.__module__.startswith("langchain_anthropic"):
                return True
        model = getattr(model, "bound", None)
        seen += 1
    return False


def uses_breakpoints(pilot: CachePilot) -> bool:
    """True when the pilot's provider profile caches at explicit breakpoints."""
    return get_profile(pilot.config.provider).match == "breakpoints"


def _mark(pilot: CachePilot) -> dict[str, str]:
    ttl = get_profile(pilot.config.provider).ttl_seconds
    return {"type": "ephemeral", "ttl": "1h"} if ttl and ttl >= 3600 else {"type": "ephemeral"}


def _has_mark(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("cache_control") for b in content
    )


def _client_marks(
    system: SystemMessage | None,
    messages: Sequence[BaseMessage],
    tools: Sequence[object],
    options: Mapping[str, Any],
) -> list[int]:
    """The caller's own marks as planner indices (-1: tools + system), one entry per mark on
    the wire: the provider counts each marked block, also two at one planner position."""
    out: list[int] = [_HEADER] * (_count_marks(system.content) if system is not None else 0)
    out.extend(_HEADER for t in tools if _tool_marked(t))
    for i, message in enumerate(messages):
        out.extend([i] * _count_marks(message.content))
    if options.get("cache_control") and messages:
        out.append(len(messages) - 1)  # automatic caching takes a slot (the last block)
    return out


def _marked_content(message: BaseMessage, mark: dict[str, str]) -> list[Any] | None:
    """`message`'s content with `mark` on its last markable block (None: none can carry it)."""
    content = message.content
    if isinstance(content, str):
        if not content.strip():
            return None
        return [{"type": "text", "text": content, "cache_control": mark}]
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        block = content[index]
        if isinstance(block, str):
            if not block.strip():
                continue
            block = {"type": "text", "text": block}
        if not isinstance(block, Mapping) or block.get("type") not in _MARKABLE:
            continue  # tool_use is rebuilt from tool_calls, others are not markable here
        if block.get("type") == "text" and not str(block.get("text", "")).strip():
            continue  # empty text blocks are dropped from the wire
        return [*content[:index], {**block, "cache_control": mark}, *content[index + 1 :]]
    return None


def _tool_marked(tool: object) -> bool:
    # A tool dict carries its mark itself; a LangChain tool in its `extras`, which
    # ChatAnthropic copies onto the tool's wire form.
    if isinstance(tool, Mapping):
        return bool(tool.get("cache_control"))
    extras = getattr(tool, "extras", None)
    return isinstance(extras, Mapping) and bool(extras.get("cache_control"))


def _count_marks(content: object) -> int:
    if not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, Mapping) and b.get("cache_control"))


class MarkedRequest:
    """The system message and messages to send, with the chosen marks (copies only)."""

    __slots__ = ("marks", "messages", "system")

    def __init__(
        self, system: SystemMessage | None, messages: list[BaseMessage], marks: list[int]
    ) -> None:
        self.system = system
        self.messages = messages
        self.marks = marks


def mark_request(
    pilot: CachePilot,
    thread: str,
    *,
    system_text: str | None,
    view: Sequence[Message],
    schemas: Sequence[Mapping[str, Any]],
    system: SystemMessage | None,
    messages: Sequence[BaseMessage],
    tools: Sequence[object] = (),
    options: Mapping[str, Any] | None = None,
) -> MarkedRequest:
    """Add the planner's marks to a prepared request (`view` is what `prepare` returned,
    `messages` its LangChain form, one for one). Never raises: a failure sends no marks."""
    out = list(messages)
    try:
        client = _client_marks(system, out, tools, options or {})
        used = len(client)
        if used >= _MAX_MARKS:
            return MarkedRequest(system, out, [])
        chosen = pilot.cache_breakpoints(system_text, view, schemas, thread, client=client)
    except Exception:
        logger.warning("thread %s: cache marks not planned", thread_label(thread), exc_info=True)
        return MarkedRequest(system, out, [])
    mark = _mark(pilot)
    budget = _MAX_MARKS - used
    done: list[int] = []
    taken = set(client)
    for index in sorted(chosen, reverse=True):
        if len(done) >= budget or index >= len(out):
            break
        if index == _HEADER:
            if system is not None and not _has_mark(system.content):
                content = _marked_content(system, mark)
                if content is not None:
                    system = system.model_copy(update={"content": content})
                    done.append(_HEADER)
            continue
        # The closest block at or before the chosen message that can carry the mark.
        for target in range(index, -1, -1):
            if target in taken:
                break
            message = out[target]
            content = _marked_content(message, mark)
            if content is None:
                continue
            out[target] = message.model_copy(update={"content": content})
            taken.add(target)
            done.append(target)
            break
    return MarkedRequest(system, out, sorted(done))

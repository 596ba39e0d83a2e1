"""The provenance types of a request body read as a view: `BodyView` and `Source`.

Kept apart from `cachepilot.wire.view` so the per-format view readers (Gemini's) can build
on them while `read_view` dispatches to those readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachepilot.messages import Message
from cachepilot.wire._common import Api

__all__ = ["BodyView", "Source"]


@dataclass(frozen=True, slots=True)
class Source:
    """Where one neutral message came from in a request body.

    Attributes:
        index: the raw message index (`messages[index]`; for Responses, the first `input`
            item).
        end: one past the last raw element (Responses items; `index + 1` otherwise).
        blocks: Anthropic only: the indices of the content blocks of `messages[index]` the
            message was read from (empty when the content is a plain string).
    """

    index: int
    end: int
    blocks: tuple[int, ...] = ()


@dataclass(slots=True)
class BodyView:
    """A request body in neutral form, with the provenance of every message.

    Attributes:
        api: the body's API.
        body: the body as received (never mutated).
        system: the system prompt as the wire readers build it (pieces joined by a blank line).
        system_texts: the pieces joined into `system`, in order (system messages or blocks,
            Responses `instructions` first).
        head: Chat: raw leading system messages; Responses: leading system items of `input`.
        messages: the conversation.
        sources: one `Source` per message.
        tools: the tool definitions as received.
        breakpoints: Anthropic: indices of the messages carrying a `cache_control` mark (-1
            for the system prompt or the tools); None when there is none.
        stateful: Responses only: the body continues a conversation held by the server
            (`previous_response_id` or `conversation`): it carries only the newest items.
    """

    api: Api
    body: Mapping[str, Any]
    system: str | None
    system_texts: tuple[str, ...]
    head: int
    messages: list[Message]
    sources: list[Source]
    tools: tuple[Mapping[str, Any], ...]
    breakpoints: list[int] | None = None
    stateful: bool = False

"""What Headroom's LangChain wrapper handed the model, back as the transcript's own messages.

`HeadroomChatModel` converts the LangChain messages it gets to OpenAI dicts, compresses them
and converts the result back to new LangChain messages: ids and tool names are gone and
tool-call arguments are re-parsed from `json.dumps(args)` (the chat model serializes them
from `args` either way, so the provider sees the same bytes as without the wrapper).
Headroom 0.42 edits content only and never adds, drops or reorders messages, so the result
is read position by position: a message whose content and tool calls came back unchanged is
the original `Message` object, one whose content changed is the original with the new
content. Any other shape (a different length or message type) is converted as it is.

Imports `langchain_core` at import time (the Headroom peer imports this module lazily).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from cachepilot.messages import Message
from cachepilot_bench.peers.lc_convert import from_lc, from_lc_message

__all__ = ["ViewRestorer"]


def _calls(message: BaseMessage) -> list[tuple[object, object, object]]:
    if not isinstance(message, AIMessage):
        return []
    return [(c.get("id"), c.get("name"), c.get("args")) for c in message.tool_calls]


def _lines_up(sent: BaseMessage, received: BaseMessage) -> bool:
    if type(sent) is not type(received):
        return False
    if isinstance(sent, ToolMessage) and isinstance(received, ToolMessage):
        return sent.tool_call_id == received.tool_call_id
    return True


class ViewRestorer:
    """Maps the wrapped model's input back to transcript messages, one call after another.

    Keeps the message built for each edited position, so content Headroom rewrites the same
    way on every call maps to the same object (cheap prefix comparisons in the harness).
    """

    def __init__(self) -> None:
        self._edited: dict[int, tuple[BaseMessage, Message, Message]] = {}
        self.unaligned_calls = 0
        """Calls whose output did not line up with the input (converted as they were)."""

    def restore(
        self,
        originals: Sequence[Message],
        sent: Sequence[BaseMessage],
        received: Sequence[BaseMessage],
    ) -> list[Message]:
        """The messages the model got, as transcript messages.

        Args:
            originals: the transcript messages (system prompt apart).
            sent: their LangChain copies, as handed to the wrapper.
            received: what the wrapped model was called with (system prompt apart).
        """
        aligned = len(sent) == len(originals) == len(received) and all(
            _lines_up(a, b) for a, b in zip(sent, received, strict=True)
        )
        if not aligned:
            self.unaligned_calls += 1
            return from_lc(received)
        out: list[Message] = []
        for index, (original, before, after) in enumerate(
            zip(originals, sent, received, strict=True)
        ):
            same_calls = _calls(before) == _calls(after)
            if same_calls and before.content == after.content:
                out.append(original)
            else:
                out.append(self._edited_message(index, original, after, same_calls))
        return out

    def _edited_message(
        self, index: int, original: Message, received: BaseMessage, same_calls: bool
    ) -> Message:
        cached = self._edited.get(index)
        if (
            cached is not None
            and cached[1] is original
            and cached[0].content == received.content
            and _calls(cached[0]) == _calls(received)
        ):
            return cached[2]
        converted = from_lc_message(received)
        message = Message(
            role=original.role,
            content=converted.content,
            # Unchanged calls keep their verbatim argument text; edited ones show the edit.
            tool_calls=original.tool_calls if same_calls else converted.tool_calls,
            tool_call_id=original.tool_call_id,
            name=original.name,
            id=original.id,
        )
        self._edited[index] = (received, original, message)
        return message

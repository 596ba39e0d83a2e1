"""The documented stream event orders: the replay provider's encoders keep them, and a
reordered stream is caught."""

from __future__ import annotations

import json

import pytest

from cachepilot.messages import Message, ReasoningPart, TextPart, ToolCall
from cachepilot.wire import anthropic_events, chat_chunks, responses_events
from cachepilot_bench.stream_rules import stream_order_errors

REPLY = Message(
    "assistant",
    (ReasoningPart("think", signature="enc"), TextPart("Let me look. " * 20)),
    tool_calls=(
        ToolCall("call_a", "recall", json.dumps({"ref": "0123456789ab"})),
        ToolCall("call_b", "bash", json.dumps({"command": "ls " * 30})),
    ),
)
USAGE = {"input_tokens": 10, "output_tokens": 5}


def _events(api: str) -> list[dict[str, object]]:
    if api == "anthropic":
        return list(anthropic_events(REPLY, id="msg_1", model="m", usage=USAGE))
    if api == "chat":
        return list(
            chat_chunks(
                REPLY, id="c1", model="m", created=0, usage={"prompt_tokens": 1}, include_usage=True
            )
        )
    return list(responses_events(REPLY, id="resp_1", model="m", created=0, usage=USAGE, body={}))


@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_the_encoders_stream_in_the_documented_order(api: str) -> None:
    events = _events(api)
    assert len(events) > 6
    assert stream_order_errors(api, events) == []


@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_a_moved_event_breaks_the_order(api: str) -> None:
    events = _events(api)
    # Move the last event first: the stream no longer opens or closes as documented.
    moved = [events[-1], *events[:-1]]
    assert stream_order_errors(api, moved)
    # Swap two blocks' / items' events: an event lands outside its block or item.
    if api != "chat":
        kind = "content_block_start" if api == "anthropic" else "response.output_item.added"
        starts = [i for i, e in enumerate(events) if e.get("type") == kind]
        swapped = [*events]
        swapped[starts[1]], swapped[starts[1] - 1] = swapped[starts[1] - 1], swapped[starts[1]]
        assert stream_order_errors(api, swapped)
    else:
        assert stream_order_errors(api, [*events, events[1]])

"""Tool-call arguments reduced by a maintenance point reach an Anthropic upstream: the
assistant turn is written back with the new `tool_use` input and every other block as the
client sent it (thinking signatures, marks)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

from cachepilot.messages import Message, ToolCall
from cachepilot.wire import read_view, write_view

BIG = "x = 1\n" * 2_000


def body() -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 512,
        "messages": [
            {"role": "user", "content": "write the module"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                    {"type": "text", "text": "Writing it."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Write",
                        "input": {"file_path": "m.py", "content": BIG},
                    },
                    {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"cmd": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "m.py",
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
        ],
    }


def with_arguments(message: Message, call_id: str, arguments: str) -> Message:
    calls = tuple(
        replace(c, arguments=arguments) if c.id == call_id else c for c in message.tool_calls
    )
    return replace(message, tool_calls=calls)


def test_edited_arguments_are_written_and_the_rest_of_the_turn_is_kept() -> None:
    sent = body()
    view = read_view(sent, "anthropic")
    reduced = json.dumps({"file_path": "m.py", "content": "[2,000 lines written; recall]"})
    out = list(view.messages)
    out[1] = with_arguments(out[1], "toolu_1", reduced)
    written = write_view(view, view.system, out, None)
    blocks = written["messages"][1]["content"]
    original = sent["messages"][1]["content"]
    assert blocks[2]["input"] == json.loads(reduced)
    assert {k: v for k, v in blocks[2].items() if k != "input"} == {
        k: v for k, v in original[2].items() if k != "input"
    }
    assert blocks[0] == original[0] and blocks[1] == original[1] and blocks[3] == original[3]
    assert written["messages"][2] == sent["messages"][2]  # marks and results as sent
    assert sent == body()  # the client's body is not mutated
    again = read_view(written, "anthropic").messages[1]
    assert again.tool_calls[0].parsed_arguments() == json.loads(reduced)


def test_unchanged_turns_and_unusable_arguments_keep_the_blocks_as_sent() -> None:
    sent = body()
    view = read_view(sent, "anthropic")
    assert write_view(view, view.system, list(view.messages), None) == sent
    out = list(view.messages)
    out[1] = with_arguments(out[1], "toolu_1", "not json")
    written = write_view(view, view.system, out, None)
    # Not a JSON object: a `tool_use` input cannot carry it, so the turn stays as sent.
    assert written["messages"][1]["content"] == copy.deepcopy(sent["messages"][1]["content"])


def test_a_call_that_changed_more_than_its_arguments_is_written_anew() -> None:
    view = read_view(body(), "anthropic")
    out = list(view.messages)
    calls = (ToolCall(id="toolu_9", name="Read", arguments='{"path": "m.py"}'),)
    out[1] = Message(role="assistant", content="Reading.", tool_calls=calls)
    written = write_view(view, view.system, out, None)
    blocks = written["messages"][1]["content"]
    assert [b.get("id") for b in blocks if b.get("type") == "tool_use"] == ["toolu_9"]

"""The one wire layer: strict reading for servers, lenient reading for diagnostics."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from cachepilot.messages import Message, ReasoningPart, ToolCall
from cachepilot.wire import (
    WireError,
    parse_body,
    parse_response,
    read_anthropic,
    read_chat,
    read_responses,
    responses_items,
)

ODD_CHAT: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "be brief"},
        "not a message",
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "reasoning": "thinking",
            "tool_calls": [{"function": {"name": "ls", "arguments": {"path": "."}}}],
        },
        {"role": "function", "name": "ls", "content": "a.txt"},
        {"role": "critic", "content": "?"},
    ],
}


def test_strict_chat_refuses_what_the_api_refuses() -> None:
    with pytest.raises(WireError):
        read_chat(ODD_CHAT)


def test_lenient_chat_reads_what_a_real_endpoint_took() -> None:
    system, messages, tools = read_chat(ODD_CHAT, strict=False)
    assert system == "be brief"
    assert tools == ()
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user"]
    assistant = messages[1]
    assert assistant.tool_calls == (ToolCall("call_0", "ls", '{"path":"."}'),)
    assert isinstance(assistant.content, tuple)
    assert isinstance(assistant.content[0], ReasoningPart)
    assert messages[2].tool_call_id == "ls"
    assert messages[2].name == "ls"
    assert '"critic"' in str(messages[3].content)


def test_parse_body_falls_back_to_lenient_reading() -> None:
    parsed = parse_body(ODD_CHAT)
    assert parsed.api == "chat"
    assert [m.role for m in parsed.request.messages] == ["user", "assistant", "tool", "user"]


def test_strict_and_lenient_agree_on_valid_bodies() -> None:
    body = {
        "instructions": "sys",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        ],
        "tools": [{"type": "function", "name": "ls"}],
    }
    assert read_responses(body) == read_responses(body, strict=False)
    system, messages, _ = read_responses(body)
    assert system == "sys"
    assert messages[2] == Message("tool", "a.txt", tool_call_id="c1", name="ls")


def test_lenient_responses_items_keep_odd_items() -> None:
    items = ["plain", {"role": "critic", "content": "x"}, 7, {"type": "function_call_output"}]
    with pytest.raises(WireError):
        responses_items(items)
    read = responses_items(items, strict=False)
    assert [m.role for m in read] == ["user", "user", "tool"]
    assert read[2].tool_call_id == "unknown"


def test_anthropic_breakpoints_and_tool_results() -> None:
    body = {
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "a.txt",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ],
    }
    system, messages, breakpoints = read_anthropic(body)
    assert system == "sys"
    assert messages[-1] == Message("tool", "a.txt", tool_call_id="t1", name="ls")
    assert breakpoints == [-1, 2]
    with pytest.raises(WireError):
        read_anthropic({"system": "x"})


def test_parse_response_reads_streams_of_each_api() -> None:
    chat = 'data: {"id":"c","usage":{"prompt_tokens":10,"completion_tokens":2}}\n\ndata: [DONE]\n'
    info = parse_response(chat, "chat")
    assert info.response_id == "c"
    assert info.usage is not None
    assert info.usage.input_tokens == 10


def test_the_wire_layer_imports_no_measurement_code() -> None:
    root = Path(__file__).parents[2] / "packages/core/src/cachepilot/wire"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("cachepilot_bench", "cachepilot.audit")), (
                    path.name,
                    node.module,
                )

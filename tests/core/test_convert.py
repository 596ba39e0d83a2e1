"""Provider message lists to cachepilot messages and back (`cachepilot.convert`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cachepilot import (
    CachePilot,
    Config,
    InMemoryArtifactStore,
    Message,
    from_anthropic,
    from_openai_chat,
    from_responses,
    to_anthropic,
    to_messages,
    to_openai_chat,
    to_responses,
)
from cachepilot.convert import detect_format
from cachepilot.messages import ReasoningPart, TextPart, ToolCall, pairing_issues

SYSTEM = "You are a coder."
ARGS = {"path": "src/app.py"}

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Fix the bug."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "src/app.py"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "def f(): pass"},
    {"role": "tool", "tool_call_id": "c2", "content": "1 failed"},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
]

RESPONSES: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the bug."},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "read",
        "arguments": '{"path": "src/app.py"}',
    },
    {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": '{"cmd": "pytest"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "def f(): pass"},
    {"type": "function_call_output", "call_id": "c2", "output": "1 failed"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    {"role": "user", "content": [{"type": "input_text", "text": "Thanks."}]},
]

ANTHROPIC: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the bug."},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "c1", "name": "read", "input": ARGS},
            {"type": "tool_use", "id": "c2", "name": "bash", "input": {"cmd": "pytest"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "def f(): pass"},
            {
                "type": "tool_result",
                "tool_use_id": "c2",
                "content": [{"type": "text", "text": "1 failed"}],
                "cache_control": {"type": "ephemeral"},
            },
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
]

EXPECTED = [
    Message(role="user", content="Fix the bug."),
    Message(
        role="assistant",
        content="",
        tool_calls=(
            ToolCall("c1", "read", '{"path": "src/app.py"}'),
            ToolCall("c2", "bash", '{"cmd": "pytest"}'),
        ),
    ),
    Message(role="tool", content="def f(): pass", tool_call_id="c1", name="read"),
    Message(role="tool", content="1 failed", tool_call_id="c2", name="bash"),
    Message(role="assistant", content="Done."),
    Message(role="user", content="Thanks."),
]


def test_the_same_conversation_in_three_formats_gives_the_same_messages() -> None:
    assert from_openai_chat(CHAT) == (SYSTEM, EXPECTED)
    assert from_responses(RESPONSES, instructions=SYSTEM) == (SYSTEM, EXPECTED)
    assert from_anthropic(ANTHROPIC, system=[{"type": "text", "text": SYSTEM}]) == (
        SYSTEM,
        EXPECTED,
    )
    assert pairing_issues(EXPECTED) == []


def test_format_detection() -> None:
    assert detect_format(CHAT) == "openai-chat"
    assert detect_format(RESPONSES) == "responses"
    assert detect_format(ANTHROPIC) == "anthropic"
    assert detect_format(EXPECTED) == "cachepilot"
    assert detect_format([{"role": "user", "content": "hi"}]) == "openai-chat"
    assert to_messages(CHAT) == (SYSTEM, EXPECTED)
    assert to_messages(RESPONSES, system=SYSTEM) == (SYSTEM, EXPECTED)
    assert to_messages(ANTHROPIC, system=SYSTEM) == (SYSTEM, EXPECTED)
    assert to_messages([Message(role="system", content=SYSTEM), *EXPECTED]) == (SYSTEM, EXPECTED)
    assert to_messages("hello") == (None, [Message(role="user", content="hello")])


def test_back_to_the_wire() -> None:
    chat = to_openai_chat(SYSTEM, EXPECTED)
    assert chat[0] == {"role": "system", "content": SYSTEM}
    assert chat[2]["tool_calls"][1]["function"] == {
        "name": "bash",
        "arguments": '{"cmd": "pytest"}',
    }
    assert from_openai_chat(chat) == (SYSTEM, EXPECTED)
    assert from_responses(to_responses(EXPECTED), instructions=SYSTEM) == (SYSTEM, EXPECTED)
    anthropic = to_anthropic(SYSTEM, EXPECTED)
    assert anthropic["system"] == SYSTEM
    # parallel results share one user turn, as the Messages API requires
    assert [b["type"] for b in anthropic["messages"][2]["content"]] == ["tool_result"] * 2
    assert from_anthropic(anthropic["messages"], system=anthropic["system"]) == (SYSTEM, EXPECTED)


def test_reasoning_images_and_mixed_user_turns() -> None:
    system, messages = from_anthropic(
        [
            {"role": "user", "content": "Look."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "tool_use", "id": "c1", "name": "shot", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAA="},
                    },
                    {"type": "text", "text": "and this"},
                ],
            },
        ]
    )
    assert system is None
    assert messages[1].parts == (ReasoningPart("hmm", "sig"),)
    assert messages[2] == Message(role="tool", content="", tool_call_id="c1", name="shot")
    assert messages[3].role == "user" and messages[3].parts[1] == TextPart("and this")
    assert messages[3].parts[0].url == "data:image/png;base64,AAA="  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: from_openai_chat([{"role": "robot", "content": "x"}]), "role"),
        (lambda: from_openai_chat({"role": "user"}), "must be a list"),  # type: ignore[arg-type]
        (lambda: from_anthropic([{"role": "system", "content": "x"}]), "role"),
        (
            lambda: from_anthropic([{"role": "user", "content": [{"type": "tool_result"}]}]),
            "tool_use_id",
        ),
        (lambda: from_anthropic([{"role": "user", "content": [3]}]), r"content\[0\]"),
        (lambda: from_responses([{"type": "function_call", "call_id": 7}]), "call_id"),
        (lambda: to_messages([Message(role="user", content="x"), {"role": "user"}]), "mixes"),
        (lambda: to_messages(CHAT, format="yaml"), "unknown format"),  # type: ignore[arg-type]
    ],
)
def test_malformed_input_is_a_clear_value_error(call: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_converted_dicts_go_through_prepare_and_plain_dicts_are_refused() -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    system, transcript = to_messages(CHAT)
    out_system, view, tools = pilot.prepare(system, transcript, thread="t")
    assert view[-1].text == "Thanks." and out_system is not None
    assert [t["function"]["name"] for t in tools] == ["recall"]
    again = pilot.prepare(*to_messages(ANTHROPIC, system=SYSTEM), thread="t2")
    assert json.dumps(to_openai_chat(again[0], again[1])) == json.dumps(
        to_openai_chat(out_system, view)
    )
    with pytest.raises(ValueError, match="to_messages"):
        pilot.prepare(SYSTEM, CHAT[1:], thread="t3")  # type: ignore[arg-type]

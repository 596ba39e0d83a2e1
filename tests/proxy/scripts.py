"""Scripted sessions the proxy tests replay (small bodies: every test stays fast)."""

from __future__ import annotations

import json

from cachepilot.messages import Message, ToolCall
from cachepilot.refs import make_ref
from cachepilot_bench.replay import ReplayScript, ReplayTurn

BIG = "\n".join(f"{i:05d} compiling module_{i % 97} ... ok" for i in range(3000))
"""A noisy build log (~100k characters): reduced at ingestion, its original archived."""
BIG_REF = make_ref(BIG)
SYSTEM = "You are a careful build assistant. Answer briefly."
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
ANTHROPIC_BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": BASH["function"]["parameters"],
}
FLAT_BASH = {"type": "function", **BASH["function"]}
CALL = ToolCall("call_build", "bash", json.dumps({"command": "make"}))
FINAL = "The build is fine: 3000 modules compiled."


def recall_call(call_id: str = "call_recall", lines: str = "1-3") -> ToolCall:
    return ToolCall(call_id, "recall", json.dumps({"ref": BIG_REF, "lines": lines}))


def plain_script() -> ReplayScript:
    """Turn 0 calls bash; turn 1 answers; turn 2 answers the follow-up."""
    return ReplayScript(
        [
            ReplayTurn(Message("assistant", "Running the build.", tool_calls=(CALL,))),
            ReplayTurn(Message("assistant", FINAL)),
            ReplayTurn(Message("assistant", "You are welcome.")),
        ]
    )


def recall_script(*, mixed: bool = False) -> ReplayScript:
    """After the build log: a recall (alone, or next to a second bash call), then answers."""
    second = ToolCall("call_again", "bash", json.dumps({"command": "make test"}))
    calls = (recall_call(), second) if mixed else (recall_call(),)
    return ReplayScript(
        [
            ReplayTurn(Message("assistant", "Let me read the log head.", tool_calls=calls)),
            ReplayTurn(Message("assistant", FINAL)),
            ReplayTurn(Message("assistant", "You are welcome.")),
        ]
    )

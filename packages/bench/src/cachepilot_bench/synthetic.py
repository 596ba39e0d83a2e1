"""Synthetic sessions for what the recorded traces rarely show.

`large_write_session` is a coding session whose largest items are tool-call *arguments*: the
agent writes whole modules (`write(file_path, content)` with ~100 KB of content each), then
runs tests against each one. The public traces cut or avoid such writes (their largest
argument is ~22 KB), so this is the workload that measures argument reduction. Everything is
generated deterministically (no clock, no randomness).
"""

from __future__ import annotations

import json

from cachepilot.messages import Message, ToolCall
from cachepilot_bench.traces.session import Session

__all__ = ["WRITE_TOOLS", "large_write_session", "module_source"]

WRITE_TOOLS: list[dict[str, object]] = [
    {
        "type": "function",
        "function": {
            "name": "write",
            "description": "Write a file (creates or replaces it).",
            "parameters": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["file_path", "content"],
            },
        },
    },
    {
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
    },
]


def module_source(index: int, chars: int) -> str:
    """A deterministic Python module of about `chars` characters (whole lines)."""
    lines = [f'"""Module {index}: generated handlers."""', "", "from __future__ import annotations"]
    size = sum(len(line) + 1 for line in lines)
    n = 0
    while size < chars:
        factor = (index * 7919 + n * 104_729) % 9973
        block = [
            "",
            "",
            f"def handler_{index}_{n}(value: int, scale: int = {factor % 97 + 1}) -> int:",
            f'    """Handle case {n} of module {index}."""',
            f"    if value < {factor % 50}:",
            f"        return value * scale + {factor}",
            f"    return (value - {factor % 13}) // scale",
        ]
        for line in block:
            lines.append(line)
            size += len(line) + 1
        n += 1
    return "\n".join(lines) + "\n"


def _test_log(module: int, run: int) -> str:
    lines = [f"============ test session starts: tests/test_mod_{module}.py run {run} ============"]
    for case in range(40):
        status = "PASSED" if (case + run) % 11 else "FAILED"
        lines.append(f"tests/test_mod_{module}.py::test_handler_{module}_{case} {status}")
    failed = sum(1 for case in range(40) if not (case + run) % 11)
    lines.append(f"============ {40 - failed} passed, {failed} failed ============")
    return "\n".join(lines)


def large_write_session(*, writes: int = 5, chars: int = 100_000, runs: int = 6) -> Session:
    """A session that writes `writes` modules of `chars` characters and runs tests after each.

    Every write is one model call whose arguments carry the whole module; `runs` test runs
    (each its own model call, a 40-line log) follow each write. Model calls:
    `writes * (runs + 1) + 1`.
    """
    if writes < 1 or runs < 0 or chars < 1_000:
        raise ValueError("need writes >= 1, runs >= 0 and chars >= 1000")
    messages: list[Message] = [
        Message("system", "You are a coding agent. Write code with the write tool; test it."),
        Message("user", f"Create the {writes} handler modules under src/ and make tests pass."),
    ]
    for module in range(writes):
        path = f"src/mod_{module}.py"
        content = module_source(module, chars)
        call = ToolCall(f"w{module}", "write", json.dumps({"file_path": path, "content": content}))
        messages.append(Message("assistant", f"Writing {path}.", tool_calls=(call,)))
        messages.append(
            Message(
                "tool",
                f"Wrote {len(content):,} bytes to {path}.",
                tool_call_id=call.id,
                name="write",
            )
        )
        for run in range(runs):
            command = f"pytest -q tests/test_mod_{module}.py --run {run}"
            test = ToolCall(f"b{module}_{run}", "bash", json.dumps({"command": command}))
            messages.append(Message("assistant", f"Running the tests ({run}).", tool_calls=(test,)))
            messages.append(
                Message("tool", _test_log(module, run), tool_call_id=test.id, name="bash")
            )
    messages.append(Message("assistant", "All modules are written and tested."))
    return Session(
        id="synthetic:large-writes",
        source="synthetic",
        messages=messages,
        tools=[dict(t) for t in WRITE_TOOLS],
    )

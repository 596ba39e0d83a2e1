"""Through the proxy, a stub of an old tool result keeps the host's pointer line (DESIGN §2.7).

Claude Code caps a large Bash output itself and sends a preview whose first line names the file
it saved the full output in. When the proxy's maintenance (pruning, an opt-in) later replaces
that old result by a stub, the stub keeps the line next to its ref: a model that follows Claude
Code's prompt still reads the file with the client's own tools.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any

import httpx

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig, is_stub
from cachepilot.proxy import ProxyConfig, ProxyEngine
from cachepilot.state.base import MemoryStateStore

SYSTEM = "You are a coding agent. Large outputs are saved to files; read them when needed."
TOOL = {
    "type": "function",
    "function": {
        "name": "Bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005}
REF = re.compile(r'recall\(ref="[0-9a-f]{12}"\)')


def _saved(call: str) -> str:
    return (
        "Output too large (212.4KB). Full output saved to: "
        f"/home/dev/.claude/projects/app/tool-results/{call}.txt"
    )


def _preview(call: str) -> str:
    lines = "\n".join(
        f"{hashlib.sha256(f'{call}{i}'.encode()).hexdigest()[:40]} built" for i in range(40)
    )
    return (
        f"<persisted-output>\n{_saved(call)}\n\nPreview (first 2KB):\n{lines}\n</persisted-output>"
    )


class Upstream:
    """Answers every request with the same completion and records the bodies it got."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        reply = {"id": "r", "object": "chat.completion", "created": 0, "model": "m",
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": "ok"}}],
                 "usage": USAGE}  # fmt: skip
        return httpx.Response(200, json=reply)


def _bodies(calls: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Fix the failing build."},
    ]
    out = []
    for n in range(calls):
        out.append({"model": "m", "tools": [TOOL], "messages": list(messages)})
        call = f"toolu_{n:02d}"
        arguments = json.dumps({"command": f"make t{n}"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "Bash", "arguments": arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call, "content": _preview(call)})
    return out


def test_a_pruned_result_keeps_claude_codes_saved_output_line() -> None:
    maintenance = MaintenanceConfig(
        prune=True,
        schedule="fixed",
        every=1,
        protect_tool_tokens=0,
        protect_results=1,
        min_prune_tokens=1,
        fold=False,
    )
    upstream = Upstream()

    async def go() -> None:
        config = ProxyConfig(upstream="http://upstream.invalid", provider="anthropic")
        pilot = CachePilot(
            Config(provider="anthropic", maintenance=maintenance), store=InMemoryArtifactStore()
        )
        engine = ProxyEngine(
            config,
            pilot=pilot,
            state_store=MemoryStateStore(),
            transport=httpx.MockTransport(upstream),
        )
        headers = {"x-cachepilot-thread": "cc", "authorization": "Bearer sk-test"}
        for body in _bodies(6):
            answer = await engine.handle(
                "POST", "/v1/chat/completions", "", headers, json.dumps(body).encode()
            )
            assert answer.status == 200, answer.body
        await engine.aclose()

    asyncio.run(go())
    last = upstream.bodies[-1]["messages"]
    results = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    stubs = {call: text for call, text in results.items() if is_stub(text)}
    assert stubs, "pruning acted through the proxy"
    for call, text in stubs.items():
        stub, *pointer = text.split("\n")
        assert REF.search(stub)
        assert pointer == [_saved(call)]  # Claude Code's own line, verbatim

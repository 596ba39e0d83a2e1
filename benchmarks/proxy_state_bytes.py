"""Bytes the proxy writes to its state store per thread over a session.

Runs one proxy engine (in process, a mock upstream) through a coding session of N requests
with large tool outputs on a real store (`--store`: an SQLite path, a postgresql:// or a
redis:// URL; default a temporary SQLite file) and counts, for the session's thread, the
bytes of every saved document: the saves made before a request is sent (they carry what is
needed to prepare a resend again) and the saves after its answer.

    uv run python benchmarks/proxy_state_bytes.py --calls 30
    uv run python benchmarks/proxy_state_bytes.py --store "$CACHEPILOT_TEST_POSTGRES_URL"
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx

from cachepilot.proxy import ProxyConfig, ProxyEngine
from cachepilot.proxy.stores import open_stores

HEADERS = {"authorization": "Bearer sk-bench", "x-cachepilot-thread": "bench-session"}
PARAMETERS = {"type": "object", "properties": {"command": {"type": "string"}}}
FUNCTION = {"name": "bash", "description": "Run a command.", "parameters": PARAMETERS}
TOOL = {"type": "function", "function": FUNCTION}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010}


def session(calls: int) -> list[dict[str, Any]]:
    """Chat Completions bodies of a growing session (120-line tool outputs)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Fix the failing build."},
    ]
    bodies = []
    for n in range(calls):
        bodies.append({"model": "m", "tools": [TOOL], "messages": list(messages)})
        call = f"c{n}"
        arguments = json.dumps({"command": f"make t{n}"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "bash",
                                                          "arguments": arguments}}]})  # fmt: skip
        lines = [hashlib.sha256(f"{n}/{i}".encode()).hexdigest() for i in range(120)]
        out = "\n".join(f"src/m_{n}_{i}.c:{i}: warning: {d}" for i, d in enumerate(lines))
        messages.append({"role": "tool", "tool_call_id": call, "content": out})
    return bodies


async def _reply(request: httpx.Request) -> httpx.Response:
    message = {"role": "assistant", "content": "ok"}
    return httpx.Response(200, json={"id": "r", "object": "chat.completion", "created": 0,
                                     "model": "m", "usage": USAGE, "choices": [
                                         {"index": 0, "finish_reason": "stop",
                                          "message": message}]})  # fmt: skip


async def measure(store: str, calls: int) -> dict[str, Any]:
    """Run the session; the bytes of the thread's saved documents."""
    config = ProxyConfig(upstream="http://upstream.invalid", provider="anthropic", store=store)
    _, states = open_stores(store)
    prepared: list[int] = []
    answered: list[int] = []
    save_if = states.save_if  # type: ignore[attr-defined]

    async def counting(thread: str, state: str, expected: int) -> int | None:
        if thread.endswith("/bench-session"):
            size = len(state.encode())
            marked = '"unanswered"' in state
            (prepared if marked else answered).append(size)
        result: int | None = await save_if(thread, state, expected)
        return result

    states.save_if = counting  # type: ignore[attr-defined]
    engine = ProxyEngine(config, state_store=states, transport=httpx.MockTransport(_reply))
    try:
        for body in session(calls):
            answer = await engine.handle(
                "POST", "/v1/chat/completions", "", HEADERS, json.dumps(body).encode()
            )
            if answer.status != 200:
                raise RuntimeError(f"request answered {answer.status}")
    finally:
        await engine.aclose()
    return {
        "calls": calls,
        "prepared_saves": len(prepared),
        "prepared_bytes": sum(prepared),
        "answered_saves": len(answered),
        "answered_bytes": sum(answered),
        "last_prepared": prepared[-1] if prepared else 0,
        "last_answered": answered[-1] if answered else 0,
        "ratio_last": round(prepared[-1] / answered[-1], 3) if prepared and answered else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="SQLite path or postgresql:// / redis:// URL")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = args.store or str(Path(folder) / "proxy.sqlite")
        print(json.dumps(asyncio.run(measure(store, args.calls)), indent=2))


if __name__ == "__main__":
    main()

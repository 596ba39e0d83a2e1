"""The proxy's request path is a foreground stretch (`cachepilot.support.foreground`): what
the pilot computes ahead steps aside while a request is read, prepared and its answer
recorded, and goes on while the upstream answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from cachepilot.proxy import ProxyConfig, ProxyEngine
from cachepilot.support.foreground import requests_in_foreground

REPLY = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
    ],
    "usage": {"prompt_tokens": 2_000, "completion_tokens": 3, "total_tokens": 2_003},
}


def _body(stream: bool) -> bytes:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the build."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "make"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "error: x\n" * 400},
    ]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    body = {"model": "m", "stream": stream, "messages": messages, "tools": tools}
    return json.dumps(body).encode()


def _stream_reply() -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"},
                          "finish_reason": "stop"}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


def test_preparing_is_foreground_and_the_upstream_wait_is_not(tmp_path: Path) -> None:
    during_upstream: list[int] = []
    during_prepare: list[int] = []
    during_save: list[int] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        during_upstream.append(requests_in_foreground())
        if json.loads(request.content).get("stream"):
            return httpx.Response(
                200, content=_stream_reply(), headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(200, json=REPLY)

    config = ProxyConfig(upstream="http://upstream.invalid", store=tmp_path / "proxy.sqlite")
    engine = ProxyEngine(config, transport=httpx.MockTransport(upstream))
    prepare = engine.pipeline.prepare
    save = engine.threads.save

    def counted_prepare(*args: Any, **kwargs: Any) -> Any:
        during_prepare.append(requests_in_foreground())
        return prepare(*args, **kwargs)

    async def counted_save(*args: Any, **kwargs: Any) -> Any:
        during_save.append(requests_in_foreground())
        return await save(*args, **kwargs)

    engine.pipeline.prepare = counted_prepare  # type: ignore[method-assign]
    engine.threads.save = counted_save  # type: ignore[method-assign]
    headers = {"content-type": "application/json", "x-cachepilot-thread": "t"}

    async def run() -> list[int]:
        codes = []
        for stream in (False, True):
            answer = await engine.handle("POST", "/v1/chat/completions", "", headers, _body(stream))
            if answer.stream is not None:
                async for _ in answer.stream:
                    pass
            codes.append(answer.status)
        await engine.aclose()
        return codes

    assert asyncio.run(run()) == [200, 200]
    assert during_prepare == [1, 1]
    assert during_upstream == [0, 0]
    # The answer's record is saved in the foreground, the whole reply's and the stream's.
    assert during_save == [1, 1]
    assert requests_in_foreground() == 0


def test_reading_an_upstream_error_to_a_stream_request_is_not_foreground(tmp_path: Path) -> None:
    """A stream request the upstream refuses (a 429, its body sent slowly): the request
    waits for the upstream while it reads that body, and what is computed ahead goes on."""
    during_body: list[int] = []

    async def slow_error() -> AsyncIterator[bytes]:
        during_body.append(requests_in_foreground())
        await asyncio.sleep(0)
        yield b'{"error": {"message": "slow down", "type": "rate_limit"}}'

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429, content=slow_error(), headers={"content-type": "application/json"}
        )

    config = ProxyConfig(upstream="http://upstream.invalid", store=tmp_path / "proxy.sqlite")
    engine = ProxyEngine(config, transport=httpx.MockTransport(upstream))
    headers = {"content-type": "application/json", "x-cachepilot-thread": "t"}

    async def run() -> int:
        answer = await engine.handle("POST", "/v1/chat/completions", "", headers, _body(True))
        await engine.aclose()
        return answer.status

    assert asyncio.run(run()) == 429
    assert during_body == [0]
    assert requests_in_foreground() == 0

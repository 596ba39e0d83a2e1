"""Bad input and failures: malformed bodies, upstream errors, timeouts, unreachable
upstreams and clients that disconnect mid-stream."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from proxy_helpers import running_proxy
from scripts import BASH, BIG, CALL, SYSTEM, plain_script
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cachepilot_bench.replay import ReplayProvider


def chat_body(*, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": stream,
        "tools": [BASH],
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Build the project."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": CALL.id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": CALL.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": CALL.id, "content": BIG},
        ],
    }


def test_malformed_body_gets_the_upstreams_error() -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        bad_json = httpx.post(f"{proxy.base_url}/chat/completions", content=b"{not json")
        bad_role = httpx.post(
            f"{proxy.base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "wizard", "content": "hi"}]},
        )
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    assert bad_role.status_code == 400 and bad_role.json()["error"]["param"] == "messages[0].role"
    assert upstream.records == []


def test_upstream_errors_reach_the_client_unchanged() -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        body = {"model": "m", "input": "hi", "previous_response_id": "resp_unknown"}
        direct = httpx.post(f"{upstream.base_url}/responses", json=body)
        proxied = httpx.post(f"{proxy.base_url}/responses", json=body)
    assert proxied.status_code == direct.status_code == 400
    assert proxied.json() == direct.json()


def test_unreachable_upstream_is_a_clear_502() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with running_proxy(f"http://127.0.0.1:{port}/v1") as proxy:
        reply = httpx.post(f"{proxy.base_url}/chat/completions", json=chat_body())
        anthropic = httpx.post(
            f"{proxy.base_url}/messages",
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert reply.status_code == 502 and "upstream unreachable" in reply.json()["error"]["message"]
    assert anthropic.status_code == 502 and anthropic.json()["type"] == "error"


class SlowUpstream:
    """An upstream that answers JSON at once, but streams one event and then stalls (or, with
    `silent`, never answers at all)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.silent = False
        self.cancelled = threading.Event()

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.bodies.append(body)
        if self.silent:
            await asyncio.sleep(30)
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "done"},
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
                }
            )

        async def events() -> AsyncIterator[bytes]:
            first = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "wor"}}],
            }
            yield f"data: {json.dumps(first)}\n\n".encode()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise

        return StreamingResponse(events(), media_type="text/event-stream")


@contextmanager
def serving(app: Starlette) -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        server.force_exit = True
        thread.join(timeout=10)


def slow_app(upstream: SlowUpstream) -> Starlette:
    return Starlette(routes=[Route("/v1/chat/completions", upstream.chat, methods=["POST"])])


def test_upstream_timeout_is_a_clear_504() -> None:
    upstream = SlowUpstream()
    upstream.silent = True
    with serving(slow_app(upstream)) as url, running_proxy(url, timeout=0.5) as proxy:
        reply = httpx.post(f"{proxy.base_url}/chat/completions", json=chat_body(), timeout=20)
    assert reply.status_code == 504
    assert "timed out" in reply.json()["error"]["message"]


def test_client_disconnect_mid_stream_keeps_the_thread_consistent() -> None:
    upstream = SlowUpstream()
    with serving(slow_app(upstream)) as url, running_proxy(url) as proxy:
        with httpx.stream(
            "POST", f"{proxy.base_url}/chat/completions", json=chat_body(stream=True), timeout=20
        ) as response:
            first = next(response.iter_lines())
        assert first.startswith("data: ") and '"wor"' in first
        pilot = proxy.engine.pilot
        thread = proxy.engine.threads.names()[0]
        archived = len(pilot.store.list(thread))
        # The proxy stops reading the upstream once the client is gone.
        assert upstream.cancelled.wait(timeout=10)
        again = httpx.post(f"{proxy.base_url}/chat/completions", json=chat_body(), timeout=20)
        assert (
            again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == "done"
        )
        assert len(pilot.store.list(thread)) == archived > 0  # nothing archived twice
        views = dict(pilot.state(thread).views)
    tool = [m for m in upstream.bodies[0]["messages"] if m["role"] == "tool"]
    again_tool = [m for m in upstream.bodies[1]["messages"] if m["role"] == "tool"]
    assert tool == again_tool and len(tool[0]["content"]) < len(BIG)
    assert len(views) == 1

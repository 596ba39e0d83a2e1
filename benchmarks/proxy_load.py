"""The proxy under load: added latency against history size, throughput and memory under
concurrent sessions, on one and on two processes.

Everything runs on loopback: a fast upstream (its own process: canned replies for Chat
Completions, Responses and Anthropic Messages, streamed or not, no model), the proxy (the
real `cachepilot proxy` command, its own process or processes), and this process as the
client (httpx).

- latency: per wire format, streamed and not, and history size (30 / 100 / 300 KB), one
  session grows call by call (an assistant tool call and a ~2.5 KB tool result each) until it
  reaches the size; each of the last `--samples` calls is sent straight to the upstream and
  through the proxy, alternately, and the difference is the proxy's added latency (the whole
  reply read). p50 / p95 / p99 in milliseconds. `--upstream-ms` makes the upstream take that
  long to answer, as a model does (by default it answers at once, and the client sends its next
  request at once: nothing the proxy computes ahead can be ready by then).
- concurrency: 10 / 40 / 100 sessions at once, 15 calls each (Chat Completions), through one
  process and through two (`--workers 2`, sharing `--store`): requests per second, p50 / p95
  latency, and the proxy processes' resident memory at the end.

Run: uv run python benchmarks/proxy_load.py [--part latency|concurrency|all] [--samples 20]
     [--upstream-ms 0 1000] [--fold-ahead on|off|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

APIS = ("chat", "responses", "anthropic")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
SYSTEM = "You are a coding agent working in /srv/app. Answer briefly."
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}


# ---------------------------------------------------------------------------- the upstream


def upstream_app(delay_ms: float = 0.0) -> Any:
    """The fast upstream: one canned reply per format (usage fixed), after `delay_ms` (a
    model's time to answer; 0: at once)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from cachepilot.messages import Message
    from cachepilot.usage import Usage
    from cachepilot.wire import (
        anthropic_events,
        anthropic_message,
        anthropic_usage,
        chat_chunks,
        chat_completion,
        chat_usage,
        responses_events,
        responses_object,
        responses_usage,
    )
    from cachepilot.wire.sse import sse

    reply = Message("assistant", "Done: the build passes.")
    usage = Usage(input_tokens=20_000, cached_tokens=18_000, output_tokens=8)

    async def serve(request: Request) -> Response:
        body = json.loads(await request.body())
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        stream = body.get("stream") is True
        path = request.url.path
        if path.endswith("/chat/completions"):
            wire = chat_usage(usage)
            if stream:
                chunks = chat_chunks(
                    reply, id="c1", model="m", created=0, usage=wire, include_usage=True
                )
                return Response(
                    sse(chunks, named=False, done=True), 200, media_type="text/event-stream"
                )
            payload = chat_completion(reply, id="c1", model="m", created=0, usage=wire)
        elif path.endswith("/messages"):
            wire = anthropic_usage(usage)
            if stream:
                events = anthropic_events(reply, id="msg_1", model="m", usage=wire)
                return Response(
                    sse(events, named=True, done=False), 200, media_type="text/event-stream"
                )
            payload = anthropic_message(reply, id="msg_1", model="m", usage=wire)
        else:
            wire = responses_usage(usage)
            if stream:
                events = responses_events(
                    reply, id="resp_1", model="m", created=0.0, usage=wire, body=body
                )
                return Response(
                    sse(events, named=True, done=False), 200, media_type="text/event-stream"
                )
            payload = responses_object(
                reply, id="resp_1", model="m", created=0.0, usage=wire, body=body
            )
        return Response(json.dumps(payload), 200, media_type="application/json")

    routes = [Route(p, serve, methods=["POST"]) for p in PATHS.values()]
    return Starlette(routes=routes)


# ---------------------------------------------------------------------------- sessions


def _output(session: str, n: int) -> str:
    digests = (hashlib.sha256(f"{session}{n}{i}".encode()).hexdigest()[:24] for i in range(50))
    return "\n".join(f"src/{session}/m{n}_{i}.py:{i}: {d} ok" for i, d in enumerate(digests))


def body(api: str, session: str, calls: int, stream: bool) -> dict[str, Any]:
    """The request of call `calls` of a session (`calls` tool exchanges so far)."""
    if api == "anthropic":
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"Fix {session}."}]
        for n in range(calls):
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"toolu_{n}",
                            "name": "bash",
                            "input": {"command": f"make {n}"},
                        }
                    ],
                }
            )
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"toolu_{n}",
                            "content": _output(session, n),
                        }
                    ],
                }
            )
        return {
            "model": "m",
            "max_tokens": 256,
            "system": SYSTEM,
            "stream": stream,
            "tools": [{"name": "bash", "input_schema": SCHEMA}],
            "messages": messages,
        }
    if api == "responses":
        items: list[dict[str, Any]] = [{"role": "user", "content": f"Fix {session}."}]
        for n in range(calls):
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"call_{n}",
                    "name": "bash",
                    "arguments": json.dumps({"command": f"make {n}"}),
                }
            )
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": f"call_{n}",
                    "output": _output(session, n),
                }
            )
        return {
            "model": "m",
            "instructions": SYSTEM,
            "stream": stream,
            "input": items,
            "tools": [{"type": "function", "name": "bash", "parameters": SCHEMA}],
        }
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Fix {session}."},
    ]
    for n in range(calls):
        chat.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"make {n}"}),
                        },
                    }
                ],
            }
        )
        chat.append({"role": "tool", "tool_call_id": f"call_{n}", "content": _output(session, n)})
    out: dict[str, Any] = {
        "model": "m",
        "stream": stream,
        "messages": chat,
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}],
    }
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


# ---------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(url, timeout=1)
            return
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({process.returncode})")
        time.sleep(0.05)
    raise RuntimeError(f"{url}: the server did not start")


@contextlib.contextmanager
def upstream_process(delay_ms: float = 0.0) -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream", str(port), "--upstream-ms", str(delay_ms)]
    )
    try:
        _wait(f"http://127.0.0.1:{port}/", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def proxy_process(
    upstream: str, workers: int, store: Path, *, ahead: bool = True
) -> Iterator[tuple[str, int]]:
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "cachepilot.cli",
        "proxy",
        "--upstream",
        upstream,
        "--port",
        str(port),
        "--store",
        str(store),
        "--workers",
        str(workers),
        "--provider",
        "anthropic",
        *([] if ahead else ["--no-fold-ahead"]),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        _wait(f"http://127.0.0.1:{port}/healthz", process)
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (Linux /proc), MiB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
            todo.extend(int(c) for c in children)
    return total / 1024


# ---------------------------------------------------------------------------- measurements


def _send(client: httpx.Client, url: str, payload: bytes, headers: dict[str, str]) -> float:
    start = time.perf_counter()
    with client.stream("POST", url, content=payload, headers=headers) as reply:
        for _ in reply.iter_bytes():
            pass
        if reply.status_code != 200:
            raise RuntimeError(f"{url}: {reply.status_code}")
    return time.perf_counter() - start


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(
    samples: int,
    sizes: list[int],
    *,
    apis: tuple[str, ...] = APIS,
    ahead: bool = True,
    upstream_ms: float = 0.0,
) -> list[dict[str, Any]]:
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        upstream_process(upstream_ms) as upstream,
        proxy_process(upstream, 1, Path(tmp) / "proxy.sqlite", ahead=ahead) as (proxy, _),
    ):
        headers = {
            "content-type": "application/json",
            "authorization": "Bearer sk-load",
            "x-api-key": "sk-load",
            "anthropic-version": "2023-06-01",
        }
        with httpx.Client(timeout=120) as client:
            for api in apis:
                for stream in (False, True):
                    for size in sizes:
                        session = f"{api}-{stream}-{size}"
                        added: list[float] = []
                        n = 0
                        while True:
                            payload = json.dumps(body(api, session, n, stream)).encode()
                            measured = len(payload) >= size - samples * 2_600
                            through = _send(
                                client,
                                proxy + PATHS[api],
                                payload,
                                {**headers, "x-cachepilot-thread": session},
                            )
                            if measured:
                                direct = _send(client, upstream + PATHS[api], payload, headers)
                                added.append(1000 * (through - direct))
                            n += 1
                            if len(payload) >= size:
                                break
                        rows.append(
                            {
                                "api": api,
                                "fold_ahead": ahead,
                                "upstream_ms": upstream_ms,
                                "stream": stream,
                                "kb": len(payload) // 1000,
                                "calls": n,
                                "p50": _pct(added, 0.5),
                                "p95": _pct(added, 0.95),
                                "p99": _pct(added, 0.99),
                                "max": max(added),
                            }
                        )
                        print(json.dumps(rows[-1]), flush=True)
    return rows


async def _session(client: httpx.AsyncClient, url: str, name: str, calls: int) -> list[float]:
    times = []
    for n in range(calls):
        payload = json.dumps(body("chat", name, n, False)).encode()
        start = time.perf_counter()
        reply = await client.post(
            url,
            content=payload,
            headers={
                "content-type": "application/json",
                "authorization": "Bearer sk-load",
                "x-cachepilot-thread": name,
            },
        )
        if reply.status_code != 200:
            raise RuntimeError(f"{name}: {reply.status_code} {reply.text[:200]}")
        times.append(time.perf_counter() - start)
    return times


def concurrency(levels: list[int], calls: int) -> list[dict[str, Any]]:
    rows = []
    with upstream_process() as upstream:
        for workers in (1, 2):
            for level in levels:
                with (
                    tempfile.TemporaryDirectory() as tmp,
                    proxy_process(upstream, workers, Path(tmp) / "proxy.sqlite") as (proxy, pid),
                ):
                    url = proxy + PATHS["chat"]

                    async def run(url: str = url, level: int = level) -> list[list[float]]:
                        limits = httpx.Limits(max_connections=level)
                        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
                            return await asyncio.gather(
                                *(_session(client, url, f"s{i}", calls) for i in range(level))
                            )

                    start = time.perf_counter()
                    times = [t for session in asyncio.run(run()) for t in session]
                    wall = time.perf_counter() - start
                    rows.append(
                        {
                            "workers": workers,
                            "sessions": level,
                            "requests": len(times),
                            "rps": len(times) / wall,
                            "p50_ms": 1000 * _pct(times, 0.5),
                            "p95_ms": 1000 * _pct(times, 0.95),
                            "rss_mib": tree_rss_mib(pid),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["latency", "concurrency", "all"], default="all")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30_000, 100_000, 300_000])
    parser.add_argument("--levels", type=int, nargs="+", default=[10, 40, 100])
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--apis", nargs="+", choices=APIS, default=list(APIS))
    parser.add_argument(
        "--fold-ahead",
        choices=["on", "off", "both"],
        default="on",
        help="latency: the proxy computes folds ahead (its default), not, or both in turn",
    )
    parser.add_argument(
        "--upstream-ms",
        type=float,
        nargs="+",
        default=[0.0],
        help="latency: the upstream answers after this many ms (a model's time to answer; "
        "0: at once, so nothing computed ahead can be ready); several values run in turn",
    )
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream:
        import uvicorn

        uvicorn.run(
            upstream_app(args.upstream_ms[0]),
            host="127.0.0.1",
            port=args.serve_upstream,
            log_level="warning",
            access_log=False,
        )
        return 0
    result: dict[str, Any] = {"cpus": os.cpu_count()}
    if args.part in ("latency", "all"):
        modes = {"on": [True], "off": [False], "both": [False, True]}[args.fold_ahead]
        result["latency"] = [
            row
            for delay in args.upstream_ms
            for ahead in modes
            for row in latency(
                args.samples, args.sizes, apis=tuple(args.apis), ahead=ahead, upstream_ms=delay
            )
        ]
        print(
            f"\n{'format':<10} {'upstream':>8} {'ahead':<6} {'stream':<6} {'KB':>5} {'p50 ms':>7}"
            f" {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}"
        )
        for r in result["latency"]:
            print(
                f"{r['api']:<10} {r['upstream_ms']:>8g} {r['fold_ahead']!s:<6} {r['stream']!s:<6}"
                f" {r['kb']:>5} {r['p50']:>7.1f} {r['p95']:>7.1f} {r['p99']:>7.1f}"
                f" {r['max']:>7.1f}"
            )
    if args.part in ("concurrency", "all"):
        result["concurrency"] = concurrency(args.levels, args.calls)
        print(
            f"\n{'procs':>5} {'sessions':>8} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7}"
            f" {'RSS MiB':>8}"
        )
        for r in result["concurrency"]:
            print(
                f"{r['workers']:>5} {r['sessions']:>8} {r['rps']:>7.1f} {r['p50_ms']:>7.1f} "
                f"{r['p95_ms']:>7.1f} {r['rss_mib']:>8.1f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

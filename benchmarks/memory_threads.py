"""Resident memory against the number of threads one process has served.

Two drivers, each in a fresh process per run:

- `pilot`: one `CachePilot` driven as a framework plugin drives it (the state kept in an
  SQLite state store, `mark_persisted`, given back with `load_state` when the pilot no
  longer holds it); each thread makes one model call.
- `proxy`: one `ProxyEngine` (the real request path: body read, thread identification,
  reduction, prepare, the state saved to its `--store`) in front of an in-process upstream
  that answers every request with the same small completion (no network).

Workloads: `small` (one user message per thread) and `large` (a ~100 KB transcript: 25 tool
results of ~4 KB). RSS is read from /proc after each checkpoint; the run reports it, and the
growth between the first and the last checkpoint.

Run: uv run python benchmarks/memory_threads.py [--driver pilot|proxy] [--workload small|large]
     [--checkpoints 5000 10000 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

SYSTEM = "You are a coding agent. cwd: /home/dev/project."
TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


def rss_mib() -> float:
    """Resident set size of this process, MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def chat_messages(thread: int, workload: str) -> list[dict[str, Any]]:
    """One thread's Chat Completions history."""
    out: list[dict[str, Any]] = [{"role": "user", "content": f"Task {thread}: fix the build."}]
    if workload == "small":
        return out
    for turn in range(25):
        call = f"c{thread}-{turn}"
        args = json.dumps({"command": f"cat src/part_{turn}.py"})
        body = "\n".join(
            hashlib.sha256(f"{thread}/{turn}/{i}".encode()).hexdigest()[:60] for i in range(64)
        )
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "bash", "arguments": args},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": call, "content": body})  # fmt: skip
    return out


def drive_pilot(workload: str, checkpoints: list[int], folder: Path) -> list[tuple[int, float]]:
    from cachepilot import CachePilot, Config, SQLiteArtifactStore, to_messages
    from cachepilot.state.base import SQLiteStateStore

    pilot = CachePilot(
        Config(state_idle_seconds=0), store=SQLiteArtifactStore(folder / "artifacts.sqlite")
    )
    states = SQLiteStateStore(folder / "states.sqlite")
    out = []
    for n in range(max(checkpoints)):
        name = f"t{n}"
        pilot.mark_persisted(name)
        history = chat_messages(n, workload)
        for m in history:
            if m["role"] == "tool":
                m["content"] = pilot.ingest("bash", {}, m["content"], call_id=m["tool_call_id"],
                                            thread=name)  # fmt: skip
        system, messages = to_messages([{"role": "system", "content": SYSTEM}, *history])
        pilot.prepare(system, messages, [TOOL], thread=name, now=1_000.0 + n)
        states._save(name, pilot.state(name).model_dump_json())  # the store's sync path
        if n + 1 in checkpoints:
            gc.collect()
            out.append((n + 1, rss_mib()))
    return out


def drive_proxy(workload: str, checkpoints: list[int], folder: Path) -> list[tuple[int, float]]:
    import httpx

    from cachepilot.proxy import ProxyConfig, ProxyEngine

    reply = {
        "id": "r", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101},
    }  # fmt: skip
    payload = json.dumps(reply).encode()

    def upstream(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=payload, headers={"content-type": "application/json"})

    config = ProxyConfig(upstream="http://upstream.invalid", store=folder / "proxy.sqlite")
    engine = ProxyEngine(config, transport=httpx.MockTransport(upstream))

    async def run() -> list[tuple[int, float]]:
        out = []
        for n in range(max(checkpoints)):
            history = [{"role": "system", "content": SYSTEM}, *chat_messages(n, workload)]
            body = {"model": "m", "tools": [TOOL], "messages": history}
            headers = {"x-cachepilot-thread": f"t{n}", "authorization": "Bearer sk-bench"}
            answer = await engine.handle(
                "POST", "/v1/chat/completions", "", headers, json.dumps(body).encode()
            )
            if answer.status != 200:
                raise RuntimeError(f"request {n}: status {answer.status}")
            if n + 1 in checkpoints:
                gc.collect()
                out.append((n + 1, rss_mib()))
        await engine.aclose()
        return out

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", choices=["pilot", "proxy"], default="pilot")
    parser.add_argument("--workload", choices=["small", "large"], default="small")
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[5_000, 10_000, 20_000])
    args = parser.parse_args(argv)
    checkpoints = sorted(set(args.checkpoints))
    with tempfile.TemporaryDirectory() as folder:
        drive = drive_pilot if args.driver == "pilot" else drive_proxy
        points = drive(args.workload, checkpoints, Path(folder))
    print(f"driver {args.driver}, workload {args.workload}")
    print(f"{'threads':>8}  {'RSS MiB':>8}")
    for threads, rss in points:
        print(f"{threads:>8,}  {rss:>8.1f}")
    first, last = points[0][1], points[-1][1]
    print(
        f"growth {points[0][0]:,} -> {points[-1][0]:,} threads: {100 * (last / first - 1):+.1f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

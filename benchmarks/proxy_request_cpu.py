"""The proxy's request path in one process, measured in CPU time as well as wall time.

`benchmarks/proxy_load.py` measures wall time through real processes; on a machine whose
cores other work shares, its figures move with the load. This script runs the proxy engine
in process (an SQLite store, an in-process upstream answering at once) over the same growing
Chat Completions session, and times each request two ways: the CPU time of the thread that
handles it (the event loop and the preparation, run on that thread here; what is computed
ahead runs on the pilot's background worker and is not counted), which other work on the
machine does not change, and its wall time (which includes waiting for a summary stage still
being computed ahead). It runs the session with fold summaries computed ahead
(`ProxyConfig.fold_ahead`) and on the request path only, in the same run, and reports p50 /
p95 / max per mode, over the last 20 calls and over the maintenance points alone.

Run: uv run python benchmarks/proxy_request_cpu.py [--size 300000] [--gap-ms 0 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_load import PATHS, _pct, body

from cachepilot.proxy import ProxyConfig, ProxyEngine

REPLY = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
    ],
    "usage": {"prompt_tokens": 20_000, "completion_tokens": 8, "total_tokens": 20_008},
}


async def _inline(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


async def session(size: int, *, ahead: bool, gap: float) -> list[dict[str, Any]]:
    """Every request of one session: CPU ms, wall ms, whether it appended an epoch."""
    with tempfile.TemporaryDirectory() as tmp:
        config = ProxyConfig(
            upstream="http://upstream.invalid",
            provider="anthropic",
            store=Path(tmp) / "proxy.sqlite",
            fold_ahead=ahead,
        )
        engine = ProxyEngine(
            config, transport=httpx.MockTransport(lambda _: httpx.Response(200, json=REPLY))
        )
        pilot = engine.pilot
        # The request's own work on this thread, so its CPU time is this thread's.
        original = asyncio.to_thread
        asyncio.to_thread = _inline
        rows = []
        try:
            n = 0
            while True:
                payload = json.dumps(body("chat", "s", n, False)).encode()
                headers = {"content-type": "application/json", "x-cachepilot-thread": "s"}
                cpu, wall = time.thread_time(), time.perf_counter()
                answer = await engine.handle("POST", PATHS["chat"], "", headers, payload)
                if answer.stream is not None:
                    async for _ in answer.stream:
                        pass
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                (thread,) = engine.threads.names()
                epochs = len(pilot.state(thread).plan.epochs)
                rows.append({"kb": len(payload) // 1000, "cpu": 1000 * cpu, "wall": 1000 * wall,
                             "epochs": epochs})  # fmt: skip
                n += 1
                if len(payload) >= size:
                    break
                await asyncio.sleep(gap)
            await engine.aclose()
        finally:
            asyncio.to_thread = original
    counts = [0, *(int(r["epochs"]) for r in rows)]
    for index, row in enumerate(rows):
        row["maintenance"] = counts[index + 1] > counts[index]
    return rows


def summary(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in rows]
    return {"p50": _pct(values, 0.5), "p95": _pct(values, 0.95), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=300_000)
    parser.add_argument("--gap-ms", type=float, nargs="+", default=[0.0, 200.0])
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=["off", "ahead"],
        default=["off", "ahead"],
        help="fold summaries on the request path only (off), computed ahead, or both in turn",
    )
    args = parser.parse_args(argv)
    out = []
    for gap in args.gap_ms:
        for ahead in (mode == "ahead" for mode in args.modes):
            rows = asyncio.run(session(args.size, ahead=ahead, gap=gap / 1000))
            late = [r for r in rows if r["kb"] >= args.size // 1000 - 52]  # the last ~20 calls
            points = [r for r in rows if r["maintenance"]]
            result = {
                "fold_ahead": ahead,
                "gap_ms": gap,
                "calls": len(rows),
                "maintenance_points": len(points),
                "last20_cpu": summary(late, "cpu"),
                "last20_wall": summary(late, "wall"),
                "maintenance_cpu": summary(points, "cpu") if points else None,
                "maintenance_wall": summary(points, "wall") if points else None,
                "all_wall_max": max(r["wall"] for r in rows),
            }
            out.append(result)
            print(json.dumps(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

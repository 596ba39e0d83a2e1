"""Per-call overhead of `CachePilot.prepare` and `ingest` against history length.

Each size runs a session that grows one step (assistant call + tool result) per call, as a
plugin drives it: `ingest` on the new result, then `prepare` on the whole history. The calls
timed are the last ones before the history reaches the size. The tokenizer is warmed first.
Reports median and p95 per call, in milliseconds.

Run: uv run python benchmarks/overhead.py [--sizes 10 100 200 1000 5000] [--samples 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot.facade import CachePilot
from cachepilot.tokens import get_counter

SYSTEM = "You are a coding agent. Today is 2026-03-17 14:05:09 UTC. cwd: /home/dev/project."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    },
]


def _output(n: int) -> str:
    return "\n".join(f"src/module_{n}.py:{i}: value_{i} = compute({i}, {n})" for i in range(40))


def _step(n: int) -> tuple[Message, Message, str]:
    call = ToolCall(f"call_{n}", "bash", json.dumps({"command": f"grep -rn value_{n} src"}))
    assistant = Message(role="assistant", content=f"Step {n}: searching.", tool_calls=(call,))
    return assistant, Message(role="tool", content="", tool_call_id=call.id, name="bash"), call.id


def measure(messages: int, samples: int) -> dict[str, float]:
    pilot = CachePilot(store=InMemoryArtifactStore())
    history: list[Message] = [Message(role="user", content="Fix the failing test.")]
    n = 0
    # Grow the history to the target size without timing it.
    timed = max(5, min(samples, messages // 2))
    while len(history) < messages - 2 * timed:
        assistant, _tool, call_id = _step(n)
        text = pilot.ingest("bash", {"command": f"grep -rn value_{n} src"}, _output(n), call_id)
        history += [
            assistant,
            Message(role="tool", content=text, tool_call_id=call_id, name="bash"),
        ]
        pilot.prepare(SYSTEM, history, TOOLS, now=float(n))
        n += 1
    prepare_ms: list[float] = []
    ingest_ms: list[float] = []
    for _ in range(timed):
        assistant, _tool, call_id = _step(n)
        started = time.perf_counter()
        text = pilot.ingest("bash", {"command": f"grep -rn value_{n} src"}, _output(n), call_id)
        ingest_ms.append((time.perf_counter() - started) * 1000)
        history += [
            assistant,
            Message(role="tool", content=text, tool_call_id=call_id, name="bash"),
        ]
        started = time.perf_counter()
        pilot.prepare(SYSTEM, history, TOOLS, now=float(n))
        prepare_ms.append((time.perf_counter() - started) * 1000)
        n += 1
    return {
        "prepare_p50": statistics.median(prepare_ms),
        "prepare_p95": statistics.quantiles(prepare_ms, n=20)[18],
        "ingest_p50": statistics.median(ingest_ms),
        "ingest_p95": statistics.quantiles(ingest_ms, n=20)[18],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 200, 1000, 5000])
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    get_counter().count("warm up the tokenizer")
    print(
        f"{'messages':>8} {'prepare p50':>12} {'prepare p95':>12} {'ingest p50':>11} "
        f"{'ingest p95':>11}   (ms per call)"
    )
    for size in args.sizes:
        r = measure(size, args.samples)
        print(
            f"{size:>8} {r['prepare_p50']:>12.3f} {r['prepare_p95']:>12.3f} "
            f"{r['ingest_p50']:>11.3f} {r['ingest_p95']:>11.3f}"
        )


if __name__ == "__main__":
    main()

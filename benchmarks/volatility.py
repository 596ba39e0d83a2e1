"""Cost of learned volatility: per-call canonicalization with a per-call session id, and the
diff of two large prompts, with learning on and off.

A system prompt of SIZE characters carries ``Session <id>`` near the top and a build number
near the bottom, both new on every call (the worst case for the diff: the differing region
spans the whole prompt). Reports the median per call in milliseconds.

Run: uv run python benchmarks/volatility.py [--sizes 10000 200000 400000] [--calls 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cachepilot.canonical import CanonicalConfig, Canonicalizer, CanonicalState
from cachepilot.canonical.volatility import learn
from cachepilot.messages import Message

TOOLS = [
    {
        "name": f"tool_{i}",
        "description": f"Tool {i}: run a step of the build and report what it printed. " * 8,
        "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}},
    }
    for i in range(20)
]


def prompt(size: int, call: int) -> str:
    rule = "Rule: keep the build green, read the logs first and prefer small patches.\n"
    body = rule * (size // len(rule))
    return f"Session 9f{call:02x}c2e41-77aa\n{body}Sandbox build r{20251 + call}x is ready.\n"


def per_call(size: int, calls: int, *, learn_volatile: bool) -> float:
    canon = Canonicalizer(CanonicalConfig(learn_volatile=learn_volatile))
    state = CanonicalState()
    messages = [Message(role="user", content="Fix the build.")]
    times = []
    for call in range(calls):
        system = prompt(size, call)
        start = time.perf_counter()
        canon.apply(system, messages, TOOLS, state)
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:]) * 1000


def diff_time(size: int, repeats: int) -> float:
    old, new = prompt(size, 0), prompt(size, 1)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        learn(old, new, "system", max_chars=10_000_000)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 200_000, 400_000])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    print(f"{'chars':>9} {'learn off ms':>13} {'learn on ms':>12} {'diff ms':>9}")
    for size in args.sizes:
        off = per_call(size, args.calls, learn_volatile=False)
        on = per_call(size, args.calls, learn_volatile=True)
        print(f"{size:>9} {off:>13.3f} {on:>12.3f} {diff_time(size, 10):>9.3f}")


if __name__ == "__main__":
    main()

"""Lower bounds on input cost: how far below vanilla can any history strategy go?

For every session, vanilla's input cost splits into (a) cache reads of the fixed prefix
(tools, system prompt, hidden provider prefix, task statement), (b) cache reads of the
history after it, (c) new tokens, each billed once at the miss price, and (d) the first call's
miss of the fixed prefix. Two floors follow, both assuming every rewrite is free:

* floor A: no history at all is re-read (only (a) + (c) + (d) remain);
* floor B: the agent's and the user's messages stay, every tool output is dropped right after
  the call that reads it.

A strategy that keeps every message the agent wrote cannot go below floor B; going lower
means folding the agent's own turns. Estimates use per-message token counts (no 128-token
cache steps), so vanilla's figure differs from the bench's by about 2 %.

Run: TIKTOKEN_CACHE_DIR=../shared/tiktoken uv run python benchmarks/cost_floor.py \
    [TRACES...] [--mode isolated|continuous] [--provider PROFILE]
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

from cachepilot.sim import Request, get_profile, render_request
from cachepilot.tokens import get_counter
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.harness import BenchConfig, prepare_sessions
from cachepilot_bench.traces import load_paths
from cachepilot_bench.traces.session import split_system

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", default=[str(DEFAULT_TRACES)])
    parser.add_argument("--mode", choices=["isolated", "continuous"], default="isolated")
    parser.add_argument("--provider", default="openai-gpt-5.4-mini")
    args = parser.parse_args()
    price = get_profile(args.provider).price
    hit, miss = price.hit_per_m / 1e6, price.miss_per_m / 1e6
    counter = get_counter("o200k_base")
    config = BenchConfig(mode=args.mode, provider=args.provider)
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    for session in prepare_sessions(load_paths(args.traces), config):
        system, body = split_system(session.messages)
        fixed = render_request(Request(system=system, messages=[], tools=session.tools), counter)
        first_reply = next((i for i, m in enumerate(body) if m.role != "user"), len(body))
        sizes = [counter.count_message(m) for m in body]
        prefix = fixed.total_tokens + estimate_hidden_prefix(session, counter)
        prefix += sum(sizes[:first_reply])
        row = totals[session.source]
        row["first"] += prefix
        previous = 0
        for index, message in enumerate(body):
            if message.role != "assistant":
                continue
            row["calls"] += 1
            row["prefix"] += prefix
            row["new"] += sum(sizes[previous:index])
            previous = index
            for j in range(first_reply, index):
                row["history"] += sizes[j]
                if body[j].role != "tool":
                    row["kept"] += sizes[j]
    grand: Counter[str] = Counter()
    print(f"mode {args.mode} · provider {args.provider}")
    print("source                  calls  vanilla $  prefix $  history $  new $  floor A  floor B")
    for source in [*sorted(totals), "all"]:
        row = grand if source == "all" else totals[source]
        if source != "all":
            grand.update(row)
        base = row["prefix"] * hit + row["new"] * miss + row["first"] * (miss - hit)
        vanilla = base + row["history"] * hit
        floor_b = base + row["kept"] * hit
        print(
            f"{source:22s} {row['calls']:6d} {vanilla:10.3f} {row['prefix'] * hit:9.3f} "
            f"{row['history'] * hit:10.3f} {row['new'] * miss:7.3f} "
            f"{base / vanilla:8.3f} {floor_b / vanilla:8.3f}"
        )


if __name__ == "__main__":
    main()

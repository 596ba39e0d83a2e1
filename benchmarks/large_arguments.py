"""Input cost of a session whose largest items are tool-call arguments (100 KB `write`s).

Replays `cachepilot_bench.synthetic.large_write_session` (five modules of ~100,000
characters written with `write(file_path, content)`, six test runs after each) through the
simulator: vanilla, cachepilot without argument reduction, and cachepilot as configured.

Run: TIKTOKEN_CACHE_DIR=../shared/tiktoken uv run python benchmarks/large_arguments.py \
    [--provider PROFILE] [--writes N] [--chars N] [--runs N]
"""

from __future__ import annotations

import argparse

from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.pilot.facade import Config
from cachepilot_bench import BenchConfig
from cachepilot_bench.baselines import Vanilla
from cachepilot_bench.harness import run_session
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.report import strategy_totals
from cachepilot_bench.strategy import Strategy
from cachepilot_bench.synthetic import large_write_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="openai-gpt-5.4-mini")
    parser.add_argument("--writes", type=int, default=5)
    parser.add_argument("--chars", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    session = large_write_session(writes=args.writes, chars=args.chars, runs=args.runs)
    config = BenchConfig(provider=args.provider, workers=1)
    strategies: list[tuple[str, Strategy]] = [
        ("vanilla", Vanilla()),
        (
            "cachepilot, arguments kept",
            CachePilotStrategy(Config(maintenance=MaintenanceConfig(reduce_arguments=False))),
        ),
        ("cachepilot", CachePilotStrategy()),
    ]
    calls = len(session.assistant_indices)
    print(f"{session.id}: {calls} calls, provider {args.provider}")
    print(f"{'strategy':<28} {'input $':>9} {'hit%':>6} {'peak ctx':>9} {'mean ctx':>9} breaks")
    for name, strategy in strategies:
        result = run_session(session, strategy, config)
        if result.error:
            raise SystemExit(f"{name}: {result.error}")
        t = strategy_totals([result])
        print(
            f"{name:<28} {t['input_cost_usd']:>9.4f} {t['hit_rate'] * 100:>5.1f}% "
            f"{t['peak_context_tokens']:>9,} {t['mean_context_tokens']:>9,} {t['prefix_breaks']:>6}"
        )


if __name__ == "__main__":
    main()

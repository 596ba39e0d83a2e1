"""End-to-end replay of recorded sessions through a real LangChain `create_agent` agent.

Each session runs twice through `create_agent` + `ChatOpenAI` (real HTTP) against the replay
provider, without and with `CachePilotMiddleware`; the provider prices the request bodies the
framework really sent. The same sessions are then replayed by `cachepilot bench` (vanilla and
cachepilot strategies) and both results are printed side by side.

    uv run python benchmarks/langgraph_e2e.py ../shared/data/traces --per-source 3
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

from cachepilot_bench import BenchConfig, run_bench
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.frameworks.langgraph_replay import AgentReplay, pick_sessions, replay_session
from cachepilot_bench.traces import load_paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", help="trace files or folders (default: demo)")
    parser.add_argument("--per-source", type=int, default=2)
    parser.add_argument("--max-calls", type=int, default=150)
    parser.add_argument("--provider", default="openai-gpt-5.4-mini")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.traces:
        sessions = pick_sessions(load_paths(args.traces), args.per_source, args.max_calls)
    else:
        sessions = [build_demo_session()]
    started = time.perf_counter()
    agent: dict[str, list[AgentReplay]] = {"vanilla": [], "cachepilot": []}
    for session in sessions:
        for with_cp in (False, True):
            result = replay_session(
                session, with_cachepilot=with_cp, provider_profile=args.provider
            )
            agent[result.strategy].append(result)
    agent_seconds = time.perf_counter() - started
    ok = {
        r.session_id
        for r in agent["vanilla"]
        if r.error is None
        and not r.unserved_turns
        and all(
            c.error is None and not c.unserved_turns
            for c in agent["cachepilot"]
            if c.session_id == r.session_id
        )
    }
    bench = run_bench(
        [s for s in sessions if s.id in ok],
        ["vanilla", "cachepilot"],
        BenchConfig(provider=args.provider, workers=1),
    )
    predicted: dict[tuple[str, str], float] = defaultdict(float)
    round_trips: dict[tuple[str, str], float] = defaultdict(float)
    for r in bench:
        predicted[(r.session_id, r.strategy)] += sum(c.input_cost_usd for c in r.calls)
        # Fetches the bench charges for facts missing from the view (a replayed agent never
        # recalls, so the end-to-end run has no counterpart for them).
        round_trips[(r.session_id, r.strategy)] += sum(
            c.input_cost_usd for c in r.calls if c.kind == "round_trip"
        )
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for strategy, results in agent.items():
        for r in results:
            if r.session_id not in ok:
                continue
            row = rows[r.source]
            row[f"agent_{strategy}"] += r.input_cost_usd
            row[f"bench_{strategy}"] += predicted[(r.session_id, strategy)]
            row[f"round_trips_{strategy}"] += round_trips[(r.session_id, strategy)]
            row[f"calls_{strategy}"] += r.calls
            row[f"breaks_{strategy}"] += r.prefix_breaks
            row["sessions"] += 0.5
    total: dict[str, float] = defaultdict(float)
    print(
        f"{'source':<20} {'sess':>4} {'calls':>6} | {'agent vanilla':>13} {'agent cp':>9} "
        f"{'ratio':>6} | {'bench vanilla':>13} {'bench cp':>9} {'ratio':>6} {'of it fetches':>13} "
        f"| {'cp breaks':>9}"
    )
    for source, row in sorted(rows.items()):
        for key, value in row.items():
            total[key] += value
        _print_row(source, row)
    _print_row("all", total)
    skipped = len(sessions) - len(ok)
    print(f"\n{len(ok)} sessions replayed end to end in {agent_seconds:.1f} s; {skipped} skipped")
    for results in agent.values():
        for r in results:
            if r.session_id not in ok:
                print(f"  skipped {r.session_id} ({r.strategy}): {r.error or 'turns unserved'}")
    if args.json_path:
        doc = {
            "provider": args.provider,
            "sessions": sorted(ok),
            "by_source": {k: dict(v) for k, v in rows.items()},
            "total": dict(total),
        }
        Path(args.json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


def _print_row(name: str, row: dict[str, float]) -> None:
    av, ac = row["agent_vanilla"], row["agent_cachepilot"]
    bv, bc = row["bench_vanilla"], row["bench_cachepilot"]
    print(
        f"{name:<20} {int(row['sessions']):>4} {int(row['calls_vanilla']):>6} | "
        f"{av:>13.4f} {ac:>9.4f} {ac / av if av else 0:>6.3f} | "
        f"{bv:>13.4f} {bc:>9.4f} {bc / bv if bv else 0:>6.3f} "
        f"{row['round_trips_cachepilot']:>13.4f} | {int(row['breaks_cachepilot']):>9}"
    )


if __name__ == "__main__":
    sys.exit(main())

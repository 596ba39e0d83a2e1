"""End-to-end replay of recorded sessions through a real deepagents `create_deep_agent` agent.

Each session runs through `create_deep_agent` + `ChatOpenAI` (real HTTP) against the replay
provider three ways: deepagents alone, with `CachePilotMiddleware` added as a plain user adds
it, and with the recipe (`cachepilot_langgraph.deepagents.create_cachepilot_deep_agent`). The
same sessions also run through plain `create_agent` without and with the middleware (what
`benchmarks/langgraph_e2e.py` measures), so the ratios can be compared side by side.

    uv run python benchmarks/deepagents_e2e.py ../shared/data/traces --per-source 2 --max-calls 120
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.frameworks.deepagents_replay import VARIANTS, replay_deep_session
from cachepilot_bench.frameworks.langgraph_replay import pick_sessions, replay_session
from cachepilot_bench.traces import load_paths

_COLUMNS = ("agent_vanilla", "agent_cachepilot", "alone", "plain", "recipe")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", help="trace files or folders (default: demo)")
    parser.add_argument("--per-source", type=int, default=2)
    parser.add_argument("--max-calls", type=int, default=120)
    parser.add_argument("--provider", default="openai-gpt-5.4-mini")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.traces:
        sessions = pick_sessions(load_paths(args.traces), args.per_source, args.max_calls)
    else:
        sessions = [build_demo_session()]
    started = time.perf_counter()
    cost: dict[tuple[str, str], float] = {}
    chars: dict[tuple[str, str], int] = {}
    calls: dict[tuple[str, str], int] = {}
    summaries: dict[tuple[str, str], int] = {}
    summary_usd: dict[tuple[str, str], float] = {}
    failed: dict[str, str] = {}
    outcomes: dict[tuple[str, str], str] = {}
    for session in sessions:
        for with_cp in (False, True):
            plain = replay_session(session, with_cachepilot=with_cp, provider_profile=args.provider)
            column = "agent_cachepilot" if with_cp else "agent_vanilla"
            key = (session.id, column)
            cost[key], calls[key] = plain.input_cost_usd, plain.calls
            if plain.error or plain.unserved_turns:
                failed[session.id] = f"{column}: {plain.error or 'turns unserved'}"
        for variant in VARIANTS:
            deep = replay_deep_session(session, variant, provider_profile=args.provider)
            key = (session.id, variant)
            cost[key] = deep.input_cost_usd + deep.summary_input_usd
            chars[key], calls[key] = deep.request_chars, deep.calls
            summaries[key], summary_usd[key] = deep.summaries, deep.summary_input_usd
            outcomes[key] = deep.outcome
            if deep.error or deep.unserved_turns:
                failed[session.id] = f"{variant}: {deep.error or 'turns unserved'}"
    seconds = time.perf_counter() - started
    ok = [s for s in sessions if s.id not in failed]
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for session in ok:
        row = rows[session.source]
        row["sessions"] += 1
        row["calls"] += calls[(session.id, "alone")]
        for column in _COLUMNS:
            row[column] += cost[(session.id, column)]
        for variant in VARIANTS:
            row[f"chars_{variant}"] += chars[(session.id, variant)]
            row[f"summaries_{variant}"] += summaries[(session.id, variant)]
            row[f"summary_usd_{variant}"] += summary_usd[(session.id, variant)]
    total: dict[str, float] = defaultdict(float)
    print(
        f"{'source':<20} {'sess':>4} {'calls':>5} | {'create_agent':>12} {'+cp':>8} {'ratio':>6} | "
        f"{'deep alone':>10} {'+plain':>8} {'ratio':>6} {'recipe':>8} {'ratio':>6} | "
        f"{'chars plain':>11} {'chars recipe':>12} | {'summaries':>9}"
    )
    for source, row in sorted(rows.items()):
        for key, value in row.items():
            total[key] += value
        _print_row(source, row)
    _print_row("all", total)
    print(
        f"\n{len(ok)} sessions replayed five ways in {seconds:.1f} s; {len(failed)} skipped. "
        "Costs are input cost in USD (deepagents' summarization calls included); chars are "
        "the request bodies' characters relative to deepagents alone."
    )
    same_outcome = {
        variant: sum(outcomes[(s.id, variant)] == outcomes[(s.id, "alone")] for s in ok)
        for variant in ("plain", "recipe")
    }
    for variant, same in same_outcome.items():
        print(
            f"{variant}: the same final messages, files and todos as deepagents alone in {same} of "
            f"{len(ok)} sessions"
        )
    for session_id, reason in failed.items():
        print(f"  skipped {session_id}: {reason}")
    if args.json_path:
        doc = {
            "provider": args.provider,
            "sessions": [s.id for s in ok],
            "by_source": {k: dict(v) for k, v in rows.items()},
            "total": dict(total),
            "same_outcome": same_outcome,
        }
        Path(args.json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _print_row(name: str, row: dict[str, float]) -> None:
    print(
        f"{name:<20} {int(row['sessions']):>4} {int(row['calls']):>5} | "
        f"{row['agent_vanilla']:>12.4f} {row['agent_cachepilot']:>8.4f} "
        f"{_ratio(row['agent_cachepilot'], row['agent_vanilla']):>6.3f} | "
        f"{row['alone']:>10.4f} {row['plain']:>8.4f} {_ratio(row['plain'], row['alone']):>6.3f} "
        f"{row['recipe']:>8.4f} {_ratio(row['recipe'], row['alone']):>6.3f} | "
        f"{_ratio(row['chars_plain'], row['chars_alone']):>11.3f} "
        f"{_ratio(row['chars_recipe'], row['chars_alone']):>12.3f} | "
        f"{int(row['summaries_alone']):>4}/{int(row['summaries_plain'])}/"
        f"{int(row['summaries_recipe'])}"
    )


if __name__ == "__main__":
    sys.exit(main())

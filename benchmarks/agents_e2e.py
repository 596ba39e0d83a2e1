"""End-to-end: recorded sessions through a real Agents SDK `Runner`, with and without cachepilot.

Each session from the traces folder becomes a replay script; the replay provider serves its
assistant turns over real HTTP to the SDK's `OpenAIResponsesModel` (or `--api chat`) and the
`openai` client, replay tools return the recorded tool outputs, and the provider prices every
request body the SDK actually sent (simulator, `openai-gpt-5.4-mini` by default). The same
sessions go through `cachepilot bench` (`run_bench`, strategies `vanilla` and `cachepilot`),
which replays them call by call without a framework. The table puts the two side by side.

Why the numbers differ (what this benchmark is for):
- Serialization: the SDK sends Responses items / chat messages with its own framing, the
  system prompt as `instructions`, tool schemas in its own shape; the bench renders neutral
  requests. Both add the same hidden-prefix estimate per session.
- Ingestion: in the SDK run the reduced tool output is what the session stores, so every later
  request carries it; the bench applies the same reduction to the same outputs.
- Turn structure: the SDK groups a prompt's calls in one `Runner.run`; recordings whose user
  prompts have no reply, or that stop mid-turn, are replayed as far as the SDK allows
  (`interrupted` runs).
- Time: both use the recorded timestamps (the cold-cache rule fires on the same gaps).
- Fidelity round trips: the bench charges a recall round trip when a needed fact is hidden;
  the replay cannot (the recorded agent never asks), so the e2e saving is higher where the
  bench charges many (column `cp calls$`: the bench's cachepilot cost of the recorded calls
  alone, without those round trips).

Run:
    uv run python benchmarks/agents_e2e.py [TRACES] [--per-source 2] [--max-calls 80]
        [--api responses|chat] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agents import set_tracing_disabled

from cachepilot import CachePilot, InMemoryArtifactStore
from cachepilot.tokens import get_counter
from cachepilot_agents import CachePilotAgents
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.frameworks.agents_replay import run_script
from cachepilot_bench.harness import BenchConfig, prepare_sessions, run_bench
from cachepilot_bench.replay import ReplayProvider, ReplayScript
from cachepilot_bench.traces import load_paths
from cachepilot_bench.traces.session import Session

PROFILE = "openai-gpt-5.4-mini"
DEFAULT_TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"


def pick(sessions: list[Session], per_source: int, max_calls: int) -> list[Session]:
    """The first `per_source` sessions of each source with at most `max_calls` calls."""
    taken: dict[str, int] = defaultdict(int)
    out: list[Session] = []
    for session in sessions:
        calls = len(session.assistant_indices)
        if not 2 <= calls <= max_calls or taken[session.source] >= per_source:
            continue
        taken[session.source] += 1
        out.append(session)
    return out


async def e2e(session: Session, api: str) -> dict[str, Any]:
    script = ReplayScript.from_session(session)
    hidden = estimate_hidden_prefix(session, get_counter())
    with ReplayProvider(script, profile=PROFILE, hidden_prefix_tokens=hidden) as provider:
        plain = await run_script(script, provider, api=api)  # type: ignore[arg-type]
        cp = CachePilotAgents(CachePilot(store=InMemoryArtifactStore()), clock=provider.clock)
        piloted = await run_script(script, provider, plugin=cp, api=api, session_id="e2e")  # type: ignore[arg-type]
    return {
        "calls": len(script.turns),
        "plain_requests": len(plain.records),
        "cachepilot_requests": len(piloted.records),
        "plain_input_usd": plain.input_cost_usd(PROFILE),
        "cachepilot_input_usd": piloted.input_cost_usd(PROFILE),
        "plain_hit_rate": plain.usage.hit_rate,
        "cachepilot_hit_rate": piloted.usage.hit_rate,
        "cachepilot_breaks": piloted.prefix_breaks,
        "interrupted": plain.interrupted,
    }


def bench(session: Session) -> dict[str, float]:
    prepared = prepare_sessions([session], BenchConfig(provider=PROFILE, workers=1))
    results = run_bench(
        prepared, ["vanilla", "cachepilot"], BenchConfig(provider=PROFILE, workers=1)
    )
    out = {r.strategy: sum(c.input_cost_usd for c in r.calls) for r in results}
    # The recorded calls only (no recall round trips charged for hidden facts, no extras):
    # what a replay, whose agent never asks for anything, can be compared with.
    for r in results:
        out[f"{r.strategy}_calls_only"] = sum(c.input_cost_usd for c in r.calls if c.kind == "call")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="Agents SDK end-to-end replay vs cachepilot bench")
    parser.add_argument("traces", nargs="?", default=str(DEFAULT_TRACES))
    parser.add_argument("--per-source", type=int, default=2)
    parser.add_argument("--max-calls", type=int, default=80)
    parser.add_argument("--api", choices=["responses", "chat"], default="responses")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    set_tracing_disabled(True)
    if not Path(args.traces).exists():
        sys.exit(f"traces not found: {args.traces}")
    sessions = pick(load_paths([args.traces]), args.per_source, args.max_calls)
    rows: list[dict[str, Any]] = []
    header = (
        f"{'session':<48} {'calls':>5} {'e2e plain$':>10} {'e2e cp$':>9} {'e2e save':>8} "
        f"{'bench van$':>10} {'bench cp$':>9} {'bench save':>10} {'cp calls$':>9}"
    )
    print(header)
    started = time.perf_counter()
    for session in sessions:
        row = {"session": session.id, "source": session.source}
        row.update(asyncio.run(e2e(session, args.api)))
        predicted = bench(session)
        row["bench_vanilla_input_usd"] = predicted.get("vanilla", 0.0)
        row["bench_cachepilot_input_usd"] = predicted.get("cachepilot", 0.0)
        row["bench_cachepilot_calls_only_usd"] = predicted.get("cachepilot_calls_only", 0.0)
        rows.append(row)
        print(_line(row))
    total = {
        key: sum(float(r[key]) for r in rows)
        for key in (
            "calls",
            "plain_input_usd",
            "cachepilot_input_usd",
            "bench_vanilla_input_usd",
            "bench_cachepilot_input_usd",
            "bench_cachepilot_calls_only_usd",
        )
    }
    print("-" * len(header))
    print(_line({"session": f"TOTAL ({len(rows)} sessions)", **total}))
    print(f"\n{time.perf_counter() - started:.0f} s; api={args.api}; provider={PROFILE}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "total": total}, indent=2))


def _line(row: dict[str, Any]) -> str:
    plain, cp = row["plain_input_usd"], row["cachepilot_input_usd"]
    van, bcp = row["bench_vanilla_input_usd"], row["bench_cachepilot_input_usd"]
    save = 1 - cp / plain if plain else 0.0
    bsave = 1 - bcp / van if van else 0.0
    return (
        f"{str(row['session'])[:48]:<48} {int(row['calls']):>5} {plain:>10.4f} {cp:>9.4f} "
        f"{save:>8.0%} {van:>10.4f} {bcp:>9.4f} {bsave:>10.0%} "
        f"{row.get('bench_cachepilot_calls_only_usd', 0.0):>9.4f}"
    )


if __name__ == "__main__":
    main()

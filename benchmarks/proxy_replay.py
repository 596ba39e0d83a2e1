"""Recorded Claude Code sessions replayed through `cachepilot proxy` as Anthropic Messages.

Every model call of each session becomes the Messages request Claude Code sent (the whole
history so far, the recorded tool results, tool schemas inferred from the calls, the marks
Claude Code sets: the end of its header and the last message) and is sent twice, each time to
a fresh replay provider in Anthropic mode (recorded replies, usage from the cache simulator on
the bodies it receives, the session's hidden system prompt and tools as a hidden prefix,
recorded timestamps): once straight, once through the proxy (over its ASGI app, the proxy's
clock set to the recording's). The traces hold no system prompt, so the header mark sits on
the last tool, which ends the header here. Through the proxy the proxy adds its own marks.

Both runs are priced as `cachepilot bench` prices a strategy: every request the upstream got
through the cache simulator, and after a request that lost a fact the agent uses at that call,
the round trip that gets it back (`price_run`). `--compare` also runs the bench's cachepilot
strategy with the same settings on each session and lists the calls billed differently
(docs/proxy-vs-bench.md).

    uv run python benchmarks/proxy_replay.py ../shared/data/traces [--provider anthropic-1h]
        [--set fold_min_tokens=15000] [--compare] [--json FILE]

Skips cleanly (exit 0) when the traces are absent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.memory.facts import FactIndex, view_text
from cachepilot.pilot.facade import Config
from cachepilot.proxy import ProxyConfig, ProxyEngine, create_app
from cachepilot.proxy.engine import proxy_pilot_config
from cachepilot.sim import CacheSimulator, get_profile
from cachepilot.state.base import MemoryStateStore
from cachepilot.tokens import get_counter
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.harness import (
    ROUND_TRIP_OUTPUT_TOKENS,
    BenchConfig,
    check_facts,
    round_trip,
    run_session,
)
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.registry import make_strategy
from cachepilot_bench.replay import ReplayProvider, ReplayRecord, ReplayScript
from cachepilot_bench.request_logs import session_to_log
from cachepilot_bench.strategy import PreparedCall
from cachepilot_bench.traces import Session, load_paths, split_system
from cachepilot_bench.variants import VARIANT_BASE, parse_variant


def _bodies(session: Session, script: ReplayScript) -> list[dict[str, Any]]:
    if not session.tools:
        session.tools = script.tool_schemas()
    return [entry["request"] for entry in session_to_log(session, api="anthropic")]


async def _straight(bodies: list[dict[str, Any]], provider: ReplayProvider) -> list[int]:
    async with httpx.AsyncClient(timeout=120) as client:
        for body in bodies:
            reply = await client.post(f"{provider.base_url}/messages", json=body)
            reply.raise_for_status()
    return []


def pilot_config(profile: str, settings: Sequence[str] = ()) -> Config:
    """The proxy's default pilot config (`cachepilot proxy`), with `settings` (`key=value`
    `MaintenanceConfig` fields, validated as `cachepilot bench` validates
    `cachepilot[key=value,...]`) applied over its maintenance settings."""
    config = proxy_pilot_config(profile)
    if not settings:
        return config
    asked = parse_variant(f"{VARIANT_BASE}[{','.join(settings)}]")
    maintenance = config.maintenance.model_copy(update=asked.model_dump(exclude_unset=True))
    return config.model_copy(update={"maintenance": maintenance})


async def _proxied(
    bodies: list[dict[str, Any]],
    provider: ReplayProvider,
    profile: str,
    pilot_config: Config,
    archive: list[str],
) -> list[int]:
    """Send `bodies` through a proxy; `archive` gets the originals the proxy archived, in
    order. Returns how many of them were archived by the time of each request."""
    config = ProxyConfig(upstream=provider.base_url, provider=profile, clock=provider.clock)
    pilot = CachePilot(pilot_config, store=InMemoryArtifactStore())
    engine = ProxyEngine(config, pilot=pilot, state_store=MemoryStateStore())
    transport = httpx.ASGITransport(app=create_app(engine))
    seen: set[tuple[str, str]] = set()
    counts: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy", timeout=120) as c:
        for body in bodies:
            reply = await c.post("/v1/messages", json=body, headers={"x-api-key": "replay"})
            reply.raise_for_status()
            for thread in engine.threads.names():
                for info in sorted(pilot.store.list(thread), key=lambda i: i.created_at):
                    found = pilot.store.get(thread, info.ref)
                    if (thread, info.ref) not in seen and found is not None and found.is_text:
                        seen.add((thread, info.ref))
                        archive.append(found.text)
            counts.append(len(archive))
    await engine.aclose()
    return counts


def price_run(
    session: Session,
    records: Sequence[ReplayRecord],
    profile: str,
    hidden_prefix_tokens: int,
    *,
    archive: Sequence[str] = (),
    archived: Sequence[int] = (),
    can_recall: bool = False,
) -> dict[str, float]:
    """The input cost of the requests a run sent upstream, priced as `cachepilot bench`
    prices a strategy's: every request through the cache simulator, and after a request
    that lost a fact the agent uses at that call, the round trip that gets it back (recall
    when the fact is in `archive`, else re-running the tool), through the same simulator.

    The recorded replies never call recall, so without this the replay would price a
    strategy that loses facts as if they cost nothing to get back.

    Args:
        session: the session replayed.
        records: the requests the replay provider received, one per model call, in order.
        profile: the provider profile.
        hidden_prefix_tokens: the hidden prefix the replay provider was given.
        archive: the originals the proxy archived, in order.
        archived: for each request, how many of `archive` existed when it was sent.
        can_recall: the run offered the recall tool.
    """
    counter = get_counter()
    price = get_profile(profile)
    _, body = split_system(session.messages)
    facts = FactIndex(body)
    calls = [i for i, m in enumerate(body) if m.role == "assistant"]
    sim = CacheSimulator(profile, counter=counter, hidden_prefix_tokens=hidden_prefix_tokens)
    out = dict.fromkeys(
        ("calls", "input_cost_usd", "calls_cost_usd", "input_tokens", "cached_tokens",
         "cache_write_tokens", "refetches", "refetch_cost_usd"),
        0.0,
    )  # fmt: skip
    for k, record in enumerate(records):
        usage = sim.submit(record.request, output_tokens=record.usage.output_tokens)
        spent = [usage]
        needed = facts.needed_at(calls[k]) if k < len(calls) else []
        if needed:
            request = record.request
            known = archived[k] if k < len(archived) else len(archive)
            text = "\x00".join(archive[:known]) if can_recall else ""
            check = check_facts(needed, view_text(request.system, request.messages), text)
            if check.lost_source is not None:
                view = PreparedCall(
                    system=request.system,
                    messages=request.messages,
                    tools=request.tools,
                    cache_breakpoints=request.cache_breakpoints,
                )
                again = round_trip(view, body[check.lost_source], can_recall, None)
                extra = sim.submit(again, output_tokens=ROUND_TRIP_OUTPUT_TOKENS)
                spent.append(extra)
                out["refetches"] += 1
                out["refetch_cost_usd"] += price.cost(extra).input_usd
        out["calls"] += 1
        out["calls_cost_usd"] += price.cost(usage).input_usd
        for u in spent:
            out["input_cost_usd"] += price.cost(u).input_usd
            out["input_tokens"] += u.input_tokens
            out["cached_tokens"] += u.cached_tokens
            out["cache_write_tokens"] += u.cache_write_tokens
    return out


def replay_session(session: Session, profile: str, config: Config) -> dict[str, Any] | None:
    """One session straight and through the proxy (None when it has no model call)."""
    script = ReplayScript.from_session(session)
    bodies = _bodies(session, script)
    if not bodies:
        return None
    hidden = estimate_hidden_prefix(session, get_counter())
    row: dict[str, Any] = {"session": session.id, "calls": len(bodies)}
    for mode in ("straight", "proxy"):
        archive: list[str] = []
        with ReplayProvider(script, profile=profile, hidden_prefix_tokens=hidden) as up:
            if mode == "straight":
                archived = asyncio.run(_straight(bodies, up))
            else:
                archived = asyncio.run(_proxied(bodies, up, profile, config, archive))
            records = up.records
        row[mode] = price_run(
            session,
            records,
            profile,
            hidden,
            archive=archive,
            archived=archived,
            can_recall=mode == "proxy",  # the proxy offers recall (`ProxyConfig.recall`)
        )
        # The provider's own bill of the same requests (no round trips).
        row[mode]["provider_cost_usd"] = sum(
            get_profile(profile).cost(r.usage).input_usd for r in records
        )
        row[f"{mode}_requests"] = [
            {
                "tokens": r.usage.input_tokens,
                "read": r.usage.cached_tokens,
                "written": r.usage.cache_write_tokens,
                "marks": list(r.request.cache_breakpoints or ()),
                "extends": r.prefix_extends,
            }
            for r in records
        ]
    return row


def bench_session(session: Session, profile: str, config: Config) -> dict[str, Any]:
    """The same session through `cachepilot bench` (vanilla and the cachepilot strategy with
    the proxy pilot's settings): input costs and the strategy's calls."""
    bench = BenchConfig(provider=profile)
    plain = run_session(session, make_strategy("vanilla"), bench)
    ours = run_session(session, CachePilotStrategy(config), bench)
    return {
        "vanilla_cost_usd": sum(c.input_cost_usd for c in plain.calls),
        "cachepilot_cost_usd": sum(c.input_cost_usd for c in ours.calls),
        "requests": [
            {
                "tokens": c.usage.input_tokens,
                "read": c.usage.cached_tokens,
                "written": c.usage.cache_write_tokens,
                "maintenance": c.maintenance,
            }
            for c in ours.calls
            if c.kind == "call"
        ],
    }


def differences(row: Mapping[str, Any], tolerance: int = 200) -> list[str]:
    """The calls where the proxy's upstream requests and the bench's requests were billed
    differently (reads or writes more than `tolerance` tokens apart), one line each."""
    lines = []
    pairs = zip(row["bench"]["requests"], row["proxy_requests"], strict=False)
    for k, (ours, sent) in enumerate(pairs):
        if all(abs(ours[key] - sent[key]) <= tolerance for key in ("read", "written")):
            continue
        lines.append(
            f"call {k:>3}: bench {ours['tokens']:>7,} tokens, read {ours['read']:>7,}, "
            f"written {ours['written']:>6,}{' (maintenance)' if ours['maintenance'] else ''}"
            f" | proxy {sent['tokens']:>7,} tokens, read {sent['read']:>7,}, "
            f"written {sent['written']:>6,}, marks {sent['marks']}"
            f"{'' if sent['extends'] else ', prefix broken'}"
        )
    return lines


_TOTALS = (
    "calls",
    "input_cost_usd",
    "calls_cost_usd",
    "refetch_cost_usd",
    "refetches",
    "input_tokens",
    "cached_tokens",
    "cache_write_tokens",
)


def run(
    paths: list[str], profile: str, settings: Sequence[str] = (), *, compare: bool = False
) -> dict[str, Any]:
    """Replay every Claude Code session under `paths`; returns per-session and total costs.

    `settings`: `key=value` maintenance settings of the proxy's pilot (see `pilot_config`);
    `compare`: also price each session with `cachepilot bench` (`bench_session`).
    """
    config = pilot_config(profile, settings)
    sessions = [s for s in load_paths(paths) if s.source == "claude-code"]
    rows: list[dict[str, Any]] = []
    for session in sessions:
        row = replay_session(session, profile, config)
        if row is None:
            continue
        if compare:
            row["bench"] = bench_session(session, profile, config)
        rows.append(row)
        print(
            f"{session.id[-60:]:<60} {row['calls']:>4} "
            f"${row['straight']['input_cost_usd']:>8.4f} ${row['proxy']['input_cost_usd']:>8.4f}",
            file=sys.stderr,
        )
    total = {
        mode: {key: sum(r[mode][key] for r in rows) for key in _TOTALS}
        for mode in ("straight", "proxy")
    }
    if compare:
        total["bench"] = {
            key: sum(r["bench"][key] for r in rows)
            for key in ("vanilla_cost_usd", "cachepilot_cost_usd")
        }
    return {
        "provider": profile,
        "settings": list(settings),
        "sessions": rows,
        "total": total,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", default=["../shared/data/traces"])
    parser.add_argument("--provider", default="anthropic-1h")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a maintenance setting of the proxy's pilot (repeatable), e.g. fold_min_tokens=6000",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also price each session with `cachepilot bench` (vanilla and the cachepilot "
        "strategy with the same settings) and list the calls billed differently",
    )
    parser.add_argument("--json", dest="json_path", metavar="FILE")
    args = parser.parse_args(argv)
    try:
        pilot_config(args.provider, args.settings)
    except ValueError as exc:
        parser.error(str(exc))
    paths = [p for p in args.traces if Path(p).exists()]
    if not paths:
        print("no traces found: nothing to replay", file=sys.stderr)
        return 0
    doc = run(paths, args.provider, args.settings, compare=args.compare)
    if not doc["sessions"]:
        print("no Claude Code sessions in the traces: nothing to replay", file=sys.stderr)
        return 0
    straight, proxy = doc["total"]["straight"], doc["total"]["proxy"]
    ratio = (
        proxy["input_cost_usd"] / straight["input_cost_usd"] if straight["input_cost_usd"] else 0
    )
    settings = f", {', '.join(args.settings)}" if args.settings else ""
    print(f"provider profile {doc['provider']}{settings}, {len(doc['sessions'])} sessions")
    print("| run | calls | refetches | input tokens | cached | input cost | of it refetches |")
    print("|---|---|---|---|---|---|---|")
    for name, row in (("straight to the provider", straight), ("through the proxy", proxy)):
        print(
            f"| {name} | {row['calls']:.0f} | {row['refetches']:.0f} | "
            f"{row['input_tokens']:,.0f} | "
            f"{row['cached_tokens'] / max(1, row['input_tokens']):.1%} | "
            f"${row['input_cost_usd']:.4f} | ${row['refetch_cost_usd']:.4f} |"
        )
    calls = (
        proxy["calls_cost_usd"] / straight["calls_cost_usd"] if straight["calls_cost_usd"] else 0
    )
    print(f"ratio: {ratio:.3f} (requests alone, without refetches: {calls:.3f})")
    if args.compare:
        bench = doc["total"]["bench"]
        priced = bench["cachepilot_cost_usd"] / bench["vanilla_cost_usd"]
        print(f"cachepilot bench on the same sessions: {priced:.3f} ({ratio / priced - 1:+.1%})")
        for row in doc["sessions"]:
            lines = differences(row)
            if lines:
                print(f"\n{row['session']}:")
                print("\n".join(lines))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

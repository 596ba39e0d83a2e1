"""Recorded Claude Code sessions replayed through `cachepilot proxy` as Anthropic Messages.

Every model call of each session becomes the Messages request Claude Code sent (the whole
history so far, the recorded tool results, tool schemas inferred from the calls) and is sent
twice, each time to a fresh replay provider in Anthropic mode (recorded replies, usage from
the cache simulator on the bodies it receives, the session's hidden system prompt and tools
as a hidden prefix, recorded timestamps): once straight, once through the proxy (over its
ASGI app, the proxy's clock set to the recording's). The simulated input cost of both runs is
compared. The straight run uses the profile's default breakpoints (end of tools + system and
the last message, as Claude Code marks its requests); through the proxy the proxy places them.

    uv run python benchmarks/proxy_replay.py ../shared/data/traces [--provider anthropic-1h]

Skips cleanly (exit 0) when the traces are absent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.pilot import Config
from cachepilot.proxy import ProxyConfig, ProxyEngine, create_app
from cachepilot.proxy.engine import proxy_pilot_config
from cachepilot.sim import get_profile
from cachepilot.state_store import MemoryStateStore
from cachepilot.tokens import get_counter
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.replay import ReplayProvider, ReplayScript
from cachepilot_bench.request_logs import session_to_log
from cachepilot_bench.traces import Session, load_paths
from cachepilot_bench.variants import VARIANT_BASE, parse_variant


def _bodies(session: Session, script: ReplayScript) -> list[dict[str, Any]]:
    if not session.tools:
        session.tools = script.tool_schemas()
    return [entry["request"] for entry in session_to_log(session, api="anthropic")]


def _cost(provider: ReplayProvider, profile: str) -> dict[str, float]:
    price = get_profile(profile)
    records = provider.records
    return {
        "calls": len(records),
        "input_cost_usd": sum(price.cost(r.usage).input_usd for r in records),
        "input_tokens": sum(r.usage.input_tokens for r in records),
        "cached_tokens": sum(r.usage.cached_tokens for r in records),
        "cache_write_tokens": sum(r.usage.cache_write_tokens for r in records),
    }


async def _straight(bodies: list[dict[str, Any]], provider: ReplayProvider) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        for body in bodies:
            reply = await client.post(f"{provider.base_url}/messages", json=body)
            reply.raise_for_status()


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
    bodies: list[dict[str, Any]], provider: ReplayProvider, profile: str, pilot_config: Config
) -> None:
    config = ProxyConfig(upstream=provider.base_url, provider=profile, clock=provider.clock)
    pilot = CachePilot(pilot_config, store=InMemoryArtifactStore())
    engine = ProxyEngine(config, pilot=pilot, state_store=MemoryStateStore())
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy", timeout=120) as c:
        for body in bodies:
            reply = await c.post("/v1/messages", json=body, headers={"x-api-key": "replay"})
            reply.raise_for_status()
    await engine.aclose()


def run(paths: list[str], profile: str, settings: Sequence[str] = ()) -> dict[str, Any]:
    """Replay every Claude Code session under `paths`; returns per-session and total costs.

    `settings`: `key=value` maintenance settings of the proxy's pilot (see `pilot_config`).
    """
    config = pilot_config(profile, settings)
    sessions = [s for s in load_paths(paths) if s.source == "claude-code"]
    counter = get_counter()
    rows: list[dict[str, Any]] = []
    for session in sessions:
        script = ReplayScript.from_session(session)
        bodies = _bodies(session, script)
        if not bodies:
            continue
        hidden = estimate_hidden_prefix(session, counter)
        row: dict[str, Any] = {"session": session.id, "calls": len(bodies)}
        for mode in ("straight", "proxy"):
            with ReplayProvider(script, profile=profile, hidden_prefix_tokens=hidden) as up:
                if mode == "straight":
                    asyncio.run(_straight(bodies, up))
                else:
                    asyncio.run(_proxied(bodies, up, profile, config))
                row[mode] = _cost(up, profile)
        rows.append(row)
        print(
            f"{session.id[-60:]:<60} {row['calls']:>4} "
            f"${row['straight']['input_cost_usd']:>8.4f} ${row['proxy']['input_cost_usd']:>8.4f}",
            file=sys.stderr,
        )
    total = {
        mode: {
            key: sum(r[mode][key] for r in rows)
            for key in ("calls", "input_cost_usd", "input_tokens", "cached_tokens")
        }
        for mode in ("straight", "proxy")
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
    doc = run(paths, args.provider, args.settings)
    if not doc["sessions"]:
        print("no Claude Code sessions in the traces: nothing to replay", file=sys.stderr)
        return 0
    straight, proxy = doc["total"]["straight"], doc["total"]["proxy"]
    ratio = (
        proxy["input_cost_usd"] / straight["input_cost_usd"] if straight["input_cost_usd"] else 0
    )
    settings = f", {', '.join(args.settings)}" if args.settings else ""
    print(f"provider profile {doc['provider']}{settings}, {len(doc['sessions'])} sessions")
    print("| run | calls | input tokens | cached | input cost |")
    print("|---|---|---|---|---|")
    for name, row in (("straight to the provider", straight), ("through the proxy", proxy)):
        print(
            f"| {name} | {row['calls']} | {row['input_tokens']:,} | "
            f"{row['cached_tokens'] / max(1, row['input_tokens']):.1%} | "
            f"${row['input_cost_usd']:.4f} |"
        )
    print(f"ratio: {ratio:.3f}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`cachepilot bench` and `cachepilot demo`: registered with the core's command through the
`cachepilot.cli` entry points of this package."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from cachepilot.sim import DEFAULT_PROFILE, PROFILES

__all__ = ["PER_CALL_COLUMNS", "register_bench", "register_demo"]

Handler = Callable[[argparse.Namespace, TextIO, TextIO], int]


_CLIENT_MARKS: dict[str, Any] = {
    "choices": ("default", "none"),
    "default": "default",
    "help": "explicit-breakpoint providers (anthropic): what the agent marks itself, "
    "'default' (tools + system and the last message, as Claude Code does) or 'none' "
    "(no cache_control); cachepilot adds its own marks in either case",
}


def register_bench(sub: Any) -> Handler:
    """Add the `bench` subcommand to the core's subparsers; returns its handler."""
    bench = sub.add_parser(
        "bench",
        help="replay traces through context-management strategies and price them",
        description="Replay agent traces call by call through each strategy and a provider "
        "prompt-cache simulator. With no TRACES, replays the built-in demo workload.",
    )
    bench.add_argument("traces", nargs="*", help="trace files or folders (formats auto-detected)")
    bench.add_argument(
        "--strategy",
        action="append",
        dest="strategies",
        metavar="NAME",
        help="strategy to run (repeatable; default: all)",
    )
    bench.add_argument(
        "--provider",
        default=DEFAULT_PROFILE,
        choices=sorted(PROFILES),
        help=f"provider cache profile (default: {DEFAULT_PROFILE})",
    )
    bench.add_argument(
        "--mode",
        choices=["isolated", "continuous"],
        default=None,
        help="isolated (default): one trace per session; continuous: traces of a source chained",
    )
    bench.add_argument("--client-marks", **_CLIENT_MARKS)
    bench.add_argument("--chain", type=int, default=4, help="continuous mode: traces per session")
    bench.add_argument("--json", dest="json_path", metavar="FILE", help="write results as JSON")
    bench.add_argument("--plot", metavar="FILE", help="write a PNG chart (needs matplotlib)")
    bench.add_argument(
        "--sweep",
        action="store_true",
        help="also run cachepilot at every setting of the sweep grid (fold tail, least fold, "
        "horizon, summary size) next to vanilla and the peers, and print the cost / visible "
        "fidelity frontier and, per source, which setting beats each peer",
    )
    bench.add_argument(
        "--frontier",
        metavar="FILE",
        help="with --sweep: write the frontier chart, one panel per source (PNG, needs matplotlib)",
    )
    bench.add_argument(
        "--holdout",
        action="store_true",
        help="with --sweep: run the sweep in both modes and choose settings leaving one trace "
        "source out: for each source, the cheapest setting whose visible fidelity reaches "
        "--target on every other source in both modes, measured on the source left out "
        "(--json then holds both runs and the held-out results)",
    )
    bench.add_argument(
        "--holdout-from",
        nargs="+",
        metavar="FILE",
        help="the held-out table of sweeps already run: --json files of `bench --sweep` (one "
        "per mode) or of `bench --sweep --holdout`; nothing is replayed",
    )
    bench.add_argument(
        "--target",
        type=float,
        default=None,
        help="with --holdout: visible fidelity every source must keep (default: 0.97)",
    )
    bench.add_argument(
        "--losses",
        metavar="FILE",
        help="explain cachepilot's visible-fidelity losses instead of pricing: for the one "
        "cachepilot setting named with --strategy (default: cachepilot), every needed fact "
        "missing from a view, with its cause (ingest, stub, evict, fold), as JSON lines in "
        "FILE, and the counts per source",
    )
    bench.add_argument(
        "--audit",
        action="store_true",
        help="audit cachepilot's maintenance actions instead of pricing strategies: for each "
        "prune, eviction, argument reduction, fold and refresh, the saving the cost model "
        "predicted against the saving realized over the rest of the session (a replay without "
        "it), the later-used facts it removed, totals per source, kind and population, and "
        "each population's visible fidelity with a bootstrap interval; both modes unless "
        "--mode is given (--strategy: one cachepilot setting, default cachepilot)",
    )
    bench.add_argument(
        "--audit-max-actions",
        type=int,
        default=None,
        metavar="N",
        help="with --audit: counterfactual replays per session at most (default: 24); the "
        "audit costs (2 + actions) replays of each session",
    )
    bench.add_argument("--workers", type=int, default=0, help="processes (default: all cores)")
    bench.add_argument("--encoding", default="o200k_base", help="tiktoken encoding")
    bench.add_argument("--limit", type=int, default=0, help="replay only the first N sessions")
    return _cmd_bench


def register_demo(sub: Any) -> Handler:
    """Add the `demo` subcommand to the core's subparsers; returns its handler."""
    demo = sub.add_parser(
        "demo",
        help="run the built-in demo session through a real agent, with and without cachepilot",
        description="Runs the built-in coding session (two tasks, volatile system prompt, "
        "large reads, logs, HTML) through a real LangChain create_agent agent (ChatOpenAI) "
        "with and without CachePilotMiddleware. The model is the embedded replay provider "
        "(recorded turns, usage from the cache simulator on the bodies the framework sent; "
        "no API key) unless --live is given. Prints a per-call and a total cost table and "
        "writes a PNG chart. --engine bench replays every strategy in the simulator instead.",
    )
    demo.add_argument("--plot", default="cachepilot-demo.png", metavar="FILE")
    demo.add_argument("--provider", default=DEFAULT_PROFILE, choices=sorted(PROFILES))
    demo.add_argument("--json", dest="json_path", metavar="FILE")
    demo.add_argument("--client-marks", **_CLIENT_MARKS)
    demo.add_argument(
        "--engine",
        choices=("agent", "bench"),
        default="agent",
        help="agent: a real create_agent agent (needs cachepilot-langgraph[langchain]); "
        "bench: every strategy in the simulator",
    )
    demo.add_argument(
        "--live",
        action="store_true",
        help="use a real OpenAI-compatible endpoint (OPENAI_API_KEY, optional OPENAI_BASE_URL)",
    )
    demo.add_argument("--model", default="gpt-5.4-mini", help="model name sent to the endpoint")
    return _cmd_demo


def _load_sessions(paths: Sequence[str]) -> tuple[list[Any], int]:
    if not paths:
        from cachepilot_bench.demo_workload import build_demo_session

        return [build_demo_session()], 1
    from cachepilot_bench.traces import load_paths

    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise ValueError(f"no such file or folder: {', '.join(missing)}")
    sessions = load_paths(paths)
    return sessions, len({s.path or s.id for s in sessions})


def _cmd_bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cachepilot_bench.holdout import DEFAULT_TARGET, format_holdout, holdout_json

    target = DEFAULT_TARGET if args.target is None else args.target
    if not 0.0 < target <= 1.0:
        raise ValueError(f"--target must be within (0, 1], got {target}")
    if args.target is not None and not (args.holdout or args.holdout_from):
        raise ValueError("--target is the held-out fidelity target: add --holdout")
    if args.holdout_from:
        docs = _load_sweeps(args.holdout_from)
        out.write(format_holdout(docs, target))
        if args.json_path:
            _write_json(args.json_path, {"holdout": holdout_json(docs, target)}, out)
        return 0
    if args.frontier and not args.sweep:
        raise ValueError("--frontier draws a sweep: add --sweep")
    if args.holdout and not args.sweep:
        raise ValueError("--holdout chooses among the sweep's settings: add --sweep")
    if args.holdout and args.mode is not None:
        raise ValueError("--holdout runs the sweep in both modes: leave out --mode")
    if args.holdout and args.plot:
        raise ValueError("--plot draws one run: leave it out with --holdout")
    if args.audit_max_actions is not None and not args.audit:
        raise ValueError("--audit-max-actions bounds the audit: add --audit")
    if args.audit:
        return _cmd_audit(args, out, err)
    if args.losses:
        return _cmd_losses(args, out, err)
    modes = ["isolated", "continuous"] if args.holdout else [args.mode or "isolated"]
    runs: dict[str, dict[str, Any]] = {}
    for mode in modes:
        doc = _bench_run(args, mode, out, err)
        if doc is None:
            return 2
        runs[mode] = doc
    if not args.holdout:
        if args.json_path:
            _write_json(args.json_path, runs[modes[0]], out)
        return 0
    out.write("\n" + format_holdout(runs, target))
    if args.json_path:
        _write_json(args.json_path, {"modes": runs, "holdout": holdout_json(runs, target)}, out)
    return 0


def _write_json(path: str, doc: dict[str, Any], out: TextIO) -> None:
    Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    out.write(f"wrote {path}\n")


def _load_sweeps(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Mode → sweep document, from `bench --sweep --json` files (one per mode) or a
    `bench --sweep --holdout --json` file."""
    docs: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a bench --json document")
        found = data.get("modes") if "modes" in data else {data.get("mode"): data}
        if not isinstance(found, dict):
            raise ValueError(f"{path}: not a bench --json document")
        for mode, doc in found.items():
            if not isinstance(doc, dict) or "per_source" not in doc or "strategies" not in doc:
                raise ValueError(f"{path}: not a bench --json document")
            if mode in docs:
                raise ValueError(f"{path}: a second {mode} run (give one per mode)")
            docs[str(mode)] = doc
    return docs


def _bench_run(
    args: argparse.Namespace, mode: str, out: TextIO, err: TextIO
) -> dict[str, Any] | None:
    """One bench run (a sweep with --sweep) in `mode`: prints its table and, for a sweep,
    the frontier; returns its JSON document (None: nothing to replay)."""
    from cachepilot_bench import ALL_STRATEGIES, run_bench
    from cachepilot_bench.console import ProgressReporter, write_bench_table
    from cachepilot_bench.populations import per_group
    from cachepilot_bench.report import summarize

    config = _config(args, mode)
    names = args.strategies or list(ALL_STRATEGIES)
    if args.sweep:
        from cachepilot_bench import variants
        from cachepilot_bench.registry import PEER_STRATEGIES

        base = args.strategies or ["vanilla", *PEER_STRATEGIES]
        grid = variants.sweep_names(variants.SWEEP_GRID)
        names = list(dict.fromkeys(["vanilla", *base, *grid]))
    sessions, traces, groups = _sessions(args, config, err)
    if not sessions:
        return None
    started = time.monotonic()
    with ProgressReporter(err, what=f"{len(sessions)} sessions") as progress:
        results = run_bench(sessions, names, config, progress=progress)
    wall = time.monotonic() - started
    doc = summarize(results, config, traces=traces, wall_seconds=wall)
    doc["per_group"] = per_group(results, groups)
    write_bench_table(doc, out)
    if args.sweep:
        from cachepilot_bench.frontier import format_frontier

        out.write("\n" + format_frontier(doc))
    if args.frontier:
        from cachepilot_bench.frontier import write_frontier_plot

        path = Path(args.frontier)
        if args.holdout:
            path = path.with_name(f"{path.stem}-{mode}{path.suffix}")
        write_frontier_plot(
            doc, path, title=f"cachepilot settings and peers · {config.provider} · {mode}"
        )
        out.write(f"wrote {path}\n")
    if args.plot:
        from cachepilot_bench.plot import write_plot

        write_plot(results, args.plot, title=f"cachepilot bench · {config.provider}")
        out.write(f"wrote {args.plot}\n")
    return doc


def _config(args: argparse.Namespace, mode: str) -> Any:
    from cachepilot_bench import BenchConfig

    return BenchConfig(
        provider=args.provider,
        mode=mode,  # type: ignore[arg-type]  # argparse choices
        chain=args.chain,
        workers=args.workers,
        encoding=args.encoding,
        client_marks=args.client_marks,
    )


def _sessions(
    args: argparse.Namespace, config: Any, err: TextIO
) -> tuple[list[Any], int, dict[str, str]]:
    """The sessions of the run as its mode wants them, `--limit` applied (empty: told), and
    each one's population (`populations.population`; a chain: its traces' majority)."""
    from cachepilot_bench import prepare_sessions
    from cachepilot_bench.populations import chained_groups, population

    if args.limit < 0:
        raise ValueError("--limit must be >= 0 (0: every session)")
    loaded, traces = _load_sessions(args.traces)
    members = {s.id: population(s) for s in loaded}
    sessions = prepare_sessions(loaded, config)
    if args.limit:
        sessions = sessions[: args.limit]
    if not sessions:
        err.write("no sessions to replay (no trace found or every file was skipped)\n")
    return sessions, traces, chained_groups(sessions, members)


def _cmd_losses(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cachepilot_bench.console import ProgressReporter
    from cachepilot_bench.losses import explain_sessions, format_losses, write_losses

    if args.sweep or args.json_path or args.plot:
        raise ValueError("--losses explains one setting: leave out --sweep, --json and --plot")
    names = args.strategies or ["cachepilot"]
    if len(names) != 1:
        raise ValueError("--losses explains one setting: name at most one --strategy")
    config = _config(args, args.mode or "isolated")
    sessions, _, _ = _sessions(args, config, err)
    if not sessions:
        return 2
    with ProgressReporter(err, what=f"{len(sessions)} sessions") as progress:
        losses, needed = explain_sessions(sessions, names[0], config, progress=progress)
    with open(args.losses, "w", encoding="utf-8") as handle:
        count = write_losses(losses, handle)
    out.write(format_losses(losses, needed, name=names[0]))
    out.write(f"wrote {count} losses to {args.losses}\n")
    return 0


def _cmd_audit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cachepilot_bench.audit import DEFAULT_MAX_ACTIONS, audit_strategy, run_audit
    from cachepilot_bench.audit_report import audit_doc, format_audit
    from cachepilot_bench.console import ProgressReporter

    if args.sweep or args.holdout or args.losses or args.plot:
        raise ValueError("--audit runs on its own: leave out --sweep, --holdout, --losses, --plot")
    names = args.strategies or ["cachepilot"]
    if len(names) != 1:
        raise ValueError("--audit audits one setting: name at most one --strategy")
    audit_strategy(names[0])
    limit = DEFAULT_MAX_ACTIONS if args.audit_max_actions is None else args.audit_max_actions
    if limit < 1:
        raise ValueError("--audit-max-actions must be >= 1")
    modes = [args.mode] if args.mode else ["isolated", "continuous"]
    docs: dict[str, dict[str, Any]] = {}
    for mode in modes:
        config = _config(args, mode)
        sessions, _, groups = _sessions(args, config, err)
        if not sessions:
            return 2
        started = time.monotonic()
        with ProgressReporter(err, what=f"audit {mode}: {len(sessions)} sessions") as progress:
            audits = run_audit(
                sessions,
                config,
                name=names[0],
                max_actions=limit,
                groups=groups,
                progress=progress,
            )
        doc = audit_doc(
            audits,
            config,
            strategy=names[0],
            max_actions=limit,
            wall_seconds=time.monotonic() - started,
        )
        out.write(format_audit(doc) + "\n")
        docs[mode] = doc
    if args.json_path:
        _write_json(args.json_path, {"audit": docs}, out)
    return 0


PER_CALL_COLUMNS = (
    "vanilla",
    "lc-clear-tool-uses-scaled",
    "lc-summarization",
    "agents-trimmer",
    "cachepilot",
)


def _cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.engine == "agent" or args.live:
        try:
            from cachepilot_bench.frameworks.langgraph_demo import (
                format_report,
                run_demo,
                write_chart,
            )
        except ImportError as exc:
            if args.live:
                err.write(f"--live needs cachepilot-langgraph[langchain]: {exc}\n")
                return 2
            err.write(
                f"the agent demo needs cachepilot-langgraph[langchain] ({exc}); "
                "running the simulator demo instead\n"
            )
        else:
            try:
                report = run_demo(
                    provider_profile=args.provider,
                    live=args.live,
                    model=args.model,
                    client_marks=args.client_marks,
                )
            except ValueError as exc:
                err.write(f"{exc}\n")
                return 2
            out.write(format_report(report) + "\n")
            if args.json_path:
                Path(args.json_path).write_text(
                    json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8"
                )
                out.write(f"wrote {args.json_path}\n")
            try:
                write_chart(report, args.plot)
                out.write(f"wrote {args.plot}\n")
            except ValueError as exc:
                err.write(f"no chart: {exc}\n")
            return 0
    return _cmd_demo_bench(args, out, err)


def _cmd_demo_bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cachepilot_bench import ALL_STRATEGIES, BenchConfig, run_bench
    from cachepilot_bench.console import write_bench_table
    from cachepilot_bench.demo_workload import build_demo_session
    from cachepilot_bench.plot import write_plot
    from cachepilot_bench.report import summarize

    session = build_demo_session()
    config = BenchConfig(provider=args.provider, workers=1, client_marks=args.client_marks)
    results = run_bench([session], list(ALL_STRATEGIES), config)
    by_name = {r.strategy: r for r in results}
    # The per-call table shows the reference, the peers that changed anything, and cachepilot;
    # every strategy (ablations included) is in the totals table below.
    names = [n for n in PER_CALL_COLUMNS if n in by_name]
    marks = ", agent's own cache marks: none" if config.client_marks == "none" else ""
    out.write(
        f"built-in demo session: {session.id}, simulated provider {config.provider}{marks}\n\n"
    )
    head = f"{'call':>4} " + " ".join(f"{n[:16]:>16}" for n in names)
    out.write("input cost per call, USD\n" + head + "\n")
    per_call: dict[str, dict[int, float]] = {}
    for name, r in by_name.items():
        bucket: dict[int, float] = {}
        for c in r.calls:
            bucket[c.call_number] = bucket.get(c.call_number, 0.0) + c.input_cost_usd
        per_call[name] = bucket
    calls = max((len(b) for b in per_call.values()), default=0)
    for i in range(calls):
        row = " ".join(f"{per_call[n].get(i, 0.0):>16.5f}" for n in names)
        out.write(f"{i:>4} {row}\n")
    totals = " ".join(f"{sum(per_call[n].values()):>16.5f}" for n in names)
    out.write(f"{'sum':>4} {totals}\n")
    doc = summarize(results, config, traces=1)
    out.write("\n")
    write_bench_table(doc, out)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        out.write(f"wrote {args.json_path}\n")
    try:
        write_plot(results, args.plot, title="cachepilot demo · " + config.provider)
        out.write(f"wrote {args.plot}\n")
    except ValueError as exc:
        err.write(f"no chart: {exc}\n")
    return 0

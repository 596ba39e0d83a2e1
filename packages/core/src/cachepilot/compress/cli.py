"""`cachepilot optimize-guideline`: improve a compression guideline from paired runs.

    cachepilot optimize-guideline runs.jsonl --out swe-observation.json \\
        --target observation --environment swe --model gpt-5.4

The optimizer (and, unless `--compressor-model` names another, the compressor used for
scoring) is any OpenAI-compatible Chat Completions endpoint: `--base-url` (default: the
`openai` client's, i.e. `$OPENAI_BASE_URL` or api.openai.com) with `$OPENAI_API_KEY`. From
Python, `optimize_guideline` takes any LangChain chat model as well.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from cachepilot.compress.guideline import load_guideline
from cachepilot.compress.optimize import OptimizeConfig, load_trajectories, optimize_guideline

__all__ = ["add_optimize_parser", "cmd_optimize"]


def add_optimize_parser(sub: Any) -> None:
    """Register the `optimize-guideline` subcommand on an argparse subparsers object."""
    parser = sub.add_parser(
        "optimize-guideline",
        help="improve a compression guideline from paired runs (full vs compressed context)",
        description="Reads JSONL trajectories (task_id, variant full|compressed, success, "
        "messages), asks an optimizer model what the compressed context lost on tasks it "
        "failed, scores candidate guidelines on held-out pairs, then asks for a more "
        "concise one on successful compressed runs. Writes a guideline file that "
        "ObservationCompressor and ChatModelSummarizer load.",
    )
    parser.add_argument("trajectories", nargs="+", help="JSONL files of runs")
    parser.add_argument("--out", required=True, metavar="FILE", help="guideline file to write")
    parser.add_argument("--target", choices=["observation", "history"], default="observation")
    parser.add_argument("--environment", default="default", help="name stored in the file")
    parser.add_argument("--initial", metavar="FILE", help="guideline to start from")
    parser.add_argument("--model", required=True, help="optimizer model name")
    parser.add_argument(
        "--compressor-model", help="compressor model for scoring (default: --model)"
    )
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (default: the client's)")
    parser.add_argument("--candidates", type=int, default=2, help="candidates per step")
    parser.add_argument("--rounds", type=int, default=1, help="utility + compression rounds")
    parser.add_argument("--max-cases", type=int, default=8, help="pairs read per step")
    parser.add_argument("--heldout", type=float, default=0.3, help="held-out share of pairs")
    parser.add_argument(
        "--no-compression-step", action="store_true", help="skip the compression step"
    )
    parser.add_argument("--report", metavar="FILE", help="write the step log as JSON")


def _client(base_url: str | None) -> Any:
    try:
        import openai
    except ImportError as exc:  # the core package does not depend on openai
        raise ValueError("optimize-guideline needs the openai package: pip install openai") from exc
    try:
        return openai.OpenAI(base_url=base_url) if base_url else openai.OpenAI()
    except openai.OpenAIError as exc:
        raise ValueError(f"cannot create the OpenAI client: {exc}") from exc


def cmd_optimize(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run the optimization and write the guideline file."""
    config = OptimizeConfig(
        target=args.target,
        environment=args.environment,
        candidates=args.candidates,
        rounds=args.rounds,
        max_cases=args.max_cases,
        heldout_fraction=args.heldout,
        compression_step=not args.no_compression_step,
    )
    initial = load_guideline(args.initial, args.target) if args.initial else None
    runs = load_trajectories(args.trajectories)
    client = _client(args.base_url)
    result = optimize_guideline(
        runs,
        client,
        model_name=args.model,
        compressor=client if args.compressor_model else None,
        compressor_model_name=args.compressor_model,
        config=config,
        initial=initial,
    )
    path = result.guideline.save(args.out)
    base, best = result.baseline, result.best
    out.write(
        f"{len(runs)} runs · optimizer calls {result.optimizer_calls} · "
        f"compressor calls {result.compressor_calls}\n"
        f"held-out score {base.score:.4f} → {best.score:.4f} "
        f"(fact retention {base.retention:.3f} → {best.retention:.3f}, "
        f"size ratio {base.ratio:.3f} → {best.ratio:.3f})\n"
        f"wrote {path}\n"
    )
    if args.report:
        with open(args.report, "w", encoding="utf-8") as handle:
            json.dump(result.steps, handle, indent=2)
            handle.write("\n")
    return 0

"""`cachepilot audit FILE`: the subcommand's arguments and handler (wired in `cachepilot.cli`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

__all__ = ["add_audit_parser", "cmd_audit", "parse_rate"]


def parse_rate(text: str) -> float:
    """A hit rate from `0.8` or `80%`.

    Raises:
        ValueError: when it is not a number in [0, 1] (or a percentage in [0, 100]).
    """
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"--fail-under: {text!r} is not a rate (use 0.8 or 80%)") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"--fail-under: {text!r} is outside [0, 1] (use 0.8 or 80%)")
    return value


def add_audit_parser(sub: Any) -> None:
    """Add the `audit` subcommand to the `cachepilot` subparsers."""
    from cachepilot.sim import PROFILES

    audit = sub.add_parser(
        "audit",
        help="per-call cache usage and every prefix break of a cassette or request log",
        description="Read a vcrpy cassette (YAML or JSON) or a JSONL request log of OpenAI "
        "Chat, OpenAI Responses or Anthropic Messages calls, group the calls into threads, "
        "simulate them under a provider profile and explain every cache break with its cause. "
        "Exit status: 0 ok, 1 a --fail-under / --max-breaks check failed, 2 bad input.",
    )
    audit.add_argument(
        "file", metavar="FILE", help="cassette (.yaml/.json) or request log (.jsonl)"
    )
    audit.add_argument(
        "--provider",
        choices=sorted(PROFILES),
        help="provider cache profile (default: anthropic for Anthropic calls, else "
        "openai-gpt-5.4-mini)",
    )
    audit.add_argument(
        "--json", dest="json_path", metavar="FILE", help="write the report as JSON ('-': stdout)"
    )
    audit.add_argument(
        "--fail-under",
        metavar="HIT_RATE",
        help="exit 1 when the hit rate is below this (0.8 or 80%%)",
    )
    audit.add_argument(
        "--basis",
        choices=["simulated", "recorded"],
        default="simulated",
        help="hit rate --fail-under checks: simulated under the profile (default) or as the "
        "provider recorded it",
    )
    audit.add_argument(
        "--max-breaks",
        type=int,
        metavar="N",
        help="exit 1 when more than N prefix breaks (changes of the request itself) occur",
    )
    audit.add_argument(
        "--hidden-prefix",
        default="auto",
        metavar="TOKENS",
        help="opaque prompt tokens before every request (default: auto, from recorded usage)",
    )
    audit.add_argument(
        "--breaks-only", action="store_true", help="print the breaks, not every call"
    )


def cmd_audit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run `cachepilot audit`; returns the exit status."""
    from cachepilot.audit import audit_file, format_report

    threshold = parse_rate(args.fail_under) if args.fail_under is not None else None
    if args.max_breaks is not None and args.max_breaks < 0:
        raise ValueError("--max-breaks must be >= 0")
    hidden: int | None = None
    if str(args.hidden_prefix).lower() != "auto":
        try:
            hidden = int(args.hidden_prefix)
        except ValueError:
            raise ValueError("--hidden-prefix must be 'auto' or a number of tokens") from None
        if hidden < 0:
            raise ValueError("--hidden-prefix must be >= 0")
    report = audit_file(args.file, provider=args.provider, hidden_prefix_tokens=hidden)
    doc = report.to_dict()
    if args.json_path == "-":
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.write(format_report(report, calls=not args.breaks_only) + "\n")
        if args.json_path:
            Path(args.json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            out.write(f"wrote {args.json_path}\n")
    totals = doc["totals"]
    status = 0
    if threshold is not None:
        rate = totals["hit_rate"] if args.basis == "simulated" else totals["recorded_hit_rate"]
        if rate is None:
            raise ValueError("--basis recorded: the file holds no recorded usage")
        if rate < threshold:
            err.write(
                f"cachepilot audit: {args.basis} hit rate {rate:.1%} is below {threshold:.1%}\n"
            )
            status = 1
    if args.max_breaks is not None and totals["prefix_breaks"] > args.max_breaks:
        err.write(
            f"cachepilot audit: {totals['prefix_breaks']} prefix break(s), more than "
            f"{args.max_breaks} allowed\n"
        )
        status = 1
    return status

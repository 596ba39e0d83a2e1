"""The `cachepilot` command (DESIGN §8).

The product's subcommands (`audit`, `inspect`, `optimize-guideline`, `proxy`) live here; others
register through `cachepilot.cli` entry points: `cachepilot-bench` adds `bench` and `demo`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, TextIO

__all__ = ["CLI_ENTRY_POINTS", "Handler", "main"]

logger = logging.getLogger("cachepilot.cli")

_CORE_COMMANDS = frozenset({"audit", "forget", "inspect", "optimize-guideline", "proxy"})

Handler = Callable[[argparse.Namespace, TextIO, TextIO], int]
"""A subcommand's handler: parsed arguments, stdout, stderr -> exit status."""

CLI_ENTRY_POINTS = "cachepilot.cli"
"""Entry-point group of subcommands other packages add: each entry point is named after its
subcommand and is a callable `register(subparsers) -> Handler`."""

_MEASUREMENT_COMMANDS = {
    "bench": "replay traces through context-management strategies and price them",
    "demo": "run the built-in demo session through a real agent, with and without cachepilot",
}
"""Subcommands `cachepilot-bench` provides; without it they say how to get them."""


def _missing(name: str) -> Handler:
    def handler(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
        err.write(
            f"cachepilot {name} is part of the measurement package: install cachepilot-bench "
            "(pip install cachepilot-bench)\n"
        )
        return 2

    return handler


def _plugin_commands(sub: Any) -> dict[str, Handler]:
    """Subcommands registered through `cachepilot.cli` entry points (the bench's)."""
    handlers: dict[str, Handler] = {}
    for entry in sorted(entry_points(group=CLI_ENTRY_POINTS), key=lambda e: e.name):
        if entry.name in handlers or entry.name in _CORE_COMMANDS:
            logger.warning("ignoring a second %r subcommand from %s", entry.name, entry.value)
            continue
        try:
            register = entry.load()
        except ImportError as exc:
            logger.warning("cannot load the %r subcommand (%s): %s", entry.name, entry.value, exc)
            continue
        handlers[entry.name] = register(sub)
    for name, help_text in _MEASUREMENT_COMMANDS.items():
        if name not in handlers:
            stub = sub.add_parser(
                name, help=f"{help_text} (needs cachepilot-bench)", add_help=False
            )
            stub.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            handlers[name] = _missing(name)
    return handlers


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(
        prog="cachepilot",
        description="Cache-aware context management for LLM agents.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True)

    handlers = _plugin_commands(sub)
    from cachepilot.audit.cli import add_audit_parser, cmd_audit
    from cachepilot.compress.cli import add_optimize_parser, cmd_optimize
    from cachepilot.diagnose.inspect import add_inspect_parser, cmd_inspect
    from cachepilot.proxy.cli import add_forget_parser, add_proxy_parser, cmd_forget, cmd_proxy

    add_audit_parser(sub)
    add_inspect_parser(sub)
    add_optimize_parser(sub)
    add_proxy_parser(sub)
    add_forget_parser(sub)
    handlers.update(
        {
            "audit": cmd_audit,
            "forget": cmd_forget,
            "inspect": cmd_inspect,
            "optimize-guideline": cmd_optimize,
            "proxy": cmd_proxy,
        }
    )
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `cachepilot` command."""
    parser, handlers = _build_parser()
    args = parser.parse_args(argv)
    from cachepilot.support.redact import install_logging, redact

    # No credential shape reaches the terminal.
    install_logging(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return handlers[args.command](args, sys.stdout, sys.stderr)
    except ValueError as exc:
        sys.stderr.write(f"cachepilot {args.command}: {redact(str(exc))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

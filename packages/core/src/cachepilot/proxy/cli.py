"""`cachepilot proxy`: the command that runs the proxy."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "STORE_ENV",
    "add_forget_parser",
    "add_proxy_parser",
    "cmd_forget",
    "cmd_proxy",
    "store_setting",
]

STORE_ENV = "CACHEPILOT_STORE"
"""The environment variable `--store` defaults to (`proxy` and `forget`)."""

_DESCRIPTION = """\
Run an HTTP proxy that gives any agent cachepilot's savings without code changes: point the
agent's OpenAI, Anthropic or Gemini client at it (base_url http://HOST:PORT/v1; Anthropic
and Gemini clients: http://HOST:PORT). It forwards OpenAI Chat Completions
(/v1/chat/completions), OpenAI Responses (/v1/responses), Anthropic Messages (/v1/messages)
and Gemini generateContent (/v1beta/models/MODEL:generateContent,
:streamGenerateContent?alt=sse, and the Vertex paths), streaming or not, to --upstream,
after: showing each tool result as its reduced view (originals archived, the same text on
every request), canonicalizing the system prompt, applying the thread's maintenance plan,
adding a `recall` tool that the proxy answers itself (the client never sees it), and, for
Anthropic, adding cache_control breakpoints where they pay. Other paths are forwarded
unchanged. Auth headers pass through untouched and are never logged or stored; usage
returned to the client is the upstream's.

Threads: the X-CachePilot-Thread header, else a thread key in the body (metadata session
ids, prompt_cache_key, metadata.user_id, user) with the system prompt, else a digest of the
system prompt and first user message (clients sending the same ones share a thread: send
the header for multi-tenant use). Threads are scoped by a digest of the API key unless
--no-key-scope.
"""


def add_proxy_parser(sub: Any) -> None:
    """Add the `proxy` subcommand."""
    from cachepilot.proxy.config import DEFAULT_THREAD_HEADER
    from cachepilot.sim import DEFAULT_PROFILE, PROFILES

    p = sub.add_parser(
        "proxy",
        help="an HTTP proxy giving any agent (OpenAI, Anthropic or Gemini client) cachepilot's "
        "savings",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--upstream",
        required=True,
        metavar="URL",
        help="provider base URL, e.g. https://api.openai.com, https://api.anthropic.com or "
        "https://generativelanguage.googleapis.com",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--port", type=int, default=8787, help="port to listen on (default 8787)")
    p.add_argument(
        "--provider",
        default=DEFAULT_PROFILE,
        choices=sorted(PROFILES),
        metavar="PROFILE",
        help=f"provider cache profile for the cost model and metrics (default {DEFAULT_PROFILE}; "
        "use anthropic or anthropic-1h for Claude)",
    )
    p.add_argument(
        "--store",
        metavar="PATH|URL",
        help="where archived originals and thread states are kept: an SQLite file (inspect it "
        "with `cachepilot inspect PATH --store PATH`), a postgresql:// or a redis:// URL; "
        "processes that "
        "share it (--workers, replicas) agree on every thread; default: $CACHEPILOT_STORE, "
        "else originals in the per-user archive, states in memory. A URL with a password "
        "is better given in $CACHEPILOT_STORE or --store-file (a command line is visible to "
        "every user of the machine)",
    )
    _store_file_option(p)
    p.add_argument(
        "--thread-header",
        default=DEFAULT_THREAD_HEADER,
        metavar="NAME",
        help=f"request header naming the thread (default {DEFAULT_THREAD_HEADER})",
    )
    p.add_argument(
        "--no-key-scope",
        action="store_true",
        help="let requests under different API keys share threads",
    )
    p.add_argument(
        "--no-recall", action="store_true", help="offer no recall tool (and reduce nothing)"
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="upstream timeout in seconds (default 600)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve with N processes on one port (needs --store, which they share; default 1)",
    )
    p.add_argument(
        "--no-fold-ahead",
        action="store_true",
        help="compute folds on the request path only, nothing ahead in the background (same bytes)",
    )
    p.add_argument("--no-metrics", action="store_true", help="do not serve GET /metrics")
    p.add_argument(
        "--metrics-per-thread",
        action="store_true",
        help="list each thread's totals in /metrics too (labelled by a salted digest)",
    )
    p.add_argument(
        "--metrics-token",
        metavar="TOKEN",
        default=os.environ.get("CACHEPILOT_METRICS_TOKEN"),
        help="answer /metrics only with 'Authorization: Bearer TOKEN' (default: "
        "$CACHEPILOT_METRICS_TOKEN; none)",
    )
    p.add_argument(
        "--metrics-token-file",
        metavar="PATH",
        help="read the /metrics token from this file (its first line)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a Host header value /metrics answers (repeatable; default: the bound address, "
        "and localhost names on loopback)",
    )
    p.add_argument(
        "--check-host",
        action="store_true",
        help="check the Host header (as for /metrics) on every route, not only /metrics",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=256 * 1024 * 1024,
        metavar="N",
        help="largest request body read (413 above; default 256 MiB)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds a request's line and headers may take (408; default 10)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a request body may take (408; default 300; a pause of 30 s, or of S "
        "when shorter, is answered 408 too)",
    )


def _store_file_option(p: Any) -> None:
    p.add_argument(
        "--store-file",
        metavar="PATH",
        help="read --store from this file (its first line), e.g. a URL with a password",
    )


def _first_line(path: str, what: str) -> str:
    """The first line of a settings file (ValueError when missing or empty)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {what} from {path}: {exc.strerror}") from None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not line:
        raise ValueError(f"{path} holds no {what}")
    return line


def store_setting(args: argparse.Namespace) -> str | None:
    """--store, else --store-file's first line, else $CACHEPILOT_STORE (None: none)."""
    if args.store and getattr(args, "store_file", None):
        raise ValueError("give --store or --store-file, not both")
    if args.store:
        return str(args.store)
    if getattr(args, "store_file", None):
        return _first_line(args.store_file, "a store path or URL")
    return os.environ.get(STORE_ENV) or None


def cmd_proxy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run `cachepilot proxy` until interrupted; returns the exit status."""
    try:
        import httpx  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        err.write(
            f"cachepilot proxy needs the proxy extra: pip install 'cachepilot[proxy]' ({exc})\n"
        )
        return 2
    from cachepilot.proxy.app import serve
    from cachepilot.proxy.config import ProxyConfig

    token = args.metrics_token or None
    if args.metrics_token_file:
        token = _first_line(args.metrics_token_file, "a metrics token")
    config = ProxyConfig(
        upstream=args.upstream,
        host=args.host,
        port=args.port,
        provider=args.provider,
        store=store_setting(args),
        thread_header=args.thread_header,
        key_scope=not args.no_key_scope,
        recall=not args.no_recall,
        timeout=args.timeout,
        fold_ahead=not args.no_fold_ahead,
        metrics=not args.no_metrics,
        metrics_per_thread=args.metrics_per_thread,
        metrics_token=token,
        allowed_hosts=tuple(args.allowed_host),
        check_host=args.check_host,
        max_body_bytes=args.max_body_bytes,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        body_idle_timeout=min(30.0, args.body_timeout),
    )
    out.write(
        f"cachepilot proxy on http://{config.host}:{config.port} -> {config.upstream} "
        f"(provider profile {config.provider})\n"
    )
    out.flush()
    if args.workers > 1 and config.store is None:
        raise ValueError("--workers needs --store: the worker processes share threads through it")
    serve(config, workers=args.workers)
    return 0


def add_forget_parser(sub: Any) -> None:
    """Add the `forget` subcommand (a thread of a proxy's `--store`)."""
    p = sub.add_parser(
        "forget",
        help="forget a thread of a proxy's --store: its state and archived originals",
        description="Remove one thread from a proxy's --store: its stored state and every "
        "archived original (a later recall of one of its refs answers that it was removed). "
        "THREAD is the X-CachePilot-Thread value the client sent; with the proxy's key scope "
        "(the default) name the API key through --api-key-env so the scoped name can be "
        "derived with the store's secret, or pass the name `cachepilot inspect` lists with "
        "--stored-name.",
    )
    p.add_argument("thread", metavar="THREAD", help="the thread header value (or stored name)")
    p.add_argument(
        "--store", metavar="PATH|URL", help="the proxy's --store (default: $CACHEPILOT_STORE)"
    )
    _store_file_option(p)
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key the thread was scoped to",
    )
    p.add_argument(
        "--stored-name", action="store_true", help="THREAD is the stored name, as listed"
    )


def cmd_forget(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run `cachepilot forget`; returns the exit status."""
    import asyncio

    from cachepilot.pilot.facade import CachePilot
    from cachepilot.proxy.families import forget_member
    from cachepilot.proxy.memory import family_of
    from cachepilot.proxy.secret import SecretUnavailableError, load_secret
    from cachepilot.proxy.stores import is_url, open_stores
    from cachepilot.proxy.threads import key_scope

    store = store_setting(args)
    if store is None:
        raise ValueError(f"name the proxy's store: --store, --store-file or ${STORE_ENV}")
    if not is_url(store) and not Path(store).is_file():
        raise ValueError(f"no such store: {store}")
    artifacts, states = open_stores(store)
    key = None
    if not args.stored_name and args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(f"${args.api_key_env} is not set")

    async def forget() -> bool:
        try:
            return await forget_thread()
        finally:
            close = getattr(states, "aclose", None)
            if close is not None:
                await close()

    async def forget_thread() -> bool:
        name = str(args.thread)
        if key is not None:
            try:
                secret = await load_secret(states)
            except SecretUnavailableError as exc:
                raise ValueError(f"{exc}: nothing was removed") from exc
            name = f"{key_scope({'x-api-key': key}, secret)}/{name}"
        saved = await states.load(name)
        if not (saved is not None or await artifacts.alist(name)):
            return False
        await CachePilot(store=artifacts).aforget(name)
        family = family_of(saved)
        if family is not None:  # the family document keeps the thread's system prompt
            await forget_member(states, family, name)
        await states.delete(name)
        return True

    try:
        found = asyncio.run(forget())
    finally:
        artifacts.close()
    if not found:
        err.write("cachepilot forget: the store holds no such thread\n")
        return 1
    out.write("forgot the thread: its state and archived originals are removed\n")
    return 0

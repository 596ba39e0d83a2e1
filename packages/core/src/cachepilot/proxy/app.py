"""The ASGI app (Starlette) around `ProxyEngine`, and the server that runs it (uvicorn).

Routes: every path is proxied (`ProxyEngine.handle`); `GET /metrics` (when enabled) answers
the totals in the Prometheus text format (`cachepilot.proxy.prometheus`) to requests whose
`Host` is the proxy's own (a web page that reaches a loopback port through DNS rebinding
sends its own host name) and, with a token configured, that carry it; `GET /healthz` answers
`ok`. With `check_host` every route checks the `Host` header (421 otherwise). Request bodies
are read within the limits of `cachepilot.proxy.limits` (413, 408); request line and headers
within `header_timeout` (`cachepilot.proxy.http_protocol`). Request bodies and headers are
never logged.

With several workers (`serve(workers=N)`) each worker process logs through the same
redacting formatter as the `cachepilot` command (level, logger name, credential shapes
removed), and they count `/metrics` together (`cachepilot.proxy.shared_metrics`).
"""

from __future__ import annotations

import contextlib
import gc
import hmac
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from cachepilot.proxy.config import ProxyConfig
from cachepilot.proxy.engine import ProxyEngine
from cachepilot.proxy.limits import BodyRefusedError, read_body
from cachepilot.proxy.prometheus import CONTENT_TYPE, ProxyMetrics
from cachepilot.proxy.secret import SecretUnavailableError
from cachepilot.proxy.shared_metrics import SharedCounters

__all__ = ["create_app", "create_app_from_env", "serve"]

logger = logging.getLogger(__name__)

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

_CONFIG_ENV = "CACHEPILOT_PROXY_CONFIG"
"""How `serve` hands the settings to its worker processes (JSON of `ProxyConfig.to_json`)."""
_LOG_LEVEL_ENV = "CACHEPILOT_PROXY_LOG_LEVEL"
"""The log level `serve` hands its worker processes (the `cachepilot` command's)."""
_METRICS_ENV = "CACHEPILOT_PROXY_METRICS_FILE"
"""The counters file `serve` makes for its worker processes to share."""

Handler = Callable[[Request], Awaitable[Response]]


def _host_checked(config: ProxyConfig, handler: Handler) -> Handler:
    async def checked(request: Request) -> Response:
        if not config.metrics_host_allowed(request.headers.get("host", "")):
            return PlainTextResponse("unknown host (see --allowed-host)", status_code=421)
        return await handler(request)

    return checked


def create_app(engine: ProxyEngine) -> Starlette:
    """The proxy as an ASGI app."""
    config = engine.config

    async def proxy(request: Request) -> Response:
        try:
            raw = await read_body(
                request.stream(),
                declared=request.headers.get("content-length"),
                max_bytes=config.max_body_bytes,
                idle=config.body_idle_timeout,
                total=config.body_timeout,
            )
        except BodyRefusedError as refused:
            logger.info("refused a request body (%d): %s", refused.status, refused.message)
            return PlainTextResponse(
                refused.message, status_code=refused.status, headers={"connection": "close"}
            )
        answer = await engine.handle(
            request.method, request.url.path, request.url.query, dict(request.headers), raw
        )
        if answer.stream is not None:
            return StreamingResponse(answer.stream, answer.status, headers=answer.headers)
        return Response(answer.body, answer.status, headers=answer.headers)

    token = config.metrics_token

    async def metrics(request: Request) -> Response:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return PlainTextResponse(
                    "unauthorized", status_code=401, headers={"www-authenticate": "Bearer"}
                )
        try:
            await engine.secret()  # labels need the store's secret
        except SecretUnavailableError:
            return PlainTextResponse("the proxy's state store is unavailable", status_code=503)
        text = engine.metrics.render(
            provider=config.provider,
            label=engine.label,
            threads_in_memory=len(engine.threads.names()),
        )
        return Response(text, media_type=CONTENT_TYPE)

    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if engine.config.store is not None:
            await engine.check_store()  # logs a clear line when it cannot be reached
        try:
            yield
        finally:
            await engine.aclose()

    def route(handler: Handler, always: bool = False) -> Handler:
        return _host_checked(config, handler) if always or config.check_host else handler

    routes = [Route("/healthz", route(health), methods=["GET"])]
    if config.metrics:
        routes.append(Route("/metrics", route(metrics, always=True), methods=["GET"]))
    routes.append(Route("/{path:path}", route(proxy), methods=_METHODS))
    return Starlette(routes=routes, lifespan=lifespan)


def _settle_heap() -> None:
    """Move what the server process holds at start (modules, classes, the engine) out of the
    garbage collector's reach: a full collection walks every tracked object, and one that
    walks the startup heap too stalls every request in flight (tens of milliseconds at
    300 KB sessions, docs/operations.md). Only the server's own process calls it (`serve`
    unfreezes when the server stops): a library host's collector is its own business."""
    gc.collect()
    gc.freeze()


def create_app_from_env() -> Starlette:
    """The app of one worker process of `serve(config, workers=N)` (a uvicorn factory): it
    logs as the `cachepilot` command does and counts `/metrics` with the other workers."""
    from cachepilot.proxy.http_protocol import HeaderTimeoutProtocol
    from cachepilot.support.redact import install_logging

    install_logging(int(os.environ.get(_LOG_LEVEL_ENV, str(logging.WARNING))))
    config = ProxyConfig.from_json(os.environ[_CONFIG_ENV])
    HeaderTimeoutProtocol.header_timeout = config.header_timeout
    shared = os.environ.get(_METRICS_ENV)
    metrics = None
    if shared:
        counters = SharedCounters(shared)
        metrics = ProxyMetrics(per_thread=config.metrics_per_thread, shared=counters)
    app = create_app(ProxyEngine(config, metrics=metrics))
    _settle_heap()
    return app


def serve(config: ProxyConfig, engine: ProxyEngine | None = None, workers: int = 1) -> None:
    """Run the proxy until interrupted (uvicorn).

    With `workers` > 1, that many processes serve one port; they share threads through
    `config.store` (required: each request is prepared over the thread's newest stored state
    and saved by compare-and-set, so any worker sends what one process would) and their
    `/metrics` counters through a file of the run's own (removed when the server stops).
    """
    import uvicorn

    from cachepilot.proxy.http_protocol import HeaderTimeoutProtocol

    if workers < 1:
        raise ValueError(f"--workers must be >= 1, not {workers}")
    HeaderTimeoutProtocol.header_timeout = config.header_timeout
    options: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "log_level": "warning",
        "access_log": False,
        "log_config": None,  # uvicorn's lines go through the root logger's redacting handler
        "http": HeaderTimeoutProtocol,
    }
    if workers == 1:
        app = create_app(engine or ProxyEngine(config))
        host_froze = gc.get_freeze_count() > 0
        _settle_heap()
        try:
            uvicorn.run(app, **options)
        finally:
            # A host that called `serve` with its own engine lives on: what it frees later is
            # the collector's again (unless it had frozen its heap itself: that stays).
            if not host_froze:
                gc.unfreeze()
        return
    if engine is not None:
        raise ValueError("an engine object cannot be shared by several worker processes")
    if config.store is None:
        raise ValueError("--workers needs --store: the worker processes share threads through it")
    run_dir = Path(tempfile.mkdtemp(prefix="cachepilot-proxy-"))
    try:
        counters = run_dir / "metrics.sqlite"
        SharedCounters(counters, worker="server").close()  # made once, before the workers
        os.environ[_CONFIG_ENV] = config.to_json()
        os.environ[_METRICS_ENV] = str(counters)
        os.environ[_LOG_LEVEL_ENV] = str(logging.getLogger().getEffectiveLevel())
        uvicorn.run(
            "cachepilot.proxy.app:create_app_from_env", factory=True, workers=workers, **options
        )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

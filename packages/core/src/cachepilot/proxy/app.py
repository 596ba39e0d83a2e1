"""The ASGI app (Starlette) around `ProxyEngine`, and the server that runs it (uvicorn).

Routes: every path is proxied (`ProxyEngine.handle`); `GET /metrics` (when enabled) answers
the totals in the Prometheus text format (`cachepilot.proxy.prometheus`) to requests whose
`Host` is the proxy's own (a web page that reaches a loopback port through DNS rebinding
sends its own host name) and, with a token configured, that carry it; `GET /healthz` answers
`ok`. Request bodies and headers are never logged.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from cachepilot.proxy.config import ProxyConfig
from cachepilot.proxy.engine import ProxyEngine
from cachepilot.proxy.prometheus import CONTENT_TYPE

__all__ = ["create_app", "serve"]

logger = logging.getLogger(__name__)

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def create_app(engine: ProxyEngine) -> Starlette:
    """The proxy as an ASGI app."""

    async def proxy(request: Request) -> Response:
        raw = await request.body()
        answer = await engine.handle(
            request.method, request.url.path, request.url.query, dict(request.headers), raw
        )
        if answer.stream is not None:
            return StreamingResponse(answer.stream, answer.status, headers=answer.headers)
        return Response(answer.body, answer.status, headers=answer.headers)

    token = engine.config.metrics_token

    async def metrics(request: Request) -> Response:
        if not engine.config.metrics_host_allowed(request.headers.get("host", "")):
            return PlainTextResponse("unknown host (see --allowed-host)", status_code=421)
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return PlainTextResponse(
                    "unauthorized", status_code=401, headers={"www-authenticate": "Bearer"}
                )
        await engine.secret()  # labels need the store's secret
        text = engine.metrics.render(
            provider=engine.config.provider,
            label=engine.label,
            threads_in_memory=len(engine.threads.names()),
        )
        return Response(text, media_type=CONTENT_TYPE)

    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await engine.aclose()

    routes = [Route("/healthz", health, methods=["GET"])]
    if engine.config.metrics:
        routes.append(Route("/metrics", metrics, methods=["GET"]))
    routes.append(Route("/{path:path}", proxy, methods=_METHODS))
    return Starlette(routes=routes, lifespan=lifespan)


_CONFIG_ENV = "CACHEPILOT_PROXY_CONFIG"
"""How `serve` hands the settings to its worker processes (JSON of `ProxyConfig.to_json`)."""


def create_app_from_env() -> Starlette:
    """The app of one worker process of `serve(config, workers=N)` (a uvicorn factory)."""
    return create_app(ProxyEngine(ProxyConfig.from_json(os.environ[_CONFIG_ENV])))


def serve(config: ProxyConfig, engine: ProxyEngine | None = None, workers: int = 1) -> None:
    """Run the proxy until interrupted (uvicorn).

    With `workers` > 1, that many processes serve one port; they share threads through
    `config.store` (required: each request is prepared over the thread's newest stored state
    and saved by compare-and-set, so any worker sends what one process would).
    """
    import uvicorn

    options: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "log_level": "warning",
        "access_log": False,
    }
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, not {workers}")
    if workers == 1:
        uvicorn.run(create_app(engine or ProxyEngine(config)), **options)
        return
    if engine is not None:
        raise ValueError("an engine object cannot be shared by several worker processes")
    if config.store is None:
        raise ValueError("--workers needs --store: the worker processes share threads through it")
    os.environ[_CONFIG_ENV] = config.to_json()
    uvicorn.run(
        "cachepilot.proxy.app:create_app_from_env", factory=True, workers=workers, **options
    )

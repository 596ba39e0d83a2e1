"""The ASGI app (Starlette) around `ProxyEngine`, and the server that runs it (uvicorn).

Routes: every path is proxied (`ProxyEngine.handle`); `GET /metrics` (when enabled) answers
the per-thread totals as JSON, and `GET /healthz` answers `ok`. Request bodies and headers
are never logged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from cachepilot.proxy.config import ProxyConfig
from cachepilot.proxy.engine import ProxyEngine

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

    async def metrics(_: Request) -> Response:
        threads = {t: engine.metrics.thread(t).to_dict() for t in engine.metrics.threads()}
        totals: dict[str, Any] = {}
        for doc in threads.values():
            for key in ("calls", "prompt_tokens", "cached_tokens", "cache_write_tokens",
                        "output_tokens", "cost_usd", "input_cost_usd"):  # fmt: skip
                totals[key] = totals.get(key, 0) + doc[key]
        return JSONResponse(
            {"provider": engine.config.provider, "totals": totals, "threads": threads}
        )

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


def serve(config: ProxyConfig, engine: ProxyEngine | None = None) -> None:
    """Run the proxy until interrupted (uvicorn, one process)."""
    import uvicorn

    app = create_app(engine or ProxyEngine(config))
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False)

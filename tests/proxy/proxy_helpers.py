"""Run the proxy on loopback for tests: a real uvicorn server in a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.proxy import ProxyConfig, ProxyEngine, create_app
from cachepilot.state_store import MemoryStateStore, StateStore


class RunningProxy:
    """A proxy serving on 127.0.0.1 (`base_url`, `engine`)."""

    def __init__(self, engine: ProxyEngine, port: int) -> None:
        self.engine = engine
        self.port = port

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"


@contextmanager
def running_proxy(
    upstream: str,
    *,
    pilot: CachePilot | None = None,
    state_store: StateStore | None = None,
    **settings: Any,
) -> Iterator[RunningProxy]:
    """Serve a proxy for `upstream` until the block ends."""
    config = ProxyConfig(upstream=upstream, port=0, **settings)
    pilot = pilot or CachePilot(Config(provider=config.provider), store=InMemoryArtifactStore())
    engine = ProxyEngine(config, pilot=pilot, state_store=state_store or MemoryStateStore())
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(engine), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the proxy did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield RunningProxy(engine, port)
    finally:
        server.should_exit = True
        thread.join(timeout=10)

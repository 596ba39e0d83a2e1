"""Run the proxy on loopback for tests: a real uvicorn server in a background thread."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.proxy import ProxyConfig, ProxyEngine, create_app
from cachepilot.state.base import MemoryStateStore, StateStore


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


_SAMPLE = re.compile(r'^[a-z_:][a-z0-9_:]*\{[a-z_]+="[^"\n]*"(,[a-z_]+="[^"\n]*")*\} -?[0-9.e+-]+$')


def parse_prometheus(text: str) -> dict[str, list[tuple[str, float]]]:
    """Families of a Prometheus text exposition: name -> [(labels, value)]; fails on any line
    that is neither a HELP/TYPE comment nor a well-formed sample."""
    families: dict[str, list[tuple[str, float]]] = {}
    typed: set[str] = set()
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert kind in {"counter", "gauge"} and (kind != "counter" or name.endswith("_total"))
            typed.add(name)
            continue
        if line.startswith("# HELP "):
            continue
        assert _SAMPLE.match(line), line
        name, rest = line.split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        assert name in typed, f"sample before its TYPE line: {line}"
        families.setdefault(name, []).append((labels, float(value)))
    return families

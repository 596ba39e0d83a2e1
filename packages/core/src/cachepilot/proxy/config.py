"""Settings of the proxy, validated when they are built."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cachepilot.sim import DEFAULT_PROFILE, get_profile

__all__ = ["DEFAULT_THREAD_HEADER", "ProxyConfig"]

DEFAULT_THREAD_HEADER = "x-cachepilot-thread"


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """What `cachepilot proxy` does and where it forwards.

    Attributes:
        upstream: base URL of the provider (`https://api.openai.com`,
            `https://api.anthropic.com`, any compatible endpoint). A request path is appended
            to it; when both end/start with `/v1`, it appears once.
        host: address to listen on (loopback by default: the proxy sees API keys).
        port: port to listen on.
        provider: provider cache profile for the cost model and the metrics.
        store: SQLite file for archived originals and the threads' states (None: originals
            in the per-user default archive, states in memory only).
        thread_header: request header that names the thread explicitly.
        key_scope: prefix every thread with a digest of the request's API key, so two keys
            never share a thread (nor its archive).
        recall: offer the `recall` tool (and reduce tool results) to clients that send tools.
        timeout: seconds to wait for the upstream (connect, each read, each write).
        max_recall_rounds: recall round trips answered per client request.
        metrics: serve `GET /metrics` (per-thread totals as JSON).
        clock: the time source of the cost model (the wall clock; benchmarks replaying
            recorded sessions pass the recording's clock).
    """

    upstream: str
    host: str = "127.0.0.1"
    port: int = 8787
    provider: str = DEFAULT_PROFILE
    store: Path | None = None
    thread_header: str = DEFAULT_THREAD_HEADER
    key_scope: bool = True
    recall: bool = True
    timeout: float = 600.0
    max_recall_rounds: int = 3
    metrics: bool = True
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"--upstream must be an http(s) URL such as https://api.openai.com, "
                f"not {self.upstream!r}"
            )
        if parts.query or parts.fragment:
            raise ValueError("--upstream must not carry a query or a fragment")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, not {self.port}")
        if not self.host:
            raise ValueError("--host must not be empty")
        get_profile(self.provider)
        name = self.thread_header.strip().lower()
        if not name or any(c.isspace() or c == ":" for c in name):
            raise ValueError(f"invalid thread header name {self.thread_header!r}")
        object.__setattr__(self, "thread_header", name)
        if not self.timeout > 0:
            raise ValueError("--timeout must be > 0 seconds")
        if not 0 <= self.max_recall_rounds <= 16:
            raise ValueError("max_recall_rounds must be in 0..16")
        if self.store is not None:
            object.__setattr__(self, "store", Path(self.store))

    def target(self, path: str) -> str:
        """The upstream URL for a request path (`/v1/messages` → `<upstream>/v1/messages`)."""
        base = self.upstream.rstrip("/")
        if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
            path = path[3:]
        return base + path

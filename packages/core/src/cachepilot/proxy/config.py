"""Settings of the proxy, validated when they are built."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cachepilot.proxy.stores import is_url
from cachepilot.sim import DEFAULT_PROFILE, get_profile

__all__ = ["DEFAULT_THREAD_HEADER", "ProxyConfig"]

DEFAULT_THREAD_HEADER = "x-cachepilot-thread"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def _host_name(value: str) -> str:
    """The name part of a `Host` value (`[::1]:8787` -> `::1`, `a.b:80` -> `a.b`)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


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
        store: where archived originals and the threads' states are kept: an SQLite file, or
            a PostgreSQL URL (`cachepilot.proxy.stores`) that several processes share (None:
            originals in the per-user default archive, states in memory only).
        thread_header: request header that names the thread explicitly.
        key_scope: prefix every thread with a digest of the request's API key, so two keys
            never share a thread (nor its archive).
        recall: offer the `recall` tool (and reduce tool results) to clients that send tools.
        timeout: seconds to wait for the upstream (connect, each read, each write).
        max_recall_rounds: recall round trips answered per client request.
        fold_ahead: once a request was prepared, compute what the thread's next maintenance
            point will most likely need in the background (`CachePilot.precompute_soon`, with
            the pilot's `MaintenanceConfig.fold_ahead` on), while the upstream answers; the
            bytes sent are the same without it.
        metrics: serve `GET /metrics` (Prometheus text format: totals, no thread names).
        metrics_per_thread: also list each thread's totals in `/metrics`, labelled by a
            salted digest of the thread name (`cachepilot.proxy.secret`), never the name.
        metrics_token: when set, `/metrics` answers only requests carrying
            `Authorization: Bearer <token>` (for scraping from another host).
        allowed_hosts: host names `/metrics` answers in the `Host` header (a web page
            reaching the proxy through DNS rebinding sends its own host name); empty: the
            bound address and, on loopback, `localhost`, `127.0.0.1` and `::1`.
        check_host: apply that `Host` check to every route, not only `/metrics` (421 for
            another host).
        max_body_bytes: the largest request body read (413 above it).
        max_json_depth: the deepest nesting of a model request's JSON body (400 deeper).
        body_idle_timeout: seconds a request body may pause before the request is
            answered 408 (a `Content-Length` larger than what is sent).
        body_timeout: seconds a whole request body may take (408 after).
        header_timeout: seconds a request's line and headers may take (408, connection
            closed).
        clock: the time source of the cost model (the wall clock; benchmarks replaying
            recorded sessions pass the recording's clock).
    """

    upstream: str
    host: str = "127.0.0.1"
    port: int = 8787
    provider: str = DEFAULT_PROFILE
    store: Path | str | None = None
    thread_header: str = DEFAULT_THREAD_HEADER
    key_scope: bool = True
    recall: bool = True
    timeout: float = 600.0
    max_recall_rounds: int = 3
    fold_ahead: bool = True
    metrics: bool = True
    metrics_per_thread: bool = False
    metrics_token: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    check_host: bool = False
    max_body_bytes: int = 256 * 1024 * 1024
    max_json_depth: int = 256
    body_idle_timeout: float = 30.0
    body_timeout: float = 300.0
    header_timeout: float = 10.0
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
            text = str(self.store)
            if not text.strip():
                raise ValueError("--store must name an SQLite file or a postgresql:// URL")
            object.__setattr__(self, "store", text if is_url(text) else Path(text))
        if self.metrics_token is not None and (
            len(self.metrics_token) < 16 or not self.metrics_token.isprintable()
        ):
            raise ValueError("--metrics-token must be at least 16 printable characters")
        hosts = tuple(h.strip().lower() for h in self.allowed_hosts)
        if any(not h or any(c.isspace() for c in h) for h in hosts):
            raise ValueError(f"invalid --allowed-host value in {self.allowed_hosts!r}")
        object.__setattr__(self, "allowed_hosts", hosts)
        if self.max_body_bytes < 1024:
            raise ValueError(f"--max-body-bytes must be >= 1024, not {self.max_body_bytes}")
        if not 8 <= self.max_json_depth <= 900:  # json's own recursion stops near 1000
            raise ValueError(f"max_json_depth must be in 8..900, not {self.max_json_depth}")
        for name in ("body_idle_timeout", "body_timeout", "header_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds")

    def to_json(self) -> str:
        """The settings as JSON (the clock is not carried: `from_json` uses the wall clock)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields.pop("clock")
        fields["store"] = str(self.store) if self.store is not None else None
        fields["allowed_hosts"] = list(self.allowed_hosts)
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> ProxyConfig:
        """Settings written by `to_json` (validated again)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("proxy settings must be a JSON object")
        data["allowed_hosts"] = tuple(data.get("allowed_hosts") or ())
        return cls(**data)

    def metrics_host_allowed(self, host: str) -> bool:
        """Whether `/metrics` (and, with `check_host`, every route) answers a request with
        this `Host` header (see `allowed_hosts`).

        Only the name counts: a page reaching the port through DNS rebinding has the same port
        and its own name.
        """
        names = set(map(_host_name, self.allowed_hosts)) or {_host_name(self.host)}
        if not self.allowed_hosts and names & _LOOPBACK:
            names |= _LOOPBACK
        return _host_name(host) in names

    def target(self, path: str) -> str:
        """The upstream URL for a request path (`/v1/messages` → `<upstream>/v1/messages`)."""
        base = self.upstream.rstrip("/")
        if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
            path = path[3:]
        return base + path

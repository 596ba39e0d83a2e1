"""The proxy's boundary: bad input gets a clear answer and holds nothing for long (413 for a
body over the limit, 400 for JSON nested too deep, 408 for a body or headers that do not
arrive, 421 for a foreign Host on every route with `check_host`), and the store's URL (with
its password) comes from the environment or a file rather than the command line."""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from cachepilot.proxy import ProxyConfig, ProxyEngine, create_app
from cachepilot.proxy.cli import add_proxy_parser, store_setting
from cachepilot.proxy.http_protocol import HeaderTimeoutProtocol


@contextlib.contextmanager
def _server(tmp: Path, **settings: Any) -> Iterator[int]:
    """The proxy on loopback with uvicorn and the proxy's header deadline (as `serve`)."""
    config = ProxyConfig(upstream="http://127.0.0.1:9", provider="anthropic",
                         store=str(tmp / "b.sqlite"), **settings)  # fmt: skip
    HeaderTimeoutProtocol.header_timeout = config.header_timeout
    server = uvicorn.Server(uvicorn.Config(create_app(ProxyEngine(config)), host="127.0.0.1",
                                           port=0, log_level="warning", log_config=None,
                                           http=HeaderTimeoutProtocol))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.01)
    try:
        yield int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(10)
        HeaderTimeoutProtocol.header_timeout = 10.0


def _raw(port: int, data: bytes, wait: float = 30) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        out = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(65536):
                out += chunk
        return out


def test_bad_input_at_the_boundary_gets_a_clear_answer(tmp_path: Path) -> None:
    with _server(tmp_path, max_body_bytes=4096, body_idle_timeout=0.5, header_timeout=0.5,
                 check_host=True) as port:  # fmt: skip
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        deep = b'{"messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
        with _server(tmp_path / "x", max_body_bytes=1 << 20) as big:
            nested = httpx.post(f"http://127.0.0.1:{big}/v1/chat/completions", content=deep,
                                headers={"content-type": "application/json"},
                                timeout=30)  # fmt: skip
        too_big = httpx.post(url, content=b"x" * 5000, timeout=30)

        def chunks() -> Iterator[bytes]:
            for _ in range(10):
                yield b"x" * 1000

        chunked = httpx.post(url, content=chunks(), timeout=30)
        short = _raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                           b"content-length: 100\r\n\r\n{}")  # fmt: skip
        slow = _raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127")
        foreign = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"host": "evil.example"})
        home = httpx.get(f"http://127.0.0.1:{port}/healthz")
    assert nested.status_code == 400 and "nested deeper" in nested.json()["error"]["message"]
    assert too_big.status_code == 413 and chunked.status_code == 413
    assert short.startswith(b"HTTP/1.1 408")
    assert slow.startswith(b"HTTP/1.1 408")
    assert foreign.status_code == 421 and home.status_code == 200


def test_the_store_comes_from_a_file_or_the_environment(tmp_path: Path) -> None:
    """A password in the store URL need not be on the command line (`/proc/PID/cmdline`)."""

    parser = argparse.ArgumentParser()
    add_proxy_parser(parser.add_subparsers())
    secret_url = "postgresql://proxy:s3cret-pass@127.0.0.1:5432/cp"
    path = tmp_path / "store-url"
    path.write_text(secret_url + "\n")
    args = parser.parse_args(["proxy", "--upstream", "http://x", "--store-file", str(path)])
    assert store_setting(args) == secret_url
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CACHEPILOT_STORE", secret_url)
        args = parser.parse_args(["proxy", "--upstream", "http://x"])
        assert store_setting(args) == secret_url
    both = parser.parse_args(
        ["proxy", "--upstream", "http://x", "--store", "a", "--store-file", str(path)]
    )
    with pytest.raises(ValueError, match="not both"):
        store_setting(both)
    (tmp_path / "empty").write_text("\n")
    empty = parser.parse_args(
        ["proxy", "--upstream", "http://x", "--store-file", str(tmp_path / "empty")]
    )
    with pytest.raises(ValueError, match="holds no"):
        store_setting(empty)

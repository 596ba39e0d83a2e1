"""Parts of the proxy fault suite: an upstream that can hold a request (so a proxy can be
killed while it waits), `cachepilot proxy` as a real subprocess, and the log checks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

USAGE = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005}
API_KEY = "sk-proj-" + "Q7x2" * 12
"""A credential-shaped key: it must appear in no log line."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HoldingUpstream:
    """A Chat Completions upstream on loopback that records every body it receives.

    `hold(n)` makes the n-th request (0-based, counted over the server's life) wait after its
    body arrived (a streamed one after its first event) until `release()`: the proxy in
    front can be killed while it waits.
    """

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self._hold: int | None = None
        self.holding = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw)
                with owner._lock:
                    index = len(owner.bodies)
                    owner.bodies.append(json.dumps(body, sort_keys=True).encode())
                held = index == owner._hold
                if body.get("stream"):
                    self._stream(held)
                    return
                if held:
                    owner.holding.set()
                    owner._release.wait(60)
                message = {"role": "assistant", "content": "ok"}
                choice = {"index": 0, "finish_reason": "stop", "message": message}
                reply = {"id": f"r{index}", "object": "chat.completion", "created": 0,
                         "model": "m", "usage": USAGE, "choices": [choice]}  # fmt: skip
                data = json.dumps(reply).encode()
                with contextlib.suppress(OSError):
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def _stream(self, held: bool) -> None:
                def event(payload: dict[str, Any]) -> bytes:
                    return b"data: " + json.dumps(payload).encode() + b"\n\n"

                base = {"id": "s", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                    "content": "o"}}]}  # fmt: skip
                rest = [
                    {**base, "choices": [{"index": 0, "delta": {"content": "k"}}]},
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {**base, "choices": [], "usage": USAGE},
                ]
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("connection", "close")
                    self.end_headers()
                    self.wfile.write(event(first))
                    self.wfile.flush()
                    if held:
                        owner.holding.set()
                        owner._release.wait(60)
                    for payload in rest:
                        self.wfile.write(event(payload))
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except OSError:
                    pass
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def hold(self, index: int) -> None:
        self._hold = index
        self.holding.clear()
        self._release.clear()

    def release(self) -> None:
        self._hold = None
        self._release.set()

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()


class ProxyProcess:
    """`cachepilot proxy` in a subprocess of its own (stderr kept in a file for the log
    checks); the store is given through the environment, never the command line."""

    def __init__(
        self, upstream: str, store: str, logs: Path, *, workers: int = 1, verbose: bool = True
    ) -> None:
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "cachepilot.cli", *(["-v"] if verbose else []),
                   "proxy", "--upstream", upstream, "--port", str(self.port),
                   "--provider", "anthropic", "--workers", str(workers)]  # fmt: skip
        env = {**os.environ, "CACHEPILOT_STORE": store}
        logs.parent.mkdir(parents=True, exist_ok=True)
        self._log = logs.open("ab")
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=self._log, env=env, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.root}/healthz", timeout=1).status_code == 200:
                    return
            if self.process.poll() is not None:
                raise RuntimeError(f"the proxy exited: {logs.read_text(errors='replace')}")
            time.sleep(0.05)
        raise RuntimeError("the proxy did not start")

    def workers(self) -> list[int]:
        """The process ids of its worker processes (children of the server)."""
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(p) for p in path.read_text().split()]

    def kill(self) -> None:
        """SIGKILL the server and every process of its session (workers included)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self._log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
                return
        self._log.close()


@contextlib.contextmanager
def proxy_process(upstream: str, store: str, logs: Path, **options: Any) -> Iterator[ProxyProcess]:
    proxy = ProxyProcess(upstream, store, logs, **options)
    try:
        yield proxy
    finally:
        proxy.stop()


HEADERS = {"x-cachepilot-thread": "team-session", "authorization": f"Bearer {API_KEY}"}


def post(root: str, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    """One request on a connection of its own."""
    with httpx.Client(timeout=timeout) as client:
        return client.post(
            f"{root}/v1/chat/completions", json=body, headers={**HEADERS, "connection": "close"}
        )


def stream(root: str, body: dict[str, Any]) -> bytes:
    """A streamed request read to its end."""
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", f"{root}/v1/chat/completions", json={**body, "stream": True}, headers=HEADERS
        ) as reply,
    ):
        assert reply.status_code == 200, reply.read()
        return reply.read()


def leaks(logs: Path, forbidden: list[str]) -> list[str]:
    """Log lines at INFO or above (tracebacks under them included) that show any of
    `forbidden`; every record must carry a level and a logger name (the redacting
    formatter's), in every process."""
    bad = []
    levels = ("DEBUG ", "INFO ", "WARNING ", "ERROR ", "CRITICAL ")
    debug = False
    for line in logs.read_text(errors="replace").splitlines():
        if line.startswith(levels):
            debug = line.startswith("DEBUG ")
        elif not (line.startswith(("Traceback", " ", "\t")) or not line.strip() or debug) and (
            ":" not in line or " " in line.split(":", 1)[0]
        ):
            bad.append(f"unformatted: {line}")  # neither a record nor a traceback's end
        if not debug:
            bad.extend(line for word in forbidden if word in line)
    return bad

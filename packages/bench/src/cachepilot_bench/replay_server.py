"""The replay provider's HTTP server: stdlib `ThreadingHTTPServer` on 127.0.0.1.

The server only moves bytes: it reads a request (method, path, body) and writes back what a
handler callable returns. Replies are sent whole with a `Content-Length`, streams included
(an SSE body is complete when the reply is known), so connections stay reusable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Handler", "ReplayHTTPServer", "Response"]

logger = logging.getLogger(__name__)

_MAX_BODY_BYTES = 256 * 1024 * 1024
"""Largest request body read (a long agent history with images stays far below)."""


@dataclass(frozen=True, slots=True)
class Response:
    """What the handler answers: status, content type and the whole body."""

    status: int
    content_type: str
    body: bytes


Handler = Callable[[str, str, bytes], Response]
"""`(method, path, body) -> Response`."""

_ERROR = b'{"error":{"message":"%s","type":"invalid_request_error","param":null,"code":null}}'


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cachepilot-replay"
    sys_version = ""
    server: _Server

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            size = 0
            while True:
                line = self.rfile.readline(65537)
                try:
                    length = int(line.split(b";", 1)[0].strip() or b"0", 16)
                except ValueError:
                    return None
                if length == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                size += length
                if size > _MAX_BODY_BYTES:
                    return None
                chunks.append(self.rfile.read(length))
                self.rfile.readline(65537)
        try:
            length = int(self.headers.get("Content-Length", "0") or 0)
        except ValueError:
            return None
        if length < 0 or length > _MAX_BODY_BYTES:
            return None
        return self.rfile.read(length) if length else b""

    def _answer(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        if response.content_type == "text/event-stream":
            self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(response.body)
        self.wfile.flush()

    def _dispatch(self, method: str) -> None:
        body = self._read_body() if method == "POST" else b""
        if body is None:
            self.close_connection = True
            self._answer(
                Response(400, "application/json", _ERROR % b"unreadable or oversized request body")
            )
            return
        try:
            response = self.server.handler(method, self.path, body)
        except Exception:  # a bug must not kill the server thread: answer 500 and go on
            logger.exception("replay provider failed on %s %s", method, self.path)
            response = Response(
                500, "application/json", _ERROR % b"internal error in the replay provider"
            )
        self._answer(response)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):  # the client went away mid-request
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("replay provider http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        super().__init__(("127.0.0.1", 0), _RequestHandler)


class ReplayHTTPServer:
    """A loopback HTTP server on a free port, serving `handler` from a daemon thread."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: when the server is not started.
        """
        if self._server is None:
            raise RuntimeError("the replay HTTP server is not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread (idempotent)."""
        if self._server is not None:
            return
        self._server = _Server(self._handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"cachepilot-replay-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

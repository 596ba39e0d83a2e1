"""Fixtures for the compression tests: a loopback OpenAI-compatible stub and vcrpy cassettes.

Cassettes under tests/cassettes/compress/ hold real HTTP traffic of the real `openai` client.
They were recorded against `StubServer` (a scripted `/v1/chat/completions` endpoint on
127.0.0.1); a test replays them offline and fails when the requests change. To re-record,
delete the cassette and run the test again: the stub answers and vcrpy writes a new file. To
record against a real provider instead, point the test's client at its base URL with a real
key (the `authorization` header is never written to a cassette).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import vcr

CASSETTES = Path(__file__).resolve().parents[1] / "cassettes" / "compress"

Responder = Callable[[dict[str, Any]], str]
"""Maps a Chat Completions request body to the assistant's answer text."""


class StubServer:
    """A scripted Chat Completions endpoint on loopback (never a language model)."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append(body)
                text = stub.responder(body)
                payload = json.dumps(
                    {
                        "id": f"chatcmpl-stub-{len(stub.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "stub"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 10,
                            "completion_tokens": 5,
                            "total_tokens": 15,
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_server() -> Iterator[Callable[[Responder], StubServer]]:
    started: list[StubServer] = []

    def start(responder: Responder) -> StubServer:
        server = StubServer(responder).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__()


def _cassette(name: str) -> Any:
    """A vcrpy cassette context: replays when the file exists, records once otherwise.

    Requests match on method, path and body (not host or port: the stub's port changes).
    """
    recorder = vcr.VCR(
        cassette_library_dir=str(CASSETTES),
        record_mode="once",
        match_on=["method", "path", "body"],
        filter_headers=["authorization", "cookie"],
        decode_compressed_response=True,
    )
    return recorder.use_cassette(f"{name}.yaml")


@pytest.fixture
def cassette() -> Callable[[str], Any]:
    """`with cassette("name"):` replays tests/cassettes/compress/name.yaml (records once)."""
    return _cassette

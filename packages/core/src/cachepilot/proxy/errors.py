"""What the proxy answers a client with: a body or a stream, and its errors in each API's own
shape (OpenAI, Anthropic, Gemini), whole or as a stream's last event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from cachepilot.proxy.relay import sse_bytes
from cachepilot.wire import Api, dumps

__all__ = ["STORE_UNAVAILABLE", "TOO_DEEP", "Answer", "error_answer", "stream_error"]


@dataclass(slots=True)
class Answer:
    """What to send the client: a whole body, or a stream of bytes."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None


_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _gemini_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message,
                      "status": _GEMINI_STATUS.get(status, "INTERNAL")}}  # fmt: skip


def error_answer(
    api: Api | None, status: int, message: str, code: str = "upstream_unavailable"
) -> Answer:
    """An error in the API's own shape (Anthropic, Gemini or OpenAI)."""
    if api == "gemini":
        payload: dict[str, Any] = _gemini_error(status, message)
    elif api == "anthropic":
        kinds = {504: "timeout_error", 400: "invalid_request_error", 413: "request_too_large"}
        kind = kinds.get(status, "api_error")
        payload = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        payload = {"error": {"message": message, "type": "proxy_error", "param": None,
                             "code": code}}  # fmt: skip
    headers = {"content-type": "application/json"}
    if status == 503:
        headers["retry-after"] = "1"
    return Answer(status, headers, dumps(payload).encode())


STORE_UNAVAILABLE = (
    "cachepilot proxy: its state store is unavailable, so the request was not sent (no "
    "thread is kept outside the store); retry shortly"
)
"""The message of the 503 a request gets while the store cannot give the proxy's secret or
read or save the request's thread."""


TOO_DEEP = object()
"""Stands for a body too deeply nested for the JSON parser."""


def stream_error(api: Api, message: str) -> bytes:
    """An error event for a stream that already started (its status cannot change)."""
    if api == "gemini":
        return sse_bytes(None, _gemini_error(502, message))
    if api == "anthropic":
        return sse_bytes("error", {"type": "error", "error": {"type": "api_error",
                                                               "message": message}})  # fmt: skip
    if api == "responses":
        return sse_bytes("error", {"type": "error", "code": "upstream_error", "message": message,
                                   "param": None, "sequence_number": 0})  # fmt: skip
    return sse_bytes(None, {"error": {"message": message, "type": "proxy_error"}})

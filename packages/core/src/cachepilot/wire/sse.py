"""Server-sent events, compact JSON and error bodies shared by the wire writers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["STREAM_PIECE_CHARS", "dumps", "error_body", "sse", "sse_events"]

STREAM_PIECE_CHARS = 48
"""Characters per streamed text or argument delta (fixed, so streams are deterministic)."""


def sse(events: Iterable[Mapping[str, Any]], *, named: bool, done: bool) -> bytes:
    """Server-sent events: one `data:` line per event (`event:` too when `named`).

    Args:
        events: the event payloads.
        named: prefix each with `event: <type>` (the Responses and Messages streams do).
        done: end with `data: [DONE]` (the Chat Completions stream does).
    """
    lines: list[str] = []
    for event in events:
        if named:
            lines.append(f"event: {event['type']}\n")
        lines.append(f"data: {dumps(event)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode("ascii")


def sse_events(text: str) -> list[dict[str, Any]]:
    """The JSON objects of an event stream's `data:` lines (`[DONE]` and junk skipped)."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == "[DONE]":
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def dumps(value: Any) -> str:
    """Compact JSON, ASCII-escaped (valid UTF-8 even for lone surrogates in the text)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def error_body(
    message: str, *, kind: str = "invalid_request_error", param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-shaped error body (`{"error": {...}}`)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}

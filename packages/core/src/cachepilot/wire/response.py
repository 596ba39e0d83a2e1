"""Response bodies (JSON or server-sent events) of the four APIs: usage, id and output."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachepilot.messages import Message
from cachepilot.usage import Usage
from cachepilot.wire._common import Api, Reader
from cachepilot.wire.anthropic import read_anthropic
from cachepilot.wire.chat import chat_message
from cachepilot.wire.gemini_stream import fold_chunks, gemini_output
from cachepilot.wire.responses import responses_items
from cachepilot.wire.sse import sse_events

__all__ = ["ResponseInfo", "parse_response", "parse_usage"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ResponseInfo:
    """What a response body tells: usage, id and the generated messages."""

    usage: Usage | None = None
    response_id: str | None = None
    output: tuple[Message, ...] = ()


def parse_usage(raw: Any, api: Api) -> Usage | None:
    """Normalized usage from a response's `usage` object (None when there is none)."""
    if not isinstance(raw, Mapping) or not raw:
        return None
    try:
        if api == "gemini" or "promptTokenCount" in raw or "prompt_token_count" in raw:
            return Usage.from_gemini(raw)
        if api == "anthropic" or "cache_read_input_tokens" in raw:
            return Usage.from_anthropic(raw)
        if "prompt_tokens" in raw:
            return Usage.from_openai_chat(raw)
        return Usage.from_openai_responses(raw)
    except ValueError as exc:
        logger.warning("ignoring an inconsistent usage record: %s", exc)
        return None


def _output_messages(api: Api, body: Mapping[str, Any]) -> tuple[Message, ...]:
    try:
        if api == "gemini":
            return gemini_output(body)
        if api == "responses" and isinstance(body.get("output"), list):
            return tuple(responses_items(body["output"], "output", strict=False))
        if api == "chat":
            choices = body.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
                message = choices[0].get("message")
                if isinstance(message, Mapping):
                    data = {**message, "role": "assistant"}
                    return (chat_message(data, "message", {}, Reader(strict=False)),)
        if api == "anthropic" and isinstance(body.get("content"), list):
            _, messages, _ = read_anthropic({"messages": [{"role": "assistant", **body}]})
            return tuple(messages)
    except (ValueError, TypeError):
        logger.debug("could not read the output of a %s response", api, exc_info=True)
    return ()


def parse_response(body: Any, api: Api) -> ResponseInfo:
    """Usage, id and output of one response body (JSON object, JSON text or an SSE stream)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        text = body.strip()
        if not text:
            return ResponseInfo()
        if text.startswith("{") or (api == "gemini" and text.startswith("[")):
            try:
                body = json.loads(text)
            except ValueError:
                return ResponseInfo()
        else:
            return _stream(sse_events(text), api)
    if api == "gemini" and isinstance(body, list):  # `streamGenerateContent` without SSE
        return _stream([c for c in body if isinstance(c, Mapping)], api)
    if not isinstance(body, Mapping):
        return ResponseInfo()
    if api == "gemini":
        rid = body.get("responseId")
        return ResponseInfo(
            usage=parse_usage(body.get("usageMetadata"), api),
            response_id=str(rid) if rid else None,
            output=_output_messages(api, body),
        )
    rid = body.get("id")
    return ResponseInfo(
        usage=parse_usage(body.get("usage"), api),
        response_id=str(rid) if rid else None,
        output=_output_messages(api, body),
    )


def _stream(events: Sequence[Mapping[str, Any]], api: Api) -> ResponseInfo:
    if api == "gemini":
        return parse_response(fold_chunks(events).payload(), api)
    usage: dict[str, Any] = {}
    rid: str | None = None
    final: Mapping[str, Any] | None = None
    for event in events:
        kind = event.get("type")
        if api == "responses":
            response = event.get("response")
            if isinstance(response, Mapping):
                rid = str(response.get("id") or rid or "") or None
                if kind in ("response.completed", "response.incomplete", "response.failed"):
                    final = response
        elif api == "anthropic":
            if kind == "message_start" and isinstance(event.get("message"), Mapping):
                rid = str(event["message"].get("id") or "") or None
                usage.update(event["message"].get("usage") or {})
            elif kind == "message_delta" and isinstance(event.get("usage"), Mapping):
                usage.update({k: v for k, v in event["usage"].items() if v is not None})
        else:
            rid = str(event.get("id") or rid or "") or None
            if isinstance(event.get("usage"), Mapping):
                usage = dict(event["usage"])
    if final is not None:
        return parse_response(dict(final), api)
    return ResponseInfo(usage=parse_usage(usage, api), response_id=rid)

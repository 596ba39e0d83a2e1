"""One request body in neutral form, whatever its API: detection, parameters, thread keys.

`parse_body` turns a request body into a `cachepilot.sim.Request` (system prompt, messages,
tools, model, Anthropic `cache_control` breakpoints) plus what diagnostics and the proxy need
besides: cache-relevant parameters and thread keys. OpenAI bodies are read strictly first
and leniently when the strict reader refuses them (logs hold bodies real endpoints took).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cachepilot.messages import Message
from cachepilot.sim.render import Request
from cachepilot.wire._common import Api, WireError
from cachepilot.wire.anthropic import read_anthropic
from cachepilot.wire.chat import read_chat
from cachepilot.wire.responses import read_responses

__all__ = [
    "APIS",
    "STRONG_KEYS",
    "ParsedBody",
    "api_from_path",
    "detect_api",
    "parse_body",
    "thread_keys",
]

logger = logging.getLogger(__name__)

APIS: tuple[Api, ...] = ("chat", "responses", "anthropic")

_THREAD_METADATA = (
    "thread_id",
    "session_id",
    "conversation_id",
    "thread",
    "session",
    "conversation",
)
STRONG_KEYS: frozenset[str] = frozenset(
    {"conversation", *(f"metadata.{k}" for k in _THREAD_METADATA)}
)
"""Thread keys that name one conversation (the others, `prompt_cache_key`, `user`,
`metadata.user_id`, `safety_identifier`, may be shared by many threads)."""
_WEAK_KEYS = ("prompt_cache_key", "metadata.user_id", "user", "safety_identifier")
_MAX_BREAKPOINTS = 4


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """One request body in neutral form.

    Attributes:
        api: which API the body is for.
        request: the request as the simulator renders it.
        params: cache-relevant parameters as sent (`cachepilot.diagnose.CACHE_PARAMETERS`).
        keys: thread keys found in the body (`prompt_cache_key`, `user`, `metadata.<k>`,
            `conversation`), strongest first.
        previous_response_id: Responses API chaining (the server holds the earlier context).
    """

    api: Api
    request: Request
    params: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    previous_response_id: str | None = None


def api_from_path(path: str | None) -> Api | None:
    """The API an endpoint path serves (`/v1/chat/completions` → `chat`), or None."""
    if not path:
        return None
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    return None


def detect_api(body: Mapping[str, Any], url_path: str | None = None) -> Api:
    """The API a request body is for: by endpoint path first, else by its shape.

    Raises:
        ValueError: when the body is not a model request (no `messages` and no `input`).
    """
    by_path = api_from_path(url_path)
    if by_path is not None:
        return by_path
    if "input" in body or "instructions" in body or "previous_response_id" in body:
        return "responses"
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ValueError("not a model request body: it has neither 'messages' nor 'input'")
    if "system" in body or "anthropic_version" in body:
        return "anthropic"
    tools = body.get("tools")
    if isinstance(tools, list) and any(
        isinstance(t, Mapping) and "input_schema" in t for t in tools
    ):
        return "anthropic"
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") in (
                    "tool_use",
                    "tool_result",
                    "thinking",
                    "redacted_thinking",
                ):
                    return "anthropic"
    return "chat"


def parse_body(
    body: Mapping[str, Any],
    *,
    api: Api | None = None,
    url_path: str | None = None,
    timestamp: float | None = None,
) -> ParsedBody:
    """Parse one request body.

    Args:
        body: the JSON body as sent.
        api: force the API (else `detect_api`).
        url_path: endpoint path, used to detect the API.
        timestamp: Unix time the request was sent, when known.

    Raises:
        ValueError: when the body is not a model request.
    """
    if not isinstance(body, Mapping):
        raise ValueError(f"a request body must be a JSON object, not {type(body).__name__}")
    api = api or detect_api(body, url_path)
    if api in ("chat", "responses"):
        system, messages = _openai(body, api)
        breakpoints = None
        tools = _tools(body.get("tools"))
    elif api == "anthropic":
        system, messages, breakpoints = read_anthropic(body)
        tools = _tools(body.get("tools"))
        if any(isinstance(t, Mapping) and "cache_control" in t for t in body.get("tools") or ()):
            breakpoints = sorted({-1, *(breakpoints or ())})
    else:
        raise ValueError(f"unknown API {api!r}; expected one of {APIS}")
    if breakpoints:
        breakpoints = breakpoints[-_MAX_BREAKPOINTS:]
    model = body.get("model")
    request = Request(
        system=system,
        messages=messages,
        tools=tools,
        timestamp=timestamp,
        model=str(model) if model else None,
        cache_breakpoints=breakpoints or None,
    )
    previous = body.get("previous_response_id")
    return ParsedBody(
        api=api,
        request=request,
        params=_params(body, api),
        keys=_keys(body),
        previous_response_id=str(previous) if previous else None,
    )


def _params(body: Mapping[str, Any], api: Api) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if body.get("prompt_cache_key") is not None:
        out["prompt_cache_key"] = body["prompt_cache_key"]
    if api == "chat" and body.get("response_format") is not None:
        out["response_format"] = body["response_format"]
    text = body.get("text")
    if api == "responses" and isinstance(text, Mapping) and text.get("format") is not None:
        out["text.format"] = text["format"]
    if api == "anthropic":
        for name in ("tool_choice", "thinking"):
            if body.get(name) is not None:
                out[name] = body[name]
    return out


def thread_keys(body: Mapping[str, Any]) -> dict[str, str]:
    """The thread keys a request body carries, strongest first (see `ParsedBody.keys`)."""
    return _keys(body) if isinstance(body, Mapping) else {}


def _keys(body: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        for name in _THREAD_METADATA:
            value = metadata.get(name)
            if isinstance(value, str | int) and str(value):
                found[f"metadata.{name}"] = str(value)
        user_id = metadata.get("user_id")
        if isinstance(user_id, str | int) and str(user_id):
            found["metadata.user_id"] = str(user_id)
    conversation = body.get("conversation")
    if isinstance(conversation, Mapping):
        conversation = conversation.get("id")
    if isinstance(conversation, str) and conversation:
        found["conversation"] = conversation
    for name in ("prompt_cache_key", "user", "safety_identifier"):
        value = body.get(name)
        if isinstance(value, str) and value:
            found[name] = value
    order = [k for k in found if k in STRONG_KEYS] + [k for k in _WEAK_KEYS if k in found]
    return {k: found[k] for k in order}


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    """Tool schemas as sent, without Anthropic `cache_control` marks (not prompt content)."""
    if not isinstance(raw, list):
        return ()
    out: list[dict[str, Any]] = []
    for tool in raw:
        if isinstance(tool, Mapping):
            out.append({k: v for k, v in tool.items() if k != "cache_control"})
    return tuple(out)


def _openai(body: Mapping[str, Any], api: Api) -> tuple[str | None, list[Message]]:
    """System and messages of an OpenAI body: strictly, else leniently."""
    reader = read_chat if api == "chat" else read_responses
    try:
        system, messages, _ = reader(body)
        return system, messages
    except (WireError, TypeError, KeyError):
        logger.debug("lenient reading of a %s body", api, exc_info=True)
    system, messages, _ = reader(body, strict=False)
    return system, messages

"""One request body in neutral form, whatever its API: detection, parameters, thread keys.

`parse_body` turns a request body into a `cachepilot.sim.Request` (system prompt, messages,
tools, model, Anthropic `cache_control` breakpoints) plus what diagnostics and the proxy need
besides: cache-relevant parameters, thread keys and, for Anthropic, how the request asks to be
cached (`cache_mode`, `cache_ttl_seconds`). A structured-output schema (`response_format`,
`text.format`, Anthropic `output_format` / `output_config.format`) is prompt content the
provider bills: it renders as one more entry after the tool schemas. OpenAI and Gemini bodies
are read strictly first and leniently when the strict reader refuses them (logs hold bodies
real endpoints took). A Gemini body names its model in the path (`cachepilot.wire.gemini`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from cachepilot.messages import Message
from cachepilot.sim.render import Request
from cachepilot.wire._common import Api, WireError
from cachepilot.wire.anthropic import read_anthropic
from cachepilot.wire.chat import read_chat
from cachepilot.wire.gemini import gemini_path, gemini_tools, read_gemini
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

APIS: tuple[Api, ...] = ("chat", "responses", "anthropic", "gemini")

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
CacheMode: TypeAlias = Literal["explicit", "automatic", "none"]
_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
# Path segments before `/{id}/messages` that are not Anthropic Messages (OpenAI Assistants
# threads, stored chat completions).
_NOT_MESSAGES_PARENTS = frozenset({"threads", "completions", "conversations"})
_MAX_BREAKPOINTS = 4


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """One request body in neutral form.

    Attributes:
        api: which API the body is for.
        request: the request as the simulator renders it.
        params: cache-relevant parameters as sent (`cachepilot.diagnose.breaks.CACHE_PARAMETERS`).
        keys: thread keys found in the body (`prompt_cache_key`, `user`, `metadata.<k>`,
            `conversation`), strongest first.
        previous_response_id: Responses API chaining (the server holds the earlier context).
        cache_mode: Anthropic only: `explicit` (`cache_control` marks on blocks; the request
            is cached at them), `automatic` (a top-level `cache_control`: the provider marks
            the last block, on top of any explicit marks) or `none` (nothing is cached).
        cache_ttl_seconds: Anthropic only: the longest TTL a mark asks for (300 or 3600), None
            when nothing is cached.
    """

    api: Api
    request: Request
    params: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    previous_response_id: str | None = None
    cache_mode: CacheMode | None = None
    cache_ttl_seconds: float | None = None


def api_from_path(path: str | None) -> Api | None:
    """The API an endpoint path serves (`/v1/chat/completions` → `chat`,
    `/v1beta/models/{model}:generateContent` → `gemini`), or None."""
    if not path:
        return None
    path = path.split("?", 1)[0].rstrip("/")
    found = gemini_path(path)
    if found is not None:
        return "gemini" if found.call else None
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        parts = path.split("/")
        if len(parts) >= 3 and parts[-3] in _NOT_MESSAGES_PARENTS:
            return None
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
    if "contents" in body and "messages" not in body:
        return "gemini"
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ValueError(
            "not a model request body: it has neither 'messages', 'input' nor 'contents'"
        )
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
    mode: CacheMode | None = None
    ttl: float | None = None
    if api in ("chat", "responses"):
        system, messages = _openai(body, api)
        breakpoints = None
        tools = _tools(body.get("tools"))
    elif api == "gemini":
        system, messages = _gemini(body)
        breakpoints = None
        tools = gemini_tools(body)
    elif api == "anthropic":
        system, messages, breakpoints = read_anthropic(body)
        tools = _tools(body.get("tools"))
        if any(isinstance(t, Mapping) and "cache_control" in t for t in body.get("tools") or ()):
            breakpoints = sorted({-1, *(breakpoints or ())})
        mode, ttl = _anthropic_cache(body, bool(breakpoints))
        if mode == "automatic" and messages:
            # The provider marks the last cacheable block, in one of the four slots.
            breakpoints = sorted(
                {*(breakpoints or ())[-(_MAX_BREAKPOINTS - 1) :], len(messages) - 1}
            )
    else:
        raise ValueError(f"unknown API {api!r}; expected one of {APIS}")
    if breakpoints:
        breakpoints = breakpoints[-_MAX_BREAKPOINTS:]
    schema = _output_schema(body, api)
    if schema is not None:
        tools = (*tools, schema)
    model = body.get("model")
    if api == "gemini" and not model:
        where = gemini_path(url_path)
        model = where.model if where is not None else None
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
        cache_mode=mode,
        cache_ttl_seconds=ttl,
    )


def _ttl(mark: Any) -> float:
    ttl = mark.get("ttl") if isinstance(mark, Mapping) else None
    return _TTL_SECONDS.get(str(ttl), 300.0)


def _marks(value: Any, depth: int = 0) -> list[Any]:
    """Every `cache_control` value in a body part (bounded depth: blocks nest two levels)."""
    found: list[Any] = []
    if depth > 4:
        return found
    if isinstance(value, Mapping):
        if "cache_control" in value:
            found.append(value["cache_control"])
        for key in ("content", "system", "tools", "messages"):
            if key in value:
                found.extend(_marks(value[key], depth + 1))
    elif isinstance(value, list):
        for item in value:
            found.extend(_marks(item, depth + 1))
    return found


def _anthropic_cache(body: Mapping[str, Any], marked: bool) -> tuple[CacheMode, float | None]:
    """How an Anthropic request asks to be cached, and the longest TTL it asks for."""
    top = body.get("cache_control")
    inner = _marks({k: body.get(k) for k in ("system", "tools", "messages") if k in body})
    if isinstance(top, Mapping):
        return "automatic", max([_ttl(top), *(_ttl(m) for m in inner)])
    if marked:
        return "explicit", max([_ttl(m) for m in inner] or [300.0])
    return "none", None


def _output_schema(body: Mapping[str, Any], api: Api) -> dict[str, Any] | None:
    """The structured-output format a body sends, as one entry rendered after the tools."""
    value: Any = None
    if api == "gemini":
        config = body.get("generationConfig")
        config = config if isinstance(config, Mapping) else {}
        value = config.get("responseJsonSchema", config.get("responseSchema"))
        if not isinstance(value, Mapping):
            return None
        return {"type": "output_format", "format": dict(value)}
    if api == "chat":
        value = body.get("response_format")
    elif api == "responses":
        text = body.get("text")
        value = text.get("format") if isinstance(text, Mapping) else None
    else:
        value = body.get("output_format")
        config = body.get("output_config")
        if value is None and isinstance(config, Mapping):
            value = config.get("format")
    if not isinstance(value, Mapping) or value.get("type") in (None, "text"):
        return None
    return {"type": "output_format", "format": dict(value)}


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
    if api == "gemini":
        for name in ("toolConfig", "cachedContent"):
            if body.get(name) is not None:
                out[name] = body[name]
    if api in ("anthropic", "responses") and body.get("context_management"):
        # Server-side context edits: the provider rewrites the prompt it caches.
        out["context_management"] = body["context_management"]
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


def _gemini(body: Mapping[str, Any]) -> tuple[str | None, list[Message]]:
    """System and messages of a Gemini body: strictly, else leniently."""
    try:
        system, messages, _ = read_gemini(body)
        return system, messages
    except (WireError, TypeError, KeyError):
        logger.debug("lenient reading of a gemini body", exc_info=True)
    system, messages, _ = read_gemini(body, strict=False)
    return system, messages


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

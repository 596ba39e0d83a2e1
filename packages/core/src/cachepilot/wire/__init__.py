"""The one provider wire layer: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages
and Gemini `generateContent`.

Request bodies are read into neutral messages (`read_chat`, `read_responses`,
`read_anthropic`, `read_gemini`, or `parse_body` for any of them with detection, parameters
and thread keys), strictly for a server that must answer like the API (the replay provider,
the proxy) or leniently for diagnostics of recorded traffic. `read_view` / `write_view` read
a body with the origin of every message and write changed messages back into it, keeping
every field the client sent. Replies, streams and usage blocks are written
deterministically; streams are read as they arrive (`EventSplitter`, `StreamReply`). The
simulator, the replay provider, `explain`/`audit` and the proxy all read and write bodies
through this package.


Part `wire` of the core (docs/architecture.md). May import: `messages`, `plan`, `sim`, `usage`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.wire._common import Api, WireError
from cachepilot.wire.anthropic import (
    anthropic_blocks,
    anthropic_events,
    anthropic_message,
    anthropic_tool,
    anthropic_usage,
    read_anthropic,
)
from cachepilot.wire.body import (
    APIS,
    STRONG_KEYS,
    ParsedBody,
    api_from_path,
    detect_api,
    parse_body,
    thread_keys,
)
from cachepilot.wire.chat import (
    chat_chunks,
    chat_completion,
    chat_messages,
    chat_usage,
    read_chat,
    request_from_chat,
)
from cachepilot.wire.gemini import (
    GeminiPath,
    gemini_chunks,
    gemini_contents,
    gemini_path,
    gemini_response,
    gemini_tool,
    gemini_tools,
    gemini_usage,
    read_gemini,
)
from cachepilot.wire.gemini_stream import GeminiReply
from cachepilot.wire.response import ResponseInfo, parse_response, parse_usage
from cachepilot.wire.responses import (
    read_responses,
    request_from_responses,
    responses_events,
    responses_input,
    responses_items,
    responses_object,
    responses_usage,
)
from cachepilot.wire.rewrite import (
    BodyView,
    Source,
    align,
    cache_marks,
    mark_breakpoints,
    read_view,
    reply_elements,
    resplice,
    split_like,
    wire_messages,
    write_view,
)
from cachepilot.wire.sse import STREAM_PIECE_CHARS, dumps, error_body, sse, sse_events
from cachepilot.wire.stream import EventSplitter, SSEEvent, StreamReply

__all__ = [
    "APIS",
    "STREAM_PIECE_CHARS",
    "STRONG_KEYS",
    "Api",
    "BodyView",
    "EventSplitter",
    "GeminiPath",
    "GeminiReply",
    "ParsedBody",
    "ResponseInfo",
    "SSEEvent",
    "Source",
    "StreamReply",
    "WireError",
    "align",
    "anthropic_blocks",
    "anthropic_events",
    "anthropic_message",
    "anthropic_tool",
    "anthropic_usage",
    "api_from_path",
    "cache_marks",
    "chat_chunks",
    "chat_completion",
    "chat_messages",
    "chat_usage",
    "detect_api",
    "dumps",
    "error_body",
    "gemini_chunks",
    "gemini_contents",
    "gemini_path",
    "gemini_response",
    "gemini_tool",
    "gemini_tools",
    "gemini_usage",
    "mark_breakpoints",
    "parse_body",
    "parse_response",
    "parse_usage",
    "read_anthropic",
    "read_chat",
    "read_gemini",
    "read_responses",
    "read_view",
    "reply_elements",
    "request_from_chat",
    "request_from_responses",
    "resplice",
    "responses_events",
    "responses_input",
    "responses_items",
    "responses_object",
    "responses_usage",
    "split_like",
    "sse",
    "sse_events",
    "thread_keys",
    "wire_messages",
    "write_view",
]

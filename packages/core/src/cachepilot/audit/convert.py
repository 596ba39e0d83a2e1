"""Turn recorded sessions (`cachepilot.traces`) into JSONL request logs that `audit` reads.

Each assistant message of a session is one model call whose request was everything before
it. Claude Code sessions become Anthropic Messages bodies, others OpenAI Chat bodies; every
line carries the recorded time and usage (provider-shaped) when the trace has them, and the
session's thread key (`metadata.session_id`), so the parts of one Claude Code session split at
an auto-compaction stay one thread and the compaction shows as a break.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart
from cachepilot.traces import Session, split_system
from cachepilot.usage import Usage

__all__ = [
    "anthropic_body",
    "chat_body",
    "session_to_log",
    "sessions_to_log",
    "write_request_log",
]


def _chat_content(message: Message) -> Any:
    if isinstance(message.content, str):
        return message.content
    blocks: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append({"type": "image_url", "image_url": {"url": part.url}})
    return blocks


def chat_body(
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] = (),
    *,
    model: str | None = None,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An OpenAI Chat Completions request body."""
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    for m in messages:
        entry: dict[str, Any] = {"role": m.role, "content": _chat_content(m)}
        reasoning = [p.text for p in m.parts if isinstance(p, ReasoningPart) and p.text]
        if reasoning:
            entry["reasoning_content"] = "\n".join(reasoning)
        if m.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
        if m.role == "tool":
            entry["tool_call_id"] = m.tool_call_id
            if m.name:
                entry["name"] = m.name
        out.append(entry)
    body: dict[str, Any] = {"model": model or "unknown", "messages": out}
    if tools:
        body["tools"] = list(tools)
    if metadata:
        body["metadata"] = dict(metadata)
    return body


def _anthropic_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ReasoningPart):
            block: dict[str, Any] = {"type": "thinking", "thinking": part.text}
            if part.signature:
                block["signature"] = part.signature
            blocks.append(block)
        elif isinstance(part, ImagePart):
            if part.url.startswith("data:") and ";base64," in part.url:
                media, data = part.url[5:].split(";base64,", 1)
                source = {"type": "base64", "media_type": media, "data": data}
            else:
                source = {"type": "url", "url": part.url}
            blocks.append({"type": "image", "source": source})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.parsed_arguments()}
        )
    return blocks


def anthropic_body(
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] = (),
    *,
    model: str | None = None,
    metadata: dict[str, str] | None = None,
    cache_control: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An Anthropic Messages request body (parallel tool results in one user turn).

    Args:
        cache_control: when given, the mark set on the system prompt and on the last block
            of the last message, as Claude Code marks its requests (without it the request
            asks for no caching, and Anthropic caches nothing).
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            out.append({"role": "assistant", "content": _anthropic_blocks(m)})
            continue
        if m.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content if isinstance(m.content, str) else _anthropic_blocks(m),
            }
            blocks = [block]
        else:
            blocks = _anthropic_blocks(m) or [{"type": "text", "text": ""}]
        previous = out[-1] if out else None
        # Parallel tool results share one user turn; any other message opens a turn of its own.
        if (
            m.role == "tool"
            and previous is not None
            and previous["role"] == "user"
            and all(b.get("type") == "tool_result" for b in previous["content"])
        ):
            previous["content"].extend(blocks)
        else:
            out.append({"role": "user", "content": blocks})
    body: dict[str, Any] = {"model": model or "unknown", "max_tokens": 4096, "messages": out}
    if system is not None:
        body["system"] = system
    if cache_control is not None:
        if system:
            body["system"] = [
                {"type": "text", "text": system, "cache_control": dict(cache_control)}
            ]
        if out and out[-1]["content"]:
            last = out[-1]["content"][-1]
            out[-1]["content"][-1] = {**last, "cache_control": dict(cache_control)}
    if tools:
        body["tools"] = [
            {
                "name": t.get("function", t).get("name"),
                "description": t.get("function", t).get("description", ""),
                "input_schema": t.get("function", t).get("parameters", {}),
            }
            for t in tools
        ]
    if metadata:
        body["metadata"] = dict(metadata)
    return body


def _usage(usage: Usage, api: str) -> dict[str, Any]:
    if api == "anthropic":
        return {
            "input_tokens": usage.uncached_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "output_tokens": usage.output_tokens,
        }
    return {
        "prompt_tokens": usage.input_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens": usage.output_tokens,
    }


def session_to_log(session: Session, *, api: str | None = None) -> list[dict[str, Any]]:
    """One request-log entry per model call of a session.

    Args:
        session: a loaded session.
        api: `anthropic` or `chat`; default: `anthropic` for Claude Code, else `chat`.
    """
    api = api or ("anthropic" if session.source == "claude-code" else "chat")
    if api not in ("anthropic", "chat"):
        raise ValueError(f"api must be 'anthropic' or 'chat', not {api!r}")
    system, body = split_system(session.messages)
    offset = len(session.messages) - len(body)
    thread = str(session.meta.get("session_uuid") or session.id.split("#", 1)[0])
    metadata = {"session_id": thread}
    # Claude Code marks the system prompt and the last message with the 1-hour TTL.
    marks = {"type": "ephemeral", "ttl": "1h"} if session.source == "claude-code" else None
    entries: list[dict[str, Any]] = []
    for index, message in enumerate(body):
        if message.role != "assistant":
            continue
        recorded = session.call_for(index + offset)
        model = (recorded.model if recorded else None) or session.model
        entry: dict[str, Any] = {
            "api": api,
            "url_path": "/v1/messages" if api == "anthropic" else "/v1/chat/completions",
            "timestamp": recorded.timestamp if recorded else None,
            "request": (
                anthropic_body(
                    system,
                    body[:index],
                    session.tools,
                    model=model,
                    metadata=metadata,
                    cache_control=marks,
                )
                if api == "anthropic"
                else chat_body(system, body[:index], session.tools, model=model, metadata=metadata)
            ),
        }
        if recorded is not None and recorded.usage is not None:
            entry["usage"] = _usage(recorded.usage, api)
        entries.append(entry)
    return entries


def sessions_to_log(sessions: Iterable[Session], *, api: str | None = None) -> list[dict[str, Any]]:
    """Entries of several sessions, each session's calls in order, sessions one after another."""
    return [entry for session in sessions for entry in session_to_log(session, api=api)]


def write_request_log(entries: Iterable[dict[str, Any]], path: str | os.PathLike[str]) -> int:
    """Write entries as JSONL; returns the number of lines."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as fh:
        for entry in entries:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
            count += 1
    return count

"""Turn recorded sessions (`cachepilot_bench.traces`) into JSONL request logs that `audit` reads.

Each assistant message of a session is one model call whose request was everything before
it. Claude Code sessions become Anthropic Messages bodies, others OpenAI Chat bodies; every
line carries the recorded time and usage (provider-shaped) when the trace has them, and the
session's thread key (`metadata.session_id`), so the parts of one Claude Code session split at
an auto-compaction stay one thread and the compaction shows as a break.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cachepilot.audit.convert import anthropic_body, chat_body
from cachepilot.usage import Usage
from cachepilot_bench.traces import Session, split_system

__all__ = ["session_to_log", "sessions_to_log", "write_request_log"]


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

"""Claude Code session transcripts (`~/.claude/projects/<project>/<session>.jsonl`).

One JSON row per event, read in file order (the `parentUuid` chain of these files is linear;
parallel tool results only hang off earlier rows of the same turn). Rules:

- An assistant turn is streamed as several `assistant` rows sharing `message.id`, one content
  block each (text / thinking / tool_use), possibly interleaved with the results of its
  earlier calls. They are merged into one assistant message; the usage is the last row's (the
  only one with the final `output_tokens`; prompt counts are equal on every row), the call
  timestamp the first row's. Rows of model `<synthetic>` (client-made, no model call) are
  dropped.
- `user` rows: `tool_result` blocks become one tool message each (name looked up from the
  call), remaining text / image blocks one user message. `isMeta` rows (hook output, skill
  bodies) are kept: the model sees them.
- `progress`, `file-history-snapshot`, `queue-operation`, `summary` and `system` rows are
  skipped, except `system`/`compact_boundary`, which starts a new session (`<id>#2`, ...)
  whose first user message is the `isCompactSummary` summary (also in
  `meta["compact_summary"]`).
- Sidechain rows (sub-agents) are skipped in a main file; a sub-agent file
  (`subagents/agent-*.jsonl`, all rows sidechain) is a session of its own, `meta["kind"]`
  `"subagent"`, or `"compaction"` for `agent-acompact-*` (the compaction call itself).

The traces hold no system prompt or tool schemas: `meta["first_call_input_tokens"]` is the
recorded prompt size of the first call, from which a simulator can derive the hidden prefix.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.usage import Usage
from cachepilot_bench.traces._common import (
    CallInfo,
    Item,
    TraceError,
    as_dict,
    build_session,
    iso_to_unix,
    join_content,
    read_jsonl,
)
from cachepilot_bench.traces.session import Session

__all__ = ["FORMAT", "load"]

logger = logging.getLogger(__name__)

FORMAT = "claude-code"


@dataclass(slots=True)
class _Turn:
    """One assistant turn being merged from its rows."""

    source_id: str
    """`message.id` shared by the rows of the turn."""
    message_id: str
    """Unique id given to the merged message."""
    parts: list[ContentPart] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    timestamp: float | None = None
    usage: Usage | None = None
    model: str | None = None

    def message(self) -> Message:
        return Message(
            role="assistant",
            content=join_content(self.parts),
            tool_calls=tuple(self.calls),
            id=self.message_id,
        )


@dataclass(slots=True)
class _Segment:
    """The rows of one session: the whole file, or the part between compact boundaries."""

    entries: list[_Turn | Message] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    last_turn: _Turn | None = None


def _image(block: dict[str, Any]) -> ImagePart:
    source = as_dict(block.get("source"))
    if source.get("type") == "url":
        return ImagePart(url=str(source.get("url", "")))
    media_type = str(source.get("media_type") or "image/png")
    return ImagePart(
        url=f"data:{media_type};base64,{source.get('data', '')}", media_type=media_type
    )


def _user_parts(blocks: list[Any]) -> list[ContentPart]:
    parts: list[ContentPart] = []
    for entry in blocks:
        if isinstance(entry, str):
            parts.append(TextPart(entry))
            continue
        block = as_dict(entry)
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(str(block.get("text", ""))))
        elif kind == "image":
            parts.append(_image(block))
        elif block:
            parts.append(TextPart(json.dumps(block, ensure_ascii=False)))
    return parts


def _result_content(raw: Any) -> str | tuple[ContentPart, ...]:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        return join_content(_user_parts(raw))
    return json.dumps(raw, ensure_ascii=False)


def _add_assistant(segment: _Segment, row: dict[str, Any], seen_ids: set[str]) -> None:
    message = as_dict(row.get("message"))
    model = message.get("model")
    if model == "<synthetic>":
        return
    message_id = str(message.get("id") or row.get("uuid") or "")
    turn = segment.last_turn
    if turn is None or turn.source_id != message_id or not message_id:
        unique = message_id or str(row.get("uuid") or "")
        n = 2
        while unique in seen_ids:
            unique = f"{message_id}~{n}"
            n += 1
        seen_ids.add(unique)
        turn = _Turn(
            source_id=message_id, message_id=unique, timestamp=iso_to_unix(row.get("timestamp"))
        )
        segment.entries.append(turn)
        segment.last_turn = turn
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    for entry in blocks:
        block = as_dict(entry)
        kind = block.get("type")
        if kind == "text":
            turn.parts.append(TextPart(str(block.get("text", ""))))
        elif kind == "thinking":
            turn.parts.append(
                ReasoningPart(str(block.get("thinking", "")), signature=block.get("signature"))
            )
        elif kind == "redacted_thinking":
            turn.parts.append(ReasoningPart("", signature=block.get("data")))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            turn.calls.append(
                ToolCall(
                    id=str(block.get("id", "")),
                    name=str(block.get("name", "")),
                    arguments=arguments,
                )
            )
        elif block:
            turn.parts.append(TextPart(json.dumps(block, ensure_ascii=False)))
    usage = message.get("usage")
    if isinstance(usage, dict):
        turn.usage = Usage.from_anthropic(usage)
    if isinstance(model, str):
        turn.model = model


def _add_user(segment: _Segment, row: dict[str, Any], names: dict[str, str]) -> None:
    message = as_dict(row.get("message"))
    content = message.get("content")
    uuid = row.get("uuid")
    ident = str(uuid) if uuid else None
    if row.get("isCompactSummary"):
        if isinstance(content, str):
            segment.meta["compact_summary"] = content
        elif isinstance(content, list):
            parts = _user_parts(content)
            segment.meta["compact_summary"] = "\n".join(
                p.text for p in parts if isinstance(p, TextPart)
            )
    if isinstance(content, str):
        segment.entries.append(Message(role="user", content=content, id=ident))
        return
    if not isinstance(content, list):
        return
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    others = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    for n, block in enumerate(results):
        call_id = str(block.get("tool_use_id", ""))
        segment.entries.append(
            Message(
                role="tool",
                content=_result_content(block.get("content")),
                tool_call_id=call_id,
                name=names.get(call_id),
                id=(f"{ident}:{n}" if len(content) > 1 else ident) if ident else None,
            )
        )
    if others:
        parts = _user_parts(others)
        segment.entries.append(
            Message(
                role="user",
                content=join_content(parts),
                id=f"{ident}:u" if results and ident else ident,
            )
        )


def _file_kind(path: Path, sidechain: bool) -> str:
    if path.name.startswith("agent-acompact"):
        return "compaction"
    if sidechain or path.name.startswith("agent-"):
        return "subagent"
    return "main"


def load(path: Path, rel: str) -> list[Session]:
    """Load one Claude Code JSONL file (one session, plus one per compact boundary).

    Raises:
        TraceError: when the file holds no Claude Code rows.
    """
    rows = [r for r in read_jsonl(path) if isinstance(r, dict)]
    messages_rows = [
        r
        for r in rows
        if r.get("type") in ("user", "assistant") and isinstance(r.get("message"), dict)
    ]
    if not messages_rows:
        raise TraceError("no user/assistant rows")
    sidechain_file = bool(messages_rows[0].get("isSidechain"))
    names: dict[str, str] = {}
    for row in messages_rows:
        if row.get("type") == "assistant":
            for block in row["message"].get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    names[str(block.get("id", ""))] = str(block.get("name", ""))

    segments = [_Segment()]
    seen_ids: set[str] = set()
    for row in rows:
        kind = row.get("type")
        if kind == "system" and row.get("subtype") == "compact_boundary":
            meta: dict[str, Any] = {}
            compact = as_dict(row.get("compactMetadata"))
            if "trigger" in compact:
                meta["compact_trigger"] = compact["trigger"]
            if "preTokens" in compact:
                meta["compact_pre_tokens"] = compact["preTokens"]
            segments.append(_Segment(meta=meta))
            continue
        if kind not in ("user", "assistant") or not isinstance(row.get("message"), dict):
            continue
        if bool(row.get("isSidechain")) != sidechain_file:
            continue
        if kind == "assistant":
            _add_assistant(segments[-1], row, seen_ids)
        else:
            _add_user(segments[-1], row, names)

    first = messages_rows[0]
    base_meta: dict[str, Any] = {"kind": _file_kind(path, sidechain_file)}
    if first.get("sessionId"):
        base_meta["session_uuid"] = first["sessionId"]
    if first.get("agentId"):
        base_meta["agent_id"] = first["agentId"]

    sessions: list[Session] = []
    for n, segment in enumerate(segments):
        items: list[Item] = []
        for entry in segment.entries:
            if isinstance(entry, _Turn):
                items.append((entry.message(), CallInfo(entry.timestamp, entry.usage, entry.model)))
            else:
                items.append((entry, None))
        meta = {**base_meta, **segment.meta}
        if n:
            meta["segment"] = n + 1
        first_usage = next(
            (e.usage for e in segment.entries if isinstance(e, _Turn) and e.usage), None
        )
        if first_usage is not None:
            meta["first_call_input_tokens"] = first_usage.input_tokens
        session = build_session(
            session_id=rel if n == 0 else f"{rel}#{n + 1}",
            source=FORMAT,
            items=items,
            path=path,
            meta=meta,
        )
        if session is None:
            logger.info("%s: segment %d has no model call, skipped", rel, n + 1)
            continue
        sessions.append(session)
    return sessions

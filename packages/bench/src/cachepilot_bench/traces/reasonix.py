"""Reasonix transcripts (`reasonix` JSONL, e.g. its τ-bench runs): DeepSeek calls with real cache
counts.

A file holds one or more runs, each opened by a `{"role": "_meta", "meta": {...}}` line. Then
one event per line: `user`, `assistant_final` (one model call, with DeepSeek `usage` incl.
`prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`), `tool` (the call the preceding
`assistant_final` made, with its `tool` name, `args` and result `content`), and bookkeeping
events (`tool_start`, `status`, `done`, `error`) that repeat or annotate the others and are
skipped. Tool-call ids are not recorded: they are numbered per run (`call_1`, `call_2`, …).
The system prompt and tool schemas are not recorded either (the calibration measures them as
the first call's hidden prefix; for the `baseline` mode, which rebuilds them on every user
turn, `meta["hidden_prefix_changes"] = "per-user-turn"`). Runs with no model call (one that
failed at once) are dropped.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from cachepilot.messages import Message, ToolCall
from cachepilot.usage import Usage
from cachepilot_bench.traces._common import (
    CallInfo,
    Item,
    TraceError,
    as_dict,
    build_session,
    iso_to_unix,
    read_jsonl,
    unique_ids,
)
from cachepilot_bench.traces.session import Session

__all__ = ["FORMAT", "load"]

logger = logging.getLogger(__name__)

FORMAT = "reasonix"
_SKIPPED = frozenset({"tool_start", "status", "done", "error"})


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict) or "prompt_tokens" not in raw:
        return None
    try:
        return Usage.from_openai_chat(raw)
    except ValueError as exc:
        logger.debug("reasonix: unusable usage record: %s", exc)
        return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _Run:
    """One run's events turned into transcript items."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.items: list[Item] = []
        self._open: tuple[str, CallInfo | None] | None = None  # assistant text awaiting calls
        self._calls: list[ToolCall] = []
        self._results: list[Message] = []
        self._ids = 0

    def _flush(self) -> None:
        if self._open is None:
            return
        text, info = self._open
        self.items.append((Message("assistant", text, tool_calls=tuple(self._calls)), info))
        self.items.extend((result, None) for result in self._results)
        self._open, self._calls, self._results = None, [], []

    def event(self, row: dict[str, Any]) -> None:
        role = row.get("role")
        if role == "user":
            self._flush()
            self.items.append((Message("user", _text(row.get("content"))), None))
        elif role == "assistant_final":
            self._flush()
            usage = _usage(row.get("usage"))
            model = row.get("model") if isinstance(row.get("model"), str) else None
            info = CallInfo(timestamp=iso_to_unix(row.get("ts")), usage=usage, model=model)
            self._open = (_text(row.get("content")), None if info.empty else info)
        elif role == "tool":
            if self._open is None:
                logger.debug("reasonix: a tool result without a model call before it; skipped")
                return
            self._ids += 1
            call_id = f"call_{self._ids}"
            name = str(row.get("tool") or "tool")
            args = row.get("args")
            arguments = args if isinstance(args, str) else json.dumps(as_dict(args))
            self._calls.append(ToolCall(call_id, name, arguments or "{}"))
            self._results.append(
                Message("tool", _text(row.get("content")), tool_call_id=call_id, name=name)
            )
        elif role not in _SKIPPED:
            logger.debug("reasonix: unknown event role %r skipped", role)

    def done(self) -> list[Item]:
        self._flush()
        return self.items


def _runs(rows: list[Any]) -> list[_Run]:
    runs: list[_Run] = []
    current: _Run | None = None
    for raw in rows:
        row = as_dict(raw)
        if row.get("role") == "_meta":
            current = _Run(as_dict(row.get("meta")))
            runs.append(current)
        elif current is not None:
            current.event(row)
    return runs


def load(path: Path, rel: str) -> list[Session]:
    """Load every run of a Reasonix transcript file.

    Raises:
        TraceError: when the file has no `_meta` line (not a Reasonix transcript).
    """
    runs = _runs(read_jsonl(path))
    if not runs:
        raise TraceError("no '_meta' line: not a Reasonix transcript")
    suffixes = [
        "-".join(str(r.meta[k]) for k in ("mode", "repeat") if r.meta.get(k) is not None)
        or f"run{n}"
        for n, r in enumerate(runs, 1)
    ]
    ids = [rel] if len(runs) == 1 else unique_ids(rel, suffixes)
    sessions: list[Session] = []
    for session_id, run in zip(ids, runs, strict=True):
        model = run.meta.get("model") if isinstance(run.meta.get("model"), str) else None
        meta: dict[str, Any] = {
            k: run.meta[k] for k in ("task", "mode", "repeat", "source") if k in run.meta
        }
        if meta.get("mode") == "baseline":
            # Reasonix's cache-hostile baseline rebuilds its system prompt (a fresh timestamp)
            # and reshuffles its tools on every user turn; neither is in the transcript.
            meta["hidden_prefix_changes"] = "per-user-turn"
        session = build_session(
            session_id=session_id,
            source=FORMAT,
            items=run.done(),
            path=path,
            model=model,
            meta=meta,
        )
        if session is not None:
            sessions.append(session)
    return sessions

"""`cachepilot inspect`: a thread's pilot state and plan as a readable report.

What was reduced, evicted, folded, when and why (plan epochs and scheduler decisions), the
biggest archived artifacts, the token distribution of the thread's messages, usage and hit
rate. Sources:

- a JSON file: a `PilotState` (`PilotState.model_dump(mode="json")`), graph-state channel
  values holding one under `"cachepilot"` (and the `"messages"`), or `{thread: state, ...}`;
- an Agents SDK state database: the `cachepilot_state` table the `cachepilot_agents` plugin
  keeps beside an `SQLiteSession` (read with `sqlite3`, no SDK needed);
- a LangGraph SQLite checkpoint database (`SqliteSaver`), read by the reader the LangGraph
  plugin registers (`cachepilot.inspect` entry points; `cachepilot_langgraph.inspect`): decoded
  as plain data, nothing in the file is imported or run, and what could not be decoded is named
  in the report. Without `cachepilot-langgraph` installed the command says to install it;
- in code, any LangGraph checkpointer: `cachepilot_langgraph.inspect.from_checkpointer`.

The command never changes its inputs: databases (the source and `--store`) are opened
read-only (`cachepilot.artifacts.sqlite_readonly`): no migration, no retention run, no access
counting, and the files stay byte-identical.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TextIO

from cachepilot.artifacts import ArtifactStore
from cachepilot.artifacts.sqlite_readonly import connect_read_only
from cachepilot.messages import Message
from cachepilot.pilot.facade import PilotState
from cachepilot.sim import DEFAULT_PROFILE, get_profile
from cachepilot.state.base import RESERVED_PREFIX
from cachepilot.support.redact import redact, redact_slice
from cachepilot.tokens import TokenCounter, get_counter
from cachepilot.usage import Usage

__all__ = [
    "INSPECT_ENTRY_POINTS",
    "STATE_KEY",
    "CheckpointReader",
    "InspectedThread",
    "add_inspect_parser",
    "cmd_inspect",
    "format_inspect",
    "from_channel_values",
    "inspect_report",
    "load_threads",
]

logger = logging.getLogger(__name__)

STATE_KEY = "cachepilot"
"""Graph-state key under which the LangGraph plugin keeps the thread's `PilotState`."""
_AGENTS_TABLE = "cachepilot_state"
_SQLITE_MAGIC = b"SQLite format 3\x00"
INSPECT_ENTRY_POINTS = "cachepilot.inspect"
"""Entry-point group of checkpoint readers: `langgraph` reads LangGraph checkpoint databases."""


@dataclass(slots=True)
class InspectedThread:
    """One thread found in a source."""

    thread: str
    source: str
    state: PilotState
    messages: list[Message] | None = None
    """The thread's messages, when the source holds them (LangGraph channel values)."""
    updated_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


CheckpointReader = Callable[[sqlite3.Connection, Path, str | None], list[InspectedThread]]
"""Reads the threads (all, or the one named) of a checkpoint database opened read-only."""


# --------------------------------------------------------------------------------------------
# Loading


def _state(data: Any, where: str) -> PilotState:
    if isinstance(data, str | bytes):
        data = json.loads(data)
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: not a pilot state")
    try:
        return PilotState.model_validate(data)
    except ValueError as exc:
        raise ValueError(f"{where}: not a valid pilot state ({exc})") from exc


def _looks_like_state(data: Mapping[str, Any]) -> bool:
    return "plan" in data and ("canonical" in data or "calls" in data)


def _duck_messages(raw: Any) -> list[Message] | None:
    """Messages from LangChain message objects or message dicts (no LangChain import)."""
    if not isinstance(raw, list):
        return None
    roles = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}
    out: list[Message] = []
    for item in raw:
        if isinstance(item, Mapping):
            kind = item.get("type") or item.get("role")
            content = item.get("content", "")
            call_id = item.get("tool_call_id")
            name = item.get("name")
        else:
            kind = getattr(item, "type", None)
            content = getattr(item, "content", "")
            call_id = getattr(item, "tool_call_id", None)
            name = getattr(item, "name", None)
        role = roles.get(str(kind), str(kind))
        if role not in ("user", "assistant", "tool", "system"):
            continue
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        if role == "tool":
            out.append(Message("tool", text, tool_call_id=str(call_id or "?"), name=name))
        else:
            out.append(Message(role, text))  # type: ignore[arg-type]
    return out


def from_channel_values(
    values: Mapping[str, Any], thread: str, source: str
) -> InspectedThread | None:
    """The thread held in graph-state channel values (None without a pilot state)."""
    raw = values.get(STATE_KEY)
    if raw is None:
        return None
    return InspectedThread(
        thread, source, _state(raw, source), messages=_duck_messages(values.get("messages"))
    )


def _agents_threads(
    conn: sqlite3.Connection, path: Path, thread: str | None
) -> list[InspectedThread]:
    query = f"SELECT thread, state, updated_at FROM {_AGENTS_TABLE}"
    rows = conn.execute(query).fetchall()
    return [
        InspectedThread(str(t), f"{path.name} ({_AGENTS_TABLE})", _state(s, str(t)), None, u)
        for t, s, u in rows
        if (thread is None or t == thread)
        and not _is_family(s)
        and not str(t).startswith(RESERVED_PREFIX)
    ]


def _is_family(saved: object) -> bool:
    """A proxy family document (`cachepilot.proxy.families`), not a thread's state."""
    return isinstance(saved, str) and saved.startswith('{"cachepilot_family"')


def _checkpoint_reader() -> CheckpointReader | None:
    """The LangGraph checkpoint reader a plugin registers (`cachepilot.inspect` entry points)."""
    for entry in entry_points(group=INSPECT_ENTRY_POINTS):
        if entry.name != "langgraph":
            continue
        try:
            reader: CheckpointReader = entry.load()
        except ImportError as exc:
            logger.warning("cannot load the %s checkpoint reader: %s", entry.value, exc)
            return None
        return reader
    return None


def _sqlite_threads(path: Path, thread: str | None) -> list[InspectedThread]:
    conn = connect_read_only(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if _AGENTS_TABLE in tables:
            return _agents_threads(conn, path, thread)
        if "checkpoints" not in tables:
            raise ValueError(
                f"{path}: neither an Agents SDK state database ({_AGENTS_TABLE}) nor a "
                "LangGraph checkpoint database (checkpoints)"
            )
        reader = _checkpoint_reader()
        if reader is None:
            raise ValueError(
                f"{path} is a LangGraph checkpoint database: install cachepilot-langgraph "
                "to inspect it"
            )
        return reader(conn, path, thread)
    finally:
        conn.close()


def load_threads(path: str | os.PathLike[str], thread: str | None = None) -> list[InspectedThread]:
    """Every thread with a pilot state in a JSON file or an SQLite database.

    Raises:
        ValueError: when the file is missing, unreadable or holds no pilot state.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such file: {file}")
    with file.open("rb") as fh:
        head = fh.read(16)
    if head == _SQLITE_MAGIC:
        found = _sqlite_threads(file, thread)
    else:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{file}: not JSON and not an SQLite database ({exc})") from exc
        found = _json_threads(data, file, thread)
    if not found:
        which = f" for thread {thread!r}" if thread else ""
        raise ValueError(f"{file}: no pilot state found{which}")
    return found


def _json_threads(data: Any, file: Path, thread: str | None) -> list[InspectedThread]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{file}: expected a JSON object")
    name = thread or file.stem
    if _looks_like_state(data):
        return [InspectedThread(name, file.name, _state(data, file.name))]
    single = from_channel_values(data, name, file.name)
    if single is not None:
        return [single]
    out: list[InspectedThread] = []
    for key, value in data.items():
        if (thread is not None and key != thread) or not isinstance(value, Mapping):
            continue
        if _looks_like_state(value):
            out.append(InspectedThread(str(key), file.name, _state(value, str(key))))
        else:
            nested = from_channel_values(value, str(key), file.name)
            if nested is not None:
                out.append(nested)
    return out


# --------------------------------------------------------------------------------------------
# Report


def _clip(text: str, limit: int = 100) -> str:
    """One line of at most `limit` characters, credential shapes replaced."""
    text = " ".join(text.split())
    return redact(text) if len(text) <= limit else redact_slice(text, 0, limit - 1) + "…"


def inspect_report(
    item: InspectedThread,
    *,
    store: ArtifactStore | None = None,
    provider: str = DEFAULT_PROFILE,
    counter: TokenCounter | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """The report of one thread as a JSON-ready dict (see `format_inspect`)."""
    counter = counter or get_counter()
    state = item.state
    usage = Usage.from_dict(state.usage)
    profile = get_profile(provider)
    cost = profile.cost(usage)
    epochs = []
    for epoch in state.plan.epochs:
        kinds = Counter(edit.kind for edit in epoch.edits)
        epochs.append(
            {
                "index": epoch.index,
                "reason": epoch.reason,
                "edits": dict(kinds),
                "tokens_after": sum(counter.count(edit.text) for edit in epoch.edits),
                "items": [
                    {
                        "kind": edit.kind,
                        "key": edit.key,
                        "end_key": edit.end_key,
                        "ref": edit.ref,
                        "text": _clip(edit.text),
                    }
                    for edit in epoch.edits
                ],
            }
        )
    segments = list(state.lifecycle.segments.values())
    lifecycle = Counter(f"{s.kind}:{s.state.value}" for s in segments)
    evicted = [
        {"id": s.id, "label": _clip(s.label, 80), "reason": _clip(s.reason, 200)}
        for s in segments
        if s.kind == "unit" and s.state.value == "evictable"
    ]
    doc: dict[str, Any] = {
        "thread": item.thread,
        "source": item.source,
        "calls": state.calls,
        "revision": getattr(state, "revision", None),
        "last_request_time": state.last_request_time,
        "usage": usage.to_dict(),
        "hit_rate": usage.hit_rate,
        "cost_usd": cost.total_usd,
        "provider": profile.name,
        "recalls": state.recalls,
        "tools_fingerprint": state.tools_fingerprint,
        "canonical": {
            "values": {k: redact(str(v)) for k, v in state.canonical.values.items()},
            "placement": state.canonical.placement,
            "refreshes": state.canonical.epoch,
            "tool_changes": state.canonical.tool_changes,
        },
        "epochs": epochs,
        "edits": dict(Counter(e.kind for ep in state.plan.epochs for e in ep.edits)),
        "decisions": [d.model_dump(mode="json") for d in state.decisions],
        "lifecycle": dict(sorted(lifecycle.items())),
        "evicted_units": evicted,
        "artifacts": None,
        "tokens": None,
        "not_decoded": item.extra.get("not_decoded"),
    }
    if store is not None:
        try:
            infos = store.list(item.thread)
        except Exception as exc:  # a broken archive must not hide the rest of the report
            logger.warning("cannot list the artifacts of %s: %s", item.thread, exc)
            infos = []
        infos.sort(key=lambda a: a.size, reverse=True)
        doc["artifacts"] = {
            "count": len(infos),
            "bytes": sum(a.size for a in infos),
            "biggest": [
                {
                    "ref": a.ref,
                    "tool": a.tool,
                    "size": a.size,
                    "reason": a.meta.get("reason"),
                    "reduced_chars": a.meta.get("reduced_chars"),
                    "access_count": a.access_count,
                }
                for a in infos[:top]
            ],
        }
    if item.messages:
        by_role: Counter[str] = Counter()
        by_tool: Counter[str] = Counter()
        for message in item.messages:
            n = counter.count_message(message)
            by_role[message.role] += n
            if message.role == "tool":
                by_tool[message.name or "?"] += n
        doc["tokens"] = {
            "total": sum(by_role.values()),
            "by_role": dict(by_role.most_common()),
            "by_tool": dict(by_tool.most_common(top)),
        }
    return doc


def format_inspect(doc: Mapping[str, Any]) -> str:
    """The readable report of `inspect_report`."""
    u = doc["usage"]
    lines = [
        f"thread {doc['thread']} ({doc['source']})",
        *(
            [f"  not decoded (left out, nothing run): {doc['not_decoded']}"]
            if doc.get("not_decoded")
            else []
        ),
        f"  calls {doc['calls']} | prompt {u['input_tokens']:,} | cached {u['cached_tokens']:,} "
        f"({100 * doc['hit_rate']:.1f}%) | written {u['cache_write_tokens']:,} | output "
        f"{u['output_tokens']:,} | ${doc['cost_usd']:.4f} ({doc['provider']}) | recalls "
        f"{doc['recalls']}",
    ]
    canon = doc["canonical"]
    if canon["values"]:
        lines.append(
            f"  frozen volatile values ({canon['placement'] or 'no block yet'}, refreshed "
            f"{canon['refreshes']}x): " + ", ".join(sorted(canon["values"]))
        )
    if canon["tool_changes"]:
        lines.append(f"  tool set changed {canon['tool_changes']} time(s) mid-thread")
    edits = ", ".join(f"{k} {v}" for k, v in sorted(doc["edits"].items())) or "none"
    lines.append(f"  plan: {len(doc['epochs'])} epoch(s); edits: {edits}")
    for epoch in doc["epochs"]:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(epoch["edits"].items())) or "no edit"
        lines.append(f"    epoch {epoch['index']} ({epoch['reason']}): {kinds}")
        for edit in epoch["items"][:8]:
            span = f"{edit['key']}..{edit['end_key']}" if edit["end_key"] else edit["key"]
            lines.append(f"      {edit['kind']:<5} {span}: {edit['text']}")
        if len(epoch["items"]) > 8:
            lines.append(f"      … {len(epoch['items']) - 8} more")
    applied = [d for d in doc["decisions"] if d.get("apply")]
    if doc["decisions"]:
        lines.append(
            f"  scheduler: {len(doc['decisions'])} recent decision(s), {len(applied)} applied"
        )
        for d in doc["decisions"][-8:]:
            verdict = "apply" if d.get("apply") else "wait "
            lines.append(
                f"    call {d['call']:>4} {verdict} {d['reason']}: removes "
                f"{d.get('removed_tokens', 0):,} tokens, re-miss {d.get('remiss_tokens', 0):,}; "
                f"saves ${d.get('saving_usd', 0.0):.4f} vs costs ${d.get('cost_usd', 0.0):.4f}"
            )
    if doc["lifecycle"]:
        lines.append("  lifecycle: " + ", ".join(f"{k} {v}" for k, v in doc["lifecycle"].items()))
        for unit in doc["evicted_units"][:8]:
            lines.append(f"    evictable {unit['label']} ({unit['reason']})")
    arts = doc.get("artifacts")
    if arts is not None:
        lines.append(f"  archive: {arts['count']} artifact(s), {arts['bytes']:,} bytes")
        for a in arts["biggest"]:
            lines.append(
                f"    {a['ref']} {a['tool'] or '?':<12} {a['size']:>10,} bytes → "
                f"{a['reduced_chars'] or '?'} chars ({a['reason'] or '-'}), recalled "
                f"{a['access_count']}x"
            )
    tokens = doc.get("tokens")
    if tokens:
        roles = ", ".join(f"{k} {v:,}" for k, v in tokens["by_role"].items())
        lines.append(f"  tokens in view: {tokens['total']:,} ({roles})")
        if tokens["by_tool"]:
            lines.append(
                "    by tool: " + ", ".join(f"{k} {v:,}" for k, v in tokens["by_tool"].items())
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# CLI


def add_inspect_parser(sub: Any) -> None:
    """Add the `inspect` subcommand."""
    from cachepilot.sim import PROFILES

    p = sub.add_parser(
        "inspect",
        help="a thread's pilot state and plan as a readable report",
        description="Show what cachepilot did in a thread: usage and hit rate, plan epochs "
        "(what was pruned, evicted, folded, when and why), scheduler decisions, lifecycle, "
        "the biggest archived artifacts and the token distribution. SOURCE: a JSON state "
        "file, an Agents SDK state database or a LangGraph SQLite checkpoint database.",
    )
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("--thread", help="only this thread (default: every thread in SOURCE)")
    p.add_argument(
        "--store",
        metavar="PATH",
        help="artifact archive (SQLite) to list the biggest artifacts from (read-only)",
    )
    p.add_argument("--provider", default=DEFAULT_PROFILE, choices=sorted(PROFILES))
    p.add_argument("--top", type=int, default=10, help="artifacts and tools listed (default 10)")
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write JSON ('-': stdout)")


def cmd_inspect(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run `cachepilot inspect`; returns the exit status."""
    if args.top < 1:
        raise ValueError("--top must be >= 1")
    threads = load_threads(args.source, args.thread)
    store = None
    if args.store:
        if not Path(args.store).is_file():
            raise ValueError(f"no such artifact archive: {args.store}")
        from cachepilot.artifacts.sqlite_readonly import ReadOnlySQLiteArtifactStore

        store = ReadOnlySQLiteArtifactStore(args.store)
    try:
        docs = [
            inspect_report(t, store=store, provider=args.provider, top=args.top) for t in threads
        ]
    finally:
        if store is not None:
            store.close()
    if args.json_path == "-":
        out.write(json.dumps(docs, indent=2, default=str) + "\n")
        return 0
    out.write("\n\n".join(format_inspect(d) for d in docs) + "\n")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(docs, indent=2, default=str) + "\n", "utf-8")
        out.write(f"wrote {args.json_path}\n")
    return 0

"""`cachepilot inspect` on LangGraph checkpoints: SQLite checkpoint databases and checkpointers.

The core's `cachepilot inspect` finds `read_checkpoint_database` through the `cachepilot.inspect`
entry point this package declares. Databases are decoded as plain data by
`cachepilot_langgraph.checkpoint_reader` (nothing in the file is imported or run; what could
not be decoded is named in the report). `from_checkpointer` reads a thread from any LangGraph
checkpointer in code, decoded by that checkpointer's own serializer: use it on your own
checkpoints.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from cachepilot.diagnose.inspect import STATE_KEY, InspectedThread, from_channel_values
from cachepilot_langgraph import checkpoint_reader

__all__ = ["from_checkpointer", "read_checkpoint_database"]

logger = logging.getLogger(__name__)


def from_checkpointer(checkpointer: Any, thread_id: str) -> InspectedThread:
    """The pilot state of a thread from any LangGraph checkpointer (`get_tuple`).

    Raises:
        ValueError: when the thread has no checkpoint or no pilot state.
    """
    found = checkpointer.get_tuple({"configurable": {"thread_id": thread_id}})
    if found is None:
        raise ValueError(f"no checkpoint for thread {thread_id!r}")
    values = found.checkpoint.get("channel_values", {})
    inspected = from_channel_values(values, thread_id, type(checkpointer).__name__)
    if inspected is None:
        raise ValueError(f"thread {thread_id!r} has no '{STATE_KEY}' state in its checkpoint")
    return inspected


def read_checkpoint_database(
    conn: sqlite3.Connection, path: Path, thread: str | None
) -> list[InspectedThread]:
    """Threads with a pilot state in a LangGraph SQLite checkpoint database (read-only `conn`)."""
    out: list[InspectedThread] = []
    for tid in checkpoint_reader.thread_ids(conn):
        if thread is not None and tid != thread:
            continue
        try:
            decoded = checkpoint_reader.latest_channel_values(conn, tid)
        except ValueError as exc:
            logger.warning("thread %s: %s", tid, exc)
            continue
        if decoded is None:
            continue
        skipped = decoded.describe_skipped()
        if skipped:
            logger.warning("thread %s: not decoded (left out, nothing run): %s", tid, skipped)
        item = from_channel_values(decoded.value, tid, path.name)
        if item is None:
            logger.info("thread %r has no '%s' state in its checkpoint", tid, STATE_KEY)
            continue
        if skipped:
            item.extra["not_decoded"] = skipped
        out.append(item)
    return out

"""The SQLite connections a thread keeps open, shared by every `SQLiteStateStore` of the process.

A connection opened and closed per statement cost more than the statement, so each thread
keeps its connections open. They are kept per thread and file, not per store: stores are made
per session (the Agents SDK plugin makes a companion store for every session it serves, and
keeps it), and a connection per store and thread held two files open per store, so a server
with a few hundred sessions ran out of file descriptors. A thread keeps at most `MAX_FILES`
connections (the least recently used is closed first), and drops one when the file at its
path is no longer the one it opened (moved away, replaced), in a forked child (the parent's
connection is never used there), and after a failed statement (rolled back and closed). A
thread's connections are closed when the thread ends (the last one to close a file folds its
log back in and removes it).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["MAX_FILES", "connection", "file_id"]

MAX_FILES = 8
"""Connections one thread keeps open (to as many files or `synchronous` settings)."""

_local = threading.local()


@dataclass(frozen=True, slots=True)
class _Held:
    conn: sqlite3.Connection
    pid: int
    """The process that opened it (a forked child must not use it)."""
    file: tuple[int, int] | None
    """Device and inode of the file it opened."""


def file_id(path: str) -> tuple[int, int] | None:
    """Device and inode of the file at `path` (None: there is none)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _drop(held: _Held) -> None:
    # Closed only in the process that opened it: in a forked child it is left alone.
    if held.pid == os.getpid():
        with contextlib.suppress(sqlite3.Error):
            held.conn.close()


class _Kept(OrderedDict[tuple[str, str], _Held]):
    """One thread's connections, the least recently used first; closed when the thread ends
    (a connection is in a reference cycle of its own, so left alone it stays open, its files
    with it, until a garbage collection finds it)."""

    def __del__(self) -> None:
        try:
            for held in self.values():
                _drop(held)
        except Exception:  # at interpreter exit the module may be torn down
            pass


def _kept() -> _Kept:
    kept: _Kept | None = getattr(_local, "kept", None)
    if kept is None:
        kept = _Kept()
        _local.kept = kept
    return kept


@contextlib.contextmanager
def connection(
    path: str, synchronous: str, open_connection: Callable[[], sqlite3.Connection]
) -> Iterator[sqlite3.Connection]:
    """This thread's connection to the file now at `path` with `synchronous`, opened with
    `open_connection` when there is none to reuse. A statement that fails in the block rolls
    back and closes it (the next call opens another)."""
    kept = _kept()
    key = (path, synchronous)
    current = file_id(path)
    held = kept.pop(key, None)
    if held is not None and (held.pid != os.getpid() or held.file != current):
        _drop(held)
        held = None
    if held is None:
        conn = open_connection()
        # The file seen before opening: one replaced meanwhile then differs at the next call
        # (the connection is opened again), never the other way round. A file the opening
        # made is only seen after it.
        held = _Held(conn, os.getpid(), current if current is not None else file_id(path))
    kept[key] = held  # the most recently used last
    while len(kept) > MAX_FILES:
        _drop(kept.popitem(last=False)[1])
    try:
        yield held.conn
    except BaseException:
        if kept.get(key) is held:
            del kept[key]
        with contextlib.suppress(sqlite3.Error):
            held.conn.rollback()
        _drop(held)
        raise

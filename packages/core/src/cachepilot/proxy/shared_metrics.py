"""Counters that the worker processes of one proxy (`serve(workers=N)`) add up together.

With several workers on one port a scrape of `/metrics` reaches one of them; if each showed
only its own counts, the totals would jump between scrapes (read as counter resets). So each
worker adds every call to one SQLite file the server made for the run (`SharedCounters`), and
whichever worker answers a scrape reads the sums over all workers: totals are exact and
monotonic, a replaced worker's counts included. Rows are per worker and per thread label
(`""` for the totals), so a worker writes only its own rows and never waits on another's
transaction for long. Thread labels are salted digests (never names).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["COLUMNS", "SharedCounters"]

COLUMNS: tuple[str, ...] = (
    "calls",
    "prompt_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "input_cost_usd",
    "recalls",
    "epochs",
)
"""The counted fields, in the order `add` takes and `totals` gives them."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS counters (worker TEXT NOT NULL, thread TEXT NOT NULL, "
    + ", ".join(f"{c} REAL NOT NULL DEFAULT 0" for c in COLUMNS)
    + ", last REAL NOT NULL DEFAULT 0, PRIMARY KEY (worker, thread))"
)
_GAUGES = (
    "CREATE TABLE IF NOT EXISTS gauges (worker TEXT PRIMARY KEY, pid INTEGER NOT NULL, "
    "threads_in_memory INTEGER NOT NULL)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedCounters:
    """One worker's handle on the run's shared counters file.

    Args:
        path: the SQLite file (made by the server before it starts the workers).
        worker: this worker's name (default: its process id).
    """

    def __init__(self, path: Path | str, worker: str | None = None) -> None:
        self.path = Path(path)
        self.worker = worker or str(os.getpid())
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=OFF")  # a run's counters: no crash durability
        with self._conn:
            self._conn.execute(_SCHEMA)
            self._conn.execute(_GAUGES)

    def add(self, values: Sequence[float], thread: str | None = None) -> None:
        """Add one call's `values` (in `COLUMNS` order) to the totals and, when given, to
        the thread label's row."""
        if len(values) != len(COLUMNS):
            raise ValueError(f"expected {len(COLUMNS)} values, got {len(values)}")
        names = ", ".join(COLUMNS)
        marks = ", ".join("?" for _ in COLUMNS)
        update = ", ".join(f"{c} = {c} + excluded.{c}" for c in COLUMNS)
        sql = (
            f"INSERT INTO counters (worker, thread, {names}, last) VALUES (?, ?, {marks}, ?) "
            f"ON CONFLICT (worker, thread) DO UPDATE SET {update}, last = excluded.last"
        )
        now = time.time()
        rows = [(self.worker, "", *values, now)]
        if thread is not None:
            rows.append((self.worker, thread, *values, now))
        with self._lock, self._conn:
            self._conn.executemany(sql, rows)

    def set_threads_in_memory(self, count: int) -> None:
        """This worker's count of threads held in memory (a gauge)."""
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT INTO gauges (worker, pid, threads_in_memory) VALUES (?, ?, ?) "
                "ON CONFLICT (worker) DO UPDATE SET threads_in_memory = excluded.threads_in_memory",
                (self.worker, os.getpid(), count),
            )

    def totals(self, max_threads: int) -> tuple[list[float], list[tuple[str, list[float]]]]:
        """(the totals over every worker, the `max_threads` most recently active thread
        labels' totals over every worker)."""
        sums = ", ".join(f"SUM({c})" for c in COLUMNS)
        with self._lock:
            row = self._conn.execute(f"SELECT {sums} FROM counters WHERE thread = ''").fetchone()
            rows = self._conn.execute(
                f"SELECT thread, {sums} FROM counters WHERE thread != '' GROUP BY thread "
                "ORDER BY MAX(last) DESC LIMIT ?",
                (max_threads,),
            ).fetchall()
        totals = [float(v or 0) for v in row]
        threads = [(str(r[0]), [float(v or 0) for v in r[1:]]) for r in reversed(rows)]
        return totals, threads

    def threads_in_memory(self) -> int:
        """Threads held in memory by the workers that are running."""
        with self._lock:
            rows: Iterable[tuple[int, int]] = self._conn.execute(
                "SELECT pid, threads_in_memory FROM gauges"
            ).fetchall()
        return sum(count for pid, count in rows if _alive(int(pid)))

    def close(self) -> None:
        """Close this worker's connection."""
        with self._lock:
            self._conn.close()

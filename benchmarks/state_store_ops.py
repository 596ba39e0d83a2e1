"""What one save of a thread's document costs the SQLite state store, wall and CPU time.

A proxied request reads its thread's stored version and saves the thread twice (before it is
sent and once answered): this times `save_if` followed by `version` over a document of the
given size, `--saves` times, with the store's `synchronous` setting `FULL` and `NORMAL`.

Run: uv run python benchmarks/state_store_ops.py [--size 43000] [--saves 200] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cachepilot.state.base import SQLiteStateStore


def measure(directory: Path, size: int, saves: int, synchronous: str) -> dict[str, float]:
    store = SQLiteStateStore(directory / f"state-{synchronous}.sqlite", synchronous=synchronous)
    document = "x" * size
    version = 0
    walls: list[float] = []
    cpus: list[float] = []
    for n in range(saves):
        wall, cpu = time.perf_counter(), time.thread_time()
        saved = store._save_if("t", f"{document}{n}", version)
        if saved is None:
            raise RuntimeError("a save over the last version was refused")
        version = saved
        store._version("t")
        walls.append(1000 * (time.perf_counter() - wall))
        cpus.append(1000 * (time.thread_time() - cpu))
    ordered = sorted(walls)
    return {
        "wall_p50_ms": statistics.median(walls),
        "wall_p95_ms": ordered[round(0.95 * (len(ordered) - 1))],
        "cpu_p50_ms": statistics.median(cpus),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=43_000)
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--dir", type=Path, help="where the files go (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for synchronous in ("FULL", "NORMAL"):
            row = measure(Path(tmp), args.size, args.saves, synchronous)
            print(json.dumps({"synchronous": synchronous, **row}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

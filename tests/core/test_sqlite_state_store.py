"""The SQLite state store keeps a connection per thread, and still reads the file at its path."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from cachepilot.state.base import SQLiteStateStore


def test_a_replaced_file_is_read_not_the_one_the_connection_opened(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = SQLiteStateStore(path)
    asyncio.run(store.save("t", "old"))
    assert asyncio.run(store.load("t")) == "old"
    for suffix in ("", "-wal", "-shm"):
        moved = Path(str(path) + suffix)
        if moved.exists():
            moved.rename(str(moved) + ".away")
    assert asyncio.run(store.load("t")) is None  # a new, empty file at the path
    asyncio.run(store.save("t", "new"))
    other = sqlite3.connect(path)
    try:
        assert other.execute("SELECT state FROM cachepilot_state").fetchall() == [("new",)]
    finally:
        other.close()


def test_a_directory_where_the_file_was_fails_every_call_until_it_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = SQLiteStateStore(path)
    asyncio.run(store.save("t", "kept"))
    for suffix in ("", "-wal", "-shm"):
        moved = Path(str(path) + suffix)
        if moved.exists():
            moved.rename(str(moved) + ".away")
    path.mkdir()
    with pytest.raises(sqlite3.Error):
        asyncio.run(store.load("t"))
    with pytest.raises(sqlite3.Error):
        asyncio.run(store.save_if("t", "lost", 0))
    path.rmdir()
    for suffix in ("", "-wal", "-shm"):
        away = Path(str(path) + suffix + ".away")
        if away.exists():
            away.rename(str(path) + suffix)
    assert asyncio.run(store.load("t")) == "kept"


def test_threads_saving_over_versions_lose_no_save(tmp_path: Path) -> None:
    store = SQLiteStateStore(tmp_path / "state.sqlite", synchronous="FULL")
    done: list[int] = []
    lock = threading.Lock()

    def worker(name: int) -> None:
        for _ in range(20):
            while True:
                text, version = store._load_versioned("t")
                count = int(text or "0")
                if store._save_if("t", str(count + 1), version) is not None:
                    break
            with lock:
                done.append(name)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(done) == 80
    assert asyncio.run(store.load("t")) == "80"


def test_a_bad_synchronous_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStateStore(tmp_path / "state.sqlite", synchronous="OFF")

"""The SQLite state store keeps a connection per thread, and still reads the file at its path."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cachepilot.state.base import SQLiteStateStore
from cachepilot.state.sqlite_connections import MAX_FILES, connection


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


def _open_files(under: Path) -> int:
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(str(under)):
                count += 1
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_many_stores_alive_keep_a_bounded_number_of_files_open(tmp_path: Path) -> None:
    # A companion store per session (the Agents SDK plugin keeps one per thread it serves):
    # hundreds alive at once, on one file or on a file each, must not hold a connection each.
    shared = [SQLiteStateStore(tmp_path / "one.sqlite") for _ in range(300)]
    own = [SQLiteStateStore(tmp_path / f"own_{n}.sqlite") for n in range(60)]

    async def use_all() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
        for n, store in enumerate([*shared, *own]):
            await store.save(f"t{n}", str(n))
            assert await store.load(f"t{n}") == str(n)
        # While the threads are alive: at most MAX_FILES connections each (a database file,
        # its log and its shared-memory file open per connection at most).
        assert _open_files(tmp_path) <= 2 * MAX_FILES * 3

    asyncio.run(use_all())
    # Every store still reads and writes its file.
    assert asyncio.run(shared[0].load("t299")) == "299"
    assert asyncio.run(own[0].load("t300")) == "300"
    assert asyncio.run(own[59].load("t359")) == "359"


def test_a_file_replaced_while_its_connection_opens_is_not_taken_for_the_old_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    store = SQLiteStateStore(path)
    asyncio.run(store.save("t", "old"))
    newer = sqlite3.connect(tmp_path / "newer.sqlite")  # a whole file, no log beside it
    newer.execute("CREATE TABLE cachepilot_state (thread TEXT PRIMARY KEY, state TEXT NOT NULL, "
                  "updated_at REAL NOT NULL, version INTEGER NOT NULL DEFAULT 0)")  # fmt: skip
    newer.execute("INSERT INTO cachepilot_state VALUES ('t', 'new', 0, 1)")
    newer.commit()
    newer.close()

    def open_then_replace() -> sqlite3.Connection:
        conn = store._open()  # opened on the old file...
        for suffix in ("-wal", "-shm"):  # ...which is replaced at once, with its log
            moved = Path(str(path) + suffix)
            if moved.exists():
                moved.rename(str(moved) + ".away")
        os.replace(tmp_path / "newer.sqlite", path)
        return conn

    with connection(str(path), store.synchronous, open_then_replace) as conn:
        assert conn.execute("SELECT state FROM cachepilot_state").fetchall() == [("old",)]
    # The connection opened on the old file must not serve the file now at the path.
    assert store._load("t") == "new"  # this thread, which holds that connection


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connection_and_the_parent_keeps_working(
    tmp_path: Path,
) -> None:
    store = SQLiteStateStore(tmp_path / "state.sqlite")
    store._save("t", "parent")  # this thread's connection, opened before the fork
    pid = os.fork()
    if pid == 0:  # the child: the parent's connection is not used here
        code = 1
        try:
            if store._load("t") == "parent":
                for n in range(20):
                    store._save(f"child{n}", "x")
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for n in range(20):
        store._save(f"parent{n}", "y")
    assert store._load("child19") == "x"
    check = sqlite3.connect(tmp_path / "state.sqlite")
    try:
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert check.execute("SELECT count(*) FROM cachepilot_state").fetchone() == (41,)
    finally:
        check.close()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_a_thread_that_ends_leaves_no_file_open(tmp_path: Path) -> None:
    # asyncio.run's worker threads end with the loop: their connections must close with them,
    # not when a garbage collection happens to find them (a connection is in a cycle).
    store = SQLiteStateStore(tmp_path / "state.sqlite")
    gc.disable()
    try:
        asyncio.run(store.save("t", "saved"))
        worker = threading.Thread(target=store._save, args=("u", "saved"))
        worker.start()
        worker.join()
        assert _open_files(tmp_path) == 0
    finally:
        gc.enable()
    assert asyncio.run(store.load("u")) == "saved"

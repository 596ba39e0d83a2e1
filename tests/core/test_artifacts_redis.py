"""What only the Redis artifact store has to get right: thread ids in keys, processes racing
on one server, counters, and the `--store redis://` wiring (the shared contract runs in
test_artifacts.py on every store kind)."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachepilot.artifacts.base import REMOVED_BY_RETENTION, REMOVED_BY_SIZE
from cachepilot.artifacts.redis import RedisArtifactStore
from cachepilot.proxy.stores import open_stores

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from server_helpers import redis_url_or_skip

redis = pytest.importorskip("redis")


@pytest.fixture
def prefix() -> Iterator[tuple[str, str]]:
    """The shared server's URL and a key prefix of this test's own (removed afterwards)."""
    url = redis_url_or_skip()
    name = f"cachepilot-test:{uuid.uuid4().hex}"
    yield url, name
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)
    client.close()


def test_thread_ids_with_separators_and_nul_do_not_collide(prefix: tuple[str, str]) -> None:
    url, name = prefix
    threads = ["a:b", "a", "a:b:c", "a\x00b", "a\x00", "é:x", "é"]
    with RedisArtifactStore(url, prefix=name) as store:
        refs = {t: store.put(t, f"payload of {t!r}") for t in threads}
        for t in threads:
            assert [info.ref for info in store.list(t)] == [refs[t]]
            got = store.get(t, refs[t])
            assert got is not None and got.thread == t and got.text == f"payload of {t!r}"
        assert store.delete_thread("a:b") == 1
        assert all(len(store.list(t)) == 1 for t in threads if t != "a:b")


def test_processes_racing_one_put_store_it_once(prefix: tuple[str, str]) -> None:
    url, name = prefix
    stores = [RedisArtifactStore(url, prefix=name) for _ in range(4)]
    payloads = [f"output {n} " * 50 for n in range(30)]
    barrier = threading.Barrier(len(stores))

    def put_all(store: RedisArtifactStore) -> None:
        barrier.wait()
        for payload in payloads:
            store.put("t", payload)

    workers = [threading.Thread(target=put_all, args=(s,)) for s in stores]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    infos = stores[0].list("t")
    assert len(infos) == len(payloads)
    assert stores[0].total_bytes == sum(len(p.encode()) for p in payloads)
    for store in stores:
        store.close()


def test_prune_applies_the_thread_cap_lowered_later(prefix: tuple[str, str]) -> None:
    url, name = prefix
    now = [1000.0]
    with RedisArtifactStore(url, prefix=name, clock=lambda: now[0]) as loose:
        refs = []
        for n in range(4):
            now[0] += 1
            refs.append(loose.put("t", "x" * 100 + str(n)))
    with RedisArtifactStore(
        url, prefix=name, max_bytes_per_thread=250, clock=lambda: now[0]
    ) as tight:
        assert tight.prune() == 2
        assert [info.ref for info in tight.list("t")] == refs[2:]
        assert tight.removed("t", refs[0]) == REMOVED_BY_SIZE
        assert tight.total_bytes == 202


def test_a_client_that_decodes_responses_is_refused() -> None:
    url = redis_url_or_skip()
    client = redis.Redis.from_url(url, decode_responses=True)
    with pytest.raises(ValueError, match="bytes"):
        RedisArtifactStore(client)
    client.close()


def test_store_url_without_the_redis_package_says_which_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.delitem(sys.modules, "cachepilot.artifacts.redis", raising=False)
    with pytest.raises(ValueError, match=r"cachepilot\[redis\]"):
        open_stores("redis://127.0.0.1:6379/0")


def test_a_bad_redis_url_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Redis URL"):
        open_stores("redis://127.0.0.1:notaport/0")


def test_retention_removes_more_than_one_batch(
    prefix: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import cachepilot.artifacts.redis as module

    monkeypatch.setattr(module, "_BATCH", 3)
    url, name = prefix
    now = [1000.0]
    with RedisArtifactStore(url, prefix=name, retention_seconds=60, clock=lambda: now[0]) as store:
        refs = [store.put(f"t{n % 2}", f"payload {n}") for n in range(7)]
        now[0] += 61
        keep = store.put("t0", "fresh")
        assert store.prune() == 7  # three script runs of at most 3
        assert [info.ref for info in store.list("t0")] == [keep]
        assert store.list("t1") == []
        assert all(store.removed(f"t{n % 2}", ref) == REMOVED_BY_RETENTION
                   for n, ref in enumerate(refs))  # fmt: skip
        assert store.total_bytes == len(b"fresh")

"""A proxy started while its store cannot be reached: it starts, logs a clear line, answers
503 with `Retry-After` (sending nothing upstream) until the store answers, then serves
without a restart, byte for byte as a process started with the store up. SQLite (a directory
where the file should be: it can be neither opened nor created, until it is taken away), and
real PostgreSQL and Redis servers stopped, then started (skipped without them)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from fault_helpers import HoldingUpstream, leaks, post, proxy_process
from test_proxy_faults import CALLS, STORES, _Outage, forbidden, reference, stored_thread
from test_proxy_replicas import session


@pytest.mark.parametrize("kind", STORES)
def test_a_proxy_starts_without_its_store_and_recovers(kind: str, tmp_path: Path) -> None:
    if kind == "postgres":
        pytest.importorskip("psycopg")
    bodies = session(CALLS)
    expected = reference(kind, tmp_path, bodies)
    outage = _Outage(kind, tmp_path)
    upstream = HoldingUpstream()
    logs = tmp_path / "proxy.log"
    try:
        outage.down()
        with proxy_process(upstream.url, outage.url, logs) as proxy:
            assert httpx.get(f"{proxy.root}/healthz", timeout=10).status_code == 200
            for _ in range(2):
                refused = post(proxy.root, bodies[0])
                assert refused.status_code == 503
                assert refused.headers["retry-after"] == "1"
                assert "store is unavailable" in refused.json()["error"]["message"]
            assert upstream.bodies == []  # nothing was sent upstream
            outage.up()
            for body in bodies:
                for _ in range(50):  # a client's retries while connections come back
                    answer = post(proxy.root, body)
                    if answer.status_code == 200:
                        break
                    assert answer.status_code == 503, answer.text
                    time.sleep(0.2)
                else:
                    raise AssertionError("the proxy did not recover")
        saved = stored_thread(outage.url)
    finally:
        upstream.close()
        outage.close()
    assert list(upstream.bodies) == expected
    assert saved["calls"] == CALLS and saved["usage"]["input_tokens"] == CALLS * 1000
    text = logs.read_text(errors="replace")
    assert "cannot be reached at start" in text
    assert "answers again" in text
    assert leaks(logs, forbidden()) == []

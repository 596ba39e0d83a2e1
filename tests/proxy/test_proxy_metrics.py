"""`/metrics` for operators: Prometheus text, no raw thread names or key digests, a Host check
against DNS rebinding, an optional scrape token; no client ids or thread names in logs."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_helpers import parse_prometheus as parse
from proxy_helpers import running_proxy
from scripts import BASH, BIG, CALL, SYSTEM, plain_script

from cachepilot.proxy import ProxyConfig
from cachepilot.proxy.secret import SECRET_THREAD, Secret
from cachepilot_bench.replay import ReplayProvider

THREAD = "alice-private-thread"
KEY = "sk-test-guessable-key"


def _body() -> dict[str, Any]:
    return {
        "model": "m",
        "tools": [BASH],
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Build the project."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": CALL.id, "type": "function",
                 "function": {"name": "bash", "arguments": CALL.arguments}}]},
            {"role": "tool", "tool_call_id": CALL.id, "content": BIG},
        ],
    }  # fmt: skip


def _call(proxy_url: str, headers: dict[str, str]) -> None:
    reply = httpx.post(f"{proxy_url}/chat/completions", json=_body(), headers=headers, timeout=30)
    assert reply.status_code == 200


def test_metrics_speak_prometheus_without_names_or_key_digests() -> None:
    with (
        ReplayProvider(plain_script()) as upstream,
        running_proxy(upstream.base_url, metrics_per_thread=True) as proxy,
    ):
        _call(proxy.base_url, {"x-cachepilot-thread": THREAD, "authorization": f"Bearer {KEY}"})
        reply = httpx.get(f"{proxy.root}/metrics", timeout=30)
        names = proxy.engine.threads.names()
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = parse(reply.text)
    calls = dict(families["cachepilot_proxy_model_calls_total"])
    assert calls[f'provider="{ProxyConfig(upstream="http://x").provider}"'] == 1
    assert any('thread="t' in labels for labels in calls)  # the per-thread sample, labelled
    assert families["cachepilot_proxy_prompt_tokens_total"][0][1] > 0
    # Neither the thread's name, nor the key, nor a digest anyone could recompute.
    assert len(names) == 1 and THREAD in names[0]
    for secret in (THREAD, KEY, names[0], names[0].split("/")[0]):
        assert secret not in reply.text
    for value in (KEY, f"Bearer {KEY}", THREAD):
        assert hashlib.sha256(value.encode()).hexdigest()[:12] not in reply.text


def test_per_thread_detail_is_off_by_default() -> None:
    with (
        ReplayProvider(plain_script()) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        _call(proxy.base_url, {"x-cachepilot-thread": THREAD})
        families = parse(httpx.get(f"{proxy.root}/metrics", timeout=30).text)
    assert all("thread=" not in labels for f in families.values() for labels, _ in f)
    assert families["cachepilot_proxy_threads_in_memory"][0][1] == 1


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8787", "127.0.0.2"])
def test_a_foreign_host_is_refused(host: str) -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        refused = httpx.get(f"{proxy.root}/metrics", headers={"host": host}, timeout=30)
        allowed = httpx.get(f"{proxy.root}/metrics", headers={"host": "localhost"}, timeout=30)
    assert refused.status_code == 421 and "cachepilot_proxy" not in refused.text
    assert allowed.status_code == 200


def test_allowed_hosts_and_the_scrape_token() -> None:
    token = "scrape-token-0123456789"
    settings = {"allowed_hosts": ("metrics.internal",), "metrics_token": token}
    with (
        ReplayProvider(plain_script()) as upstream,
        running_proxy(upstream.base_url, **settings) as proxy,
    ):
        url = f"{proxy.root}/metrics"
        host = {"host": "metrics.internal:9000"}
        loopback = httpx.get(url, headers={"authorization": f"Bearer {token}"}, timeout=30)
        anonymous = httpx.get(url, headers=host, timeout=30)
        wrong = httpx.get(url, headers={**host, "authorization": "Bearer nope"}, timeout=30)
        right = httpx.get(url, headers={**host, "authorization": f"Bearer {token}"}, timeout=30)
    assert loopback.status_code == 421  # only the configured names once any is given
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert right.status_code == 200 and "cachepilot_proxy_model_calls_total" in right.text


def test_bad_metrics_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="metrics-token"):
        ProxyConfig(upstream="http://x", metrics_token="short")
    with pytest.raises(ValueError, match="allowed-host"):
        ProxyConfig(upstream="http://x", allowed_hosts=("a b",))


class _BrokenStore:
    """Gives the proxy its secret, and fails on every thread."""

    secret = Secret.generate().to_json()

    async def load(self, thread: str) -> str | None:
        if thread == SECRET_THREAD:
            return self.secret
        raise OSError("disk gone")

    async def save(self, thread: str, state: str) -> None:
        raise OSError("disk gone")

    async def delete(self, thread: str) -> None:
        raise OSError("disk gone")


def test_warnings_name_no_thread_and_no_call_id(caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.INFO, logger="cachepilot"),
        ReplayProvider(plain_script()) as upstream,
        running_proxy(upstream.base_url, state_store=_BrokenStore()) as proxy,  # type: ignore[arg-type]
    ):
        headers = {"x-cachepilot-thread": THREAD}
        url = f"{proxy.base_url}/chat/completions"
        reply = httpx.post(url, json=_body(), headers=headers, timeout=30)
    # Refused, not served from a state only this process would have.
    assert reply.status_code == 503 and "state store is unavailable" in reply.text
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert any("failed" in line for line in shown)  # the store failures were reported
    assert not any(THREAD in line or CALL.id in line for line in shown)


def test_maintenance_points_are_counted() -> None:
    from test_proxy_replicas import Upstream, engine, send, session

    async def go(tmp: Path) -> tuple[int, str]:
        proxy = engine(tmp, Upstream())
        for body in session(40):
            await send(proxy, body)
        [name] = proxy.threads.names()
        epochs = len(proxy.pilot.state(name).plan.epochs)
        text = proxy.metrics.render(provider="p", label=proxy.label, threads_in_memory=1)
        await proxy.aclose()
        return epochs, text

    with tempfile.TemporaryDirectory() as tmp:
        epochs, text = asyncio.run(go(Path(tmp)))
    counted = dict(parse(text)["cachepilot_proxy_maintenance_epochs_total"])
    assert epochs >= 1 and counted['provider="p"'] == epochs

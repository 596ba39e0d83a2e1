"""The proxy's /metrics counts the recalls it answered itself (alone or next to a client
call), once each."""

from __future__ import annotations

import httpx
import pytest
from proxy_helpers import parse_prometheus, running_proxy
from scripts import recall_script
from test_proxy_stream_order import _body

from cachepilot_bench.replay import ReplayProvider


@pytest.mark.parametrize("mixed", [False, True])
def test_metrics_count_the_recalls_the_proxy_answered(mixed: bool) -> None:
    with (
        ReplayProvider(recall_script(mixed=mixed)) as upstream,
        running_proxy(upstream.base_url, metrics_per_thread=True) as proxy,
    ):
        path, body = _body("chat")
        body = {**body, "stream": False}
        first = httpx.post(proxy.root + path, json=body, timeout=30).json()
        if mixed:  # the client answers its own call; the recall answer goes up with it
            message = first["choices"][0]["message"]
            [call] = message["tool_calls"]
            follow = [
                *body["messages"],
                message,
                {"role": "tool", "tool_call_id": call["id"], "content": "ok"},
            ]
            httpx.post(proxy.root + path, json={**body, "messages": follow}, timeout=30)
        metrics = parse_prometheus(httpx.get(proxy.root + "/metrics", timeout=10).text)
        calls = len(upstream.records)

    def per_thread(family: str) -> float:
        [value] = [v for labels, v in metrics[family] if 'thread="' in labels]
        return value

    assert per_thread("cachepilot_proxy_recalls_total") == 1
    assert per_thread("cachepilot_proxy_model_calls_total") == calls == 2

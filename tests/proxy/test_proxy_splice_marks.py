"""A client's cache mark on a turn the proxy splices (a recall exchange put back) stays on
its block: the proxy never removes or moves a client's mark."""

from __future__ import annotations

import httpx
import pytest
from proxy_helpers import running_proxy
from scripts import FINAL, recall_script
from test_proxy_stream_order import _body

from cachepilot.wire.anthropic import cache_mark_count
from cachepilot_bench.provider_rules import ProviderRules
from cachepilot_bench.replay import ReplayProvider

MARK = {"type": "ephemeral"}


@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_mark_on_a_spliced_turn_reaches_the_upstream(stream: bool) -> None:
    rules = ProviderRules()
    with (
        ReplayProvider(recall_script(), profile="anthropic", rules=rules) as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        path, body = _body("anthropic")
        body = {**body, "stream": False}
        shown = httpx.post(proxy.root + path, json=body, timeout=30).json()
        assert shown["content"][-1]["text"].endswith(FINAL)
        # The client resends the turn it was shown with its mark on the last block, as
        # Claude Code does with its last two messages.
        resent = [{**b, "cache_control": MARK} if k == len(shown["content"]) - 1 else b
                  for k, b in enumerate(shown["content"])]  # fmt: skip
        follow = [
            *body["messages"],
            {"role": "assistant", "content": resent},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Thanks", "cache_control": MARK}],
            },
        ]
        httpx.post(
            proxy.root + path, json={**body, "messages": follow, "stream": stream}, timeout=30
        )
        records = upstream.records
    assert rules.refusals == []
    last = records[-1].body
    assert cache_mark_count(last) <= 4
    turn = last["messages"][-2]
    assert turn["role"] == "assistant"
    assert turn["content"][-1].get("cache_control") == MARK
    # The recall exchange is back in front of it, as the upstream saw it.
    assert any(
        b.get("type") == "tool_use" and b.get("name") == "recall"
        for m in last["messages"]
        for b in m["content"] if isinstance(b, dict)
    )  # fmt: skip

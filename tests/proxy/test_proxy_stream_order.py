"""Streams the proxy sends its clients keep each API's documented event order, also when it
answered a recall itself and streamed the upstream's next reply in its place."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BASH, BIG, CALL, FLAT_BASH, SYSTEM, recall_script

from cachepilot.wire import sse_events
from cachepilot_bench.provider_rules import ProviderRules
from cachepilot_bench.replay import ReplayProvider
from cachepilot_bench.stream_rules import stream_order_errors


def _body(api: str) -> tuple[str, dict[str, Any]]:
    if api == "chat":
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Build the project."},
            {
                "role": "assistant",
                "content": "Running the build.",
                "tool_calls": [
                    {
                        "id": CALL.id,
                        "type": "function",
                        "function": {"name": CALL.name, "arguments": CALL.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": CALL.id, "content": BIG},
        ]
        body = {"model": "m", "messages": messages, "tools": [BASH], "stream": True}
        return "/v1/chat/completions", body
    if api == "responses":
        items = [
            {"role": "user", "content": "Build the project."},
            {"type": "function_call", "call_id": CALL.id, "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": CALL.id, "output": BIG},
        ]
        body = {"model": "m", "instructions": SYSTEM, "input": items, "tools": [FLAT_BASH]}
        return "/v1/responses", {**body, "stream": True}
    messages = [
        {"role": "user", "content": "Build the project."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the build."},
                {"type": "tool_use", "id": CALL.id, "name": "bash", "input": {"command": "make"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": CALL.id, "content": BIG}],
        },
    ]
    body = {"model": "m", "max_tokens": 256, "system": SYSTEM, "messages": messages}
    return "/v1/messages", {**body, "tools": [ANTHROPIC_BASH], "stream": True}


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_streams_after_a_recall_keep_the_documented_order(api: str, mixed: bool) -> None:
    rules = ProviderRules()
    profile = "anthropic" if api == "anthropic" else "openai-gpt-5.4-mini"
    with (
        ReplayProvider(recall_script(mixed=mixed), profile=profile, rules=rules) as upstream,
        running_proxy(upstream.base_url, provider=profile) as proxy,
    ):
        path, body = _body(api)
        response = httpx.post(proxy.root + path, json=body, timeout=30)
        records = upstream.records
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert stream_order_errors(api, events) == []
    assert rules.refusals == []
    # Alone, the recall is answered at once (two upstream requests, one client stream); next
    # to a client call it is answered with the client's result on the next request.
    assert len(records) == (1 if mixed else 2)
    assert _recall_calls(api, events) == []


def _recall_calls(api: str, events: list[dict[str, Any]]) -> list[Any]:
    """Recall calls the client was shown (the tool itself may be echoed in a response's
    `tools`: it is documented visible)."""
    if api == "chat":
        calls = [
            c
            for e in events
            for choice in e.get("choices") or []
            for c in (choice.get("delta") or {}).get("tool_calls") or []
        ]
        return [c for c in calls if (c.get("function") or {}).get("name") == "recall"]
    if api == "anthropic":
        blocks = [e.get("content_block") or {} for e in events]
        return [b for b in blocks if b.get("name") == "recall"]
    items = [e.get("item") or {} for e in events]
    items += [i for e in events for i in (e.get("response") or {}).get("output") or []]
    return [i for i in items if i.get("name") == "recall"]

"""The real `anthropic` client through the proxy (Messages, streamed and not), upstream =
the replay provider in Anthropic mode with a breakpoint cache profile."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BIG, BIG_REF, CALL, FINAL, plain_script, recall_script

from cachepilot_bench.replay import ReplayProvider

LONG_SYSTEM = "You are a careful build assistant. " + "Follow the house rules. " * 300


def client(root: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=root, api_key="sk-ant-test", max_retries=0, timeout=30)


def history(system_mark: bool = False) -> tuple[Any, list[dict[str, Any]]]:
    system: Any = LONG_SYSTEM
    if system_mark:
        system = [
            {
                "type": "text",
                "text": LONG_SYSTEM,
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            }
        ]
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
    return system, messages


def send(api: anthropic.Anthropic, system: Any, messages: list[Any], *, stream: bool) -> Any:
    kwargs: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 512,
        "system": system,
        "messages": messages,
        "tools": [ANTHROPIC_BASH],
    }
    if stream:
        with api.messages.stream(**kwargs) as events:
            return events.get_final_message()
    return api.messages.create(**kwargs)


def marks(body: dict[str, Any]) -> list[str]:
    """Where the body carries cache_control: 'system', 'tools', or 'message i'."""
    found = []
    if isinstance(body.get("system"), list) and any("cache_control" in b for b in body["system"]):
        found.append("system")
    if any("cache_control" in t for t in body.get("tools") or ()):
        found.append("tools")
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        if isinstance(content, list) and any("cache_control" in b for b in content):
            found.append(f"message {i}")
    return found


@pytest.mark.parametrize("stream", [False, True])
def test_messages_reach_the_client_intact_and_breakpoints_are_added(stream: bool) -> None:
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        api = client(proxy.root)
        system, messages = history()
        first = send(api, system, messages[:1], stream=stream)
        assert [b.type for b in first.content] == ["text", "tool_use"]
        assert first.content[1].id == CALL.id and first.content[1].input == {"command": "make"}
        second = send(api, system, messages, stream=stream)
        assert second.content[0].text == FINAL
        third = send(
            api,
            system,
            [
                *messages,
                {"role": "assistant", "content": FINAL},
                {"role": "user", "content": "Thanks"},
            ],
            stream=stream,
        )
        assert third.content[0].text == "You are welcome."
        records = upstream.records
    assert all(r.prefix_extends for r in records)
    result = records[1].body["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and f'recall(ref="{BIG_REF}")' in result["content"]
    assert len(result["content"]) < len(BIG) // 5
    # Breakpoints where they pay: end of tools + system, and the last message.
    assert marks(records[1].body) == ["system", "message 2"]
    # They paid: the third request read the second one's prefix from the cache.
    assert records[2].usage.cached_tokens >= records[1].usage.input_tokens - 16
    assert third.usage.cache_read_input_tokens == records[2].usage.cached_tokens
    assert [t["name"] for t in records[0].body["tools"]] == ["bash", "recall"]


def test_the_clients_own_breakpoints_are_respected() -> None:
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        system, messages = history(system_mark=True)
        send(client(proxy.root), system, messages[:1], stream=False)
        body = upstream.records[0].body
    assert body["system"] == system  # the client's 1-hour mark, as sent
    # The added mark copies the client's nearest mark, so TTLs never grow along the prompt.
    assert body["messages"][0]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert marks(body) == ["system", "message 0"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_recall_round_trip_is_invisible(stream: bool) -> None:
    with (
        ReplayProvider(recall_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        api = client(proxy.root)
        system, messages = history()
        reply = send(api, system, messages, stream=stream)
        assert all(b.type == "text" for b in reply.content)
        texts = [b.text for b in reply.content]
        assert texts == (["Let me read the log head.", FINAL] if stream else [FINAL])
        follow = [
            *messages,
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in reply.content],
            },
            {"role": "user", "content": "Thanks"},
        ]
        assert send(api, system, follow, stream=stream).content[0].text == "You are welcome."
        records = upstream.records
    answer = records[1].body["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and "00000 compiling" in answer["content"]
    assert all(r.prefix_extends for r in records)
    # Usage: the client is shown what both upstream calls cost.
    total = sum(r.usage.output_tokens for r in records[:2])
    assert reply.usage.output_tokens == total


def test_streamed_mixed_recall_renumbers_the_blocks() -> None:
    with (
        ReplayProvider(recall_script(mixed=True), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        api = client(proxy.root)
        system, messages = history()
        indices = []
        with api.messages.stream(
            model="m", max_tokens=512, system=system, messages=messages, tools=[ANTHROPIC_BASH]
        ) as events:
            for event in events:
                if event.type == "content_block_start":
                    indices.append(event.index)
            reply = events.get_final_message()
        assert indices == [0, 1]
        assert [b.type for b in reply.content] == ["text", "tool_use"]
        assert reply.content[1].id == "call_again"
        follow = [
            *messages,
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in reply.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_again", "content": "ok"}],
            },
        ]
        assert send(api, system, follow, stream=True).content[0].text == FINAL
        records = upstream.records
    sent = records[1].body["messages"]
    assert [b["name"] for b in sent[3]["content"] if b["type"] == "tool_use"] == ["recall", "bash"]
    results = [b["tool_use_id"] for b in sent[4]["content"]]
    assert results == ["call_recall", "call_again"]  # one user turn, recall answer first
    assert all(r.prefix_extends for r in records)

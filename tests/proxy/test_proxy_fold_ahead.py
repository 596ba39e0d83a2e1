"""Folds computed ahead through the proxy (`ProxyConfig.fold_ahead`): a real OpenAI client
runs a growing tool session through a real proxy; the upstream receives byte-identical
bodies whether the proxy computes ahead or not, and with it on, the maintenance points use
the summary stages computed in the background while the upstream answered."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from proxy_helpers import RunningProxy, running_proxy
from scripts import BASH, SYSTEM

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold.ahead import SUMMARY_STAGES
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn

CALLS = 30


@pytest.fixture(autouse=True)
def _fresh_stages() -> Iterator[None]:
    SUMMARY_STAGES.clear()
    yield
    SUMMARY_STAGES.clear()


def script() -> ReplayScript:
    return ReplayScript(
        [
            ReplayTurn(
                Message(
                    "assistant",
                    "",
                    tool_calls=(
                        ToolCall(f"call_{n}", "bash", json.dumps({"command": f"make {n}"})),
                    ),
                )
            )
            for n in range(CALLS)
        ]
    )


def output(n: int) -> str:
    digests = (hashlib.sha256(f"{n}:{i}".encode()).hexdigest()[:24] for i in range(40))
    return "\n".join(f"src/m{n}_{i}.py:{i}: {d} ok" for i, d in enumerate(digests))


def settle(proxy: RunningProxy) -> None:
    """Wait for the background worker (a client that takes longer than it between calls)."""
    deadline = time.monotonic() + 60
    while proxy.engine.pilot.precomputations_pending and time.monotonic() < deadline:
        time.sleep(0.005)


QUEUED: list[str] = []
"""Threads whose next maintenance the last session's pilot queued to compute ahead."""


def session(*, ahead: bool, stream: bool, wait: bool) -> list[str]:
    """The bodies the upstream received for one session."""
    SUMMARY_STAGES.clear()
    QUEUED.clear()
    config = Config(provider="anthropic", maintenance=MaintenanceConfig(fold_min_tokens=1_000))
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    queue = pilot.precompute_soon

    def counted(thread: str = "default") -> Any:
        QUEUED.append(thread)
        return queue(thread)

    pilot.precompute_soon = counted  # type: ignore[method-assign]
    with (
        ReplayProvider(script()) as upstream,
        running_proxy(
            upstream.base_url, pilot=pilot, provider="anthropic", fold_ahead=ahead
        ) as proxy,
    ):
        api = OpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0, timeout=60,
                     default_headers={"X-CachePilot-Thread": "build"})  # fmt: skip
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Fix the build."},
        ]
        for n in range(CALLS):
            if stream:
                calls: dict[int, dict[str, Any]] = {}
                for chunk in api.chat.completions.create(
                    model="m", messages=messages, tools=[BASH], stream=True
                ):
                    for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                        entry = calls.setdefault(delta.index, {"arguments": ""})
                        entry["id"] = delta.id or entry.get("id")
                        if delta.function is not None:
                            entry["name"] = delta.function.name or entry.get("name")
                            entry["arguments"] += delta.function.arguments or ""
                tool_calls = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls.values()
                ]  # fmt: skip
                reply: dict[str, Any] = {"role": "assistant", "content": None,
                                         "tool_calls": tool_calls}  # fmt: skip
            else:
                done = api.chat.completions.create(model="m", messages=messages, tools=[BASH])
                reply = done.choices[0].message.model_dump(exclude_none=True)
            messages.append(reply)
            call_id = reply["tool_calls"][0]["id"]
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output(n)})
            if wait:
                settle(proxy)
        settle(proxy)
        (thread,) = proxy.engine.threads.names()
        decisions = pilot.state(thread).decisions
        assert any(d.apply and d.reason.endswith("fold") for d in decisions), "no fold"
        return [json.dumps(r.body, sort_keys=True) for r in upstream.records]


@pytest.mark.parametrize("stream", [False, True])
def test_the_upstream_receives_the_same_bytes_with_folds_computed_ahead(stream: bool) -> None:
    plain = session(ahead=False, stream=stream, wait=False)
    # Nothing computed ahead without it (asked of this pilot: the stage memo is the process's,
    # and another test's background worker may still be adding to it).
    assert QUEUED == []
    assert session(ahead=True, stream=stream, wait=True) == plain
    assert SUMMARY_STAGES.stats.used >= 3  # maintenance points used what was computed ahead
    # Without waiting for them (the next request arrives at once): the same bytes still.
    assert session(ahead=True, stream=stream, wait=False) == plain

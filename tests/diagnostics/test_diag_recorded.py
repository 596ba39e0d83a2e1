"""Audit cassettes recorded here: the real `openai` client, real HTTP to the loopback replay
provider, vcrpy recording. The audit must agree with the usage the provider served and name
the cause of every break: the demo's system prompt carries the current time (a volatile
value on every call); the same calls prepared by `CachePilot` keep their prefix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import vcr
from openai import OpenAI

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.audit import audit_file, load_calls
from cachepilot.messages import Message
from cachepilot.wire import chat_messages
from cachepilot_bench.demo_workload import (
    DEMO_TOOL_SCHEMAS,
    build_demo_session,
    volatile_system_prompt,
)
from cachepilot_bench.replay import ReplayProvider, ReplayScript

SESSION = build_demo_session()
ASSISTANT_AT = SESSION.assistant_indices
CALLS = 6


def history(call: int) -> list[Message]:
    return SESSION.messages[1 : ASSISTANT_AT[call]]


def record(path: Path, prepare: Any) -> list[Any]:
    """Send the first demo calls through vcrpy to the replay provider; the served usages."""
    usages = []
    recorder = vcr.VCR(record_mode="all", match_on=["method", "path"])
    with ReplayProvider(ReplayScript.from_session(SESSION)) as provider:
        api = OpenAI(base_url=provider.base_url, api_key=provider.api_key, max_retries=0)
        with recorder.use_cassette(str(path)):
            for call in range(CALLS):
                system, messages, tools = prepare(call)
                done = api.chat.completions.create(
                    model="gpt-5.4-mini",
                    messages=chat_messages(system, messages),  # type: ignore[arg-type]
                    tools=tools,
                )
                usages.append(done.usage)
    return usages


def vanilla(call: int) -> tuple[str, list[Message], list[dict[str, Any]]]:
    return volatile_system_prompt(call), history(call), list(DEMO_TOOL_SCHEMAS)


def test_audit_of_a_recorded_vanilla_run(tmp_path: Path) -> None:
    cassette = tmp_path / "vanilla.yaml"
    served = record(cassette, vanilla)
    report = audit_file(cassette)
    assert len(report.calls) == CALLS and len(report.threads) == 1
    # Same requests, same simulator: the audit reproduces what the provider billed.
    for audited, usage in zip(report.calls, served, strict=True):
        assert audited.simulated.input_tokens == usage.prompt_tokens
        assert audited.simulated.cached_tokens == usage.prompt_tokens_details.cached_tokens
        assert audited.call.usage is not None
        assert audited.call.usage.cached_tokens == usage.prompt_tokens_details.cached_tokens
    causes = [(c.explanation.cause, c.explanation.detail) for c in report.breaks if c.explanation]
    assert causes and all(cause == "volatile_value" for cause, _ in causes)
    first = report.breaks[0].explanation
    assert first is not None and first.divergence is not None
    assert first.divergence.area == "system"
    assert first.divergence.previous_snippet != first.divergence.current_snippet


def test_audit_of_a_recorded_cachepilot_run(tmp_path: Path) -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    system_prompts = [volatile_system_prompt(call) for call in range(CALLS)]

    def prepared(call: int) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        return pilot.prepare(system_prompts[call], history(call), DEMO_TOOL_SCHEMAS, thread="t")

    cassette = tmp_path / "cachepilot.yaml"
    record(cassette, prepared)
    report = audit_file(cassette)
    # Call 1 is where the clock first moved: the values move into the context block there (one
    # break, the client's own prompt changed on that call too). The audit sees through the
    # block, keeps one thread and explains the break; every later call extends the one before.
    assert len(report.threads) == 1
    first = report.calls[1].explanation
    assert first is not None and first.cause == "volatile_value"
    causes = [c.explanation.cause for c in report.calls[2:] if c.explanation]
    assert causes == ["none"] * (CALLS - 2)
    assert report.totals["prefix_breaks"] == 1
    # After the move, new tool output is the only miss.
    later = report.calls[2:]
    cached = sum(c.simulated.cached_tokens for c in later)
    assert cached > 0.5 * sum(c.simulated.input_tokens for c in later)
    # The cassette replays offline and audits the same.
    assert len(load_calls(cassette)) == CALLS


# One break: the clock moves at call 1 and the values move into the context block there.
@pytest.mark.cachepilot_audit(max_breaks=1)
def test_plugin_marker_on_a_recorded_cachepilot_run(tmp_path: Path) -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    record(
        tmp_path / "guarded.yaml",
        lambda call: pilot.prepare(
            volatile_system_prompt(call), history(call), DEMO_TOOL_SCHEMAS, thread="t"
        ),
    )

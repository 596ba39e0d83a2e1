"""Real HTTP: the SDK's OpenAI models and the real `openai` client against the replay provider.

Cassettes (``tests/agents/cassettes/*.yaml``) were recorded against the replay provider: the
requests are what the Agents SDK serialized with cachepilot in the loop, the responses what the
provider answered. A cassette that exists is replayed with record mode ``none`` (no network; a
request that differs by one byte matches nothing and fails); a missing one is recorded with
``once``. Requests match on method, path and body (the provider binds a random port).

Re-recording: delete the cassette(s) and run ``uv run pytest tests/agents/test_agents_http.py``
(``CACHEPILOT_RECORD_MODE`` overrides the mode). Against the real API: set ``OPENAI_API_KEY``
and run ``examples/agents_research_coder.py --live`` instead (a real model does not follow a
recorded script, so these exact assertions only hold for the replay provider).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import vcr
from agents_helpers import Clock

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_agents import CachePilotAgents, prompt_cache_key_for
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.frameworks.agents_replay import run_script
from cachepilot_bench.replay import ReplayProvider, ReplayScript

CASSETTES = Path(__file__).resolve().parent / "cassettes"
FULL = ReplayScript.from_session(build_demo_session())
SHORT = ReplayScript(
    FULL.turns[:8], FULL.tool_outputs, FULL.tools, system=FULL.system, prompts=FULL.prompts[:1]
)


def plugin(clock: Any = None) -> CachePilotAgents:
    # The replay provider stands in for OpenAI behind a custom base_url, where the SDK sends no
    # default key: the key is asked for (and the cassettes hold it).
    return CachePilotAgents(
        CachePilot(store=InMemoryArtifactStore()),
        clock=clock or Clock(),
        prompt_cache_key="always",
    )


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_plugin_cuts_input_cost_on_the_demo_session(api: str) -> None:
    with ReplayProvider(FULL) as provider:
        plain = asyncio.run(run_script(FULL, provider, api=api))  # type: ignore[arg-type]
        cp = plugin(provider.clock)
        piloted = asyncio.run(
            run_script(FULL, provider, plugin=cp, api=api, session_id="demo")  # type: ignore[arg-type]
        )
    assert len(plain.records) == len(piloted.records) == len(FULL.turns)
    assert [r.turn for r in piloted.records] == list(range(len(FULL.turns)))
    assert plain.prefix_breaks == 0
    epochs = len(cp.pilot.state("demo").plan.epochs)
    assert 1 <= piloted.prefix_breaks <= epochs  # breaks happen at maintenance points only
    assert piloted.input_cost_usd() < 0.6 * plain.input_cost_usd()
    # Usage recorded by the hooks is what the provider reported over HTTP.
    assert [r.usage for r in cp.requests] == [r.usage for r in piloted.records]
    key = prompt_cache_key_for("demo")
    field = "prompt_cache_key"
    assert all(r.body.get(field) == key for r in piloted.records)  # asked for: always
    assert all(field not in r.body for r in plain.records)
    assert "recall" in str(piloted.records[0].body["tools"])


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_streaming_over_http(api: str) -> None:
    with ReplayProvider(SHORT) as provider:
        cp = plugin(provider.clock)
        run = asyncio.run(run_script(SHORT, provider, plugin=cp, api=api, streamed=True))  # type: ignore[arg-type]
    assert [r.stream for r in run.records] == [True] * len(SHORT.turns)
    assert all(r.prefix_extends for r in run.records[1:])
    assert cp.requests[-1].usage.cached_tokens > 0


# --- cassettes ---------------------------------------------------------------------------------


def cassette(name: str) -> Any:
    path = CASSETTES / f"{name}.yaml"
    mode = os.environ.get("CACHEPILOT_RECORD_MODE") or ("none" if path.exists() else "once")
    return vcr.VCR(
        cassette_library_dir=str(CASSETTES),
        record_mode=mode,
        match_on=("method", "path", "body"),
        filter_headers=["authorization", "x-stainless-os", "x-stainless-arch"],
        decode_compressed_response=True,
    ).use_cassette(f"{name}.yaml")


@pytest.mark.cachepilot_audit(max_breaks=0)
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_cassette_agents_sdk_with_cachepilot(api: str) -> None:
    cp = plugin()
    with ReplayProvider(SHORT) as provider, cassette(f"agents_sdk_{api}_cachepilot"):
        run = asyncio.run(
            run_script(SHORT, provider, plugin=cp, api=api, session_id=f"cassette-{api}")  # type: ignore[arg-type]
        )
    assert run.interrupted == 1  # the short script stops after a tool-call turn
    usage = [r.usage for r in cp.requests]
    assert len(usage) == len(SHORT.turns)
    assert usage[0].cached_tokens == 0 and all(u.cached_tokens > 0 for u in usage[1:])
    assert cp.pilot.state(f"cassette-{api}").calls == len(SHORT.turns)

"""The Agents SDK names that are not public API (`cachepilot_agents._sdk_private`).

Each must resolve in the installed SDK (a release that moves one fails here, first in the
newest-releases job), and each fallback must give the plain SDK's behaviour.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterator
from typing import Any

import agents.usage
import pytest
from agents import Agent, ModelSettings, Runner, function_tool, handoff
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from openai.types.responses import ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_agents import CachePilotAgents, PilotModel, _sdk_private
from cachepilot_agents.state import MemoryStateStore, RedisStateStore, state_store_for


def test_every_private_sdk_name_resolves() -> None:
    assert _sdk_private.missing() == [], "openai-agents moved a name; see docs/compatibility.md"


@pytest.fixture
def without_response_usage(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The module as loaded on an SDK without `agents.usage._response_usage_to_usage`."""
    monkeypatch.delattr(agents.usage, "_response_usage_to_usage")
    importlib.reload(_sdk_private)
    yield
    monkeypatch.undo()
    importlib.reload(_sdk_private)
    assert _sdk_private.missing() == []


def test_a_moved_name_is_reported_and_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with caplog.at_level(logging.WARNING, logger=_sdk_private.__name__):
        monkeypatch.delattr(agents.usage, "_response_usage_to_usage")
        importlib.reload(_sdk_private)
        try:
            assert _sdk_private.missing() == ["agents.usage._response_usage_to_usage"]
            assert "lacks agents.usage._response_usage_to_usage" in caplog.text
        finally:
            monkeypatch.undo()
            importlib.reload(_sdk_private)
    assert _sdk_private.missing() == []


def _usage_payload() -> ResponseUsage:
    return ResponseUsage(
        input_tokens=100,
        output_tokens=5,
        total_tokens=105,
        input_tokens_details=InputTokensDetails(cached_tokens=80, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
    )


def test_usage_round_trips_losslessly() -> None:
    total = Usage(requests=3, input_tokens=300, output_tokens=9, total_tokens=309)
    payload = _usage_payload()
    _sdk_private.attach_usage(payload, total)
    read = _sdk_private.response_usage(payload)
    assert (read.requests, read.input_tokens) == (3, 300)  # the summed usage, not the payload's


@pytest.mark.usefixtures("without_response_usage")
def test_usage_falls_back_to_the_public_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sdk_private, "_ATTACH_USAGE", None)
    payload = _usage_payload()
    _sdk_private.attach_usage(payload, Usage(requests=3, input_tokens=300))  # a no-op
    read = _sdk_private.response_usage(payload)
    assert (read.requests, read.input_tokens, read.output_tokens) == (1, 100, 5)
    assert read.input_tokens_details.cached_tokens == 80


@function_tool
def where() -> str:
    """Say whether the plugin sees the run."""
    return "inside" if _sdk_private.current_run() is not None else "unknown"


def _run_where(cp: CachePilotAgents) -> list[Any]:
    model = ScriptedModel([[function_call("where", "{}", call_id="c1")], [assistant_message("ok")]])
    agent = cp.wrap(Agent(name="x", model=model, tools=[where]))
    result = asyncio.run(Runner.run(agent, "go", run_config=cp.run_config()))
    assert result.final_output == "ok"
    return [i.output for i in result.new_items if getattr(i, "type", "") == "tool_call_output_item"]


def test_the_current_run_is_seen_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    cp = CachePilotAgents(CachePilot(store=InMemoryArtifactStore()))
    assert _sdk_private.current_run() is None  # outside a run
    assert _run_where(cp) == ["inside"]
    assert cp.live_scopes == 0  # the run's own scope ended with it
    monkeypatch.setattr(_sdk_private, "_RUN_VAR", None)
    assert _run_where(cp) == ["unknown"]  # the run goes on: one scope per run config


class _Answers(ScriptedModel):
    def __init__(self, answer: Any, *args: Any) -> None:
        super().__init__(*args)
        self._answer = answer

    def _supports_default_prompt_cache_key(self) -> bool:
        if isinstance(self._answer, Exception):
            raise self._answer
        return bool(self._answer)


def test_the_default_cache_key_rule_is_the_models() -> None:
    assert _sdk_private.sends_default_cache_key(_Answers(True)) is True
    assert _sdk_private.sends_default_cache_key(_Answers(False)) is False
    assert _sdk_private.sends_default_cache_key(_Answers(RuntimeError("x"))) is False
    assert _sdk_private.sends_default_cache_key(ScriptedModel()) is False  # says nothing
    cp = CachePilotAgents(CachePilot(store=InMemoryArtifactStore()))
    assert _sdk_private.sends_default_cache_key(cp.model(_Answers(True))) is True  # the wrapper


def test_handoff_targets_are_reached_and_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    cp = CachePilotAgents(CachePilot(store=InMemoryArtifactStore()))
    target = Agent(name="t", model=ScriptedModel())
    assert _sdk_private.handoff_target(handoff(target)) is target
    assert _sdk_private.handoff_target(object()) is None
    cp.wrap(Agent(name="s", model=ScriptedModel(), handoffs=[handoff(target)]))
    assert type(target.model) is PilotModel and target.model.owner is cp  # via the handoff
    other = Agent(name="o", model=ScriptedModel(), model_settings=ModelSettings())
    monkeypatch.setattr("cachepilot_agents.plugin.handoff_target", lambda _: None)
    cp.wrap(Agent(name="s2", model=ScriptedModel(), handoffs=[handoff(other)]))
    assert type(other.model) is ScriptedModel  # not reached: its model reads the plain input


def test_redis_sessions_keep_their_state_beside_them(monkeypatch: pytest.MonkeyPatch) -> None:
    fakeredis = pytest.importorskip("fakeredis")
    from agents.extensions.memory import RedisSession

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    session = RedisSession("u", redis_client=client, key_prefix="app", ttl=60)
    assert _sdk_private.redis_session_parts(session) == (client, "app", 60)
    fallback = MemoryStateStore()
    assert isinstance(state_store_for(session, fallback), RedisStateStore)
    monkeypatch.setattr("cachepilot_agents.state.redis_session_parts", lambda _: None)
    assert state_store_for(session, fallback) is fallback

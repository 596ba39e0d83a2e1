"""The plugin's stand-ins (session proxy, model wrapper, per-run provider) behave as what they
stand for: the SDK calls them as it calls the originals, and users see the originals."""

from __future__ import annotations

import asyncio
import copy
import gc
import weakref
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.models.multi_provider import MultiProvider
from agents.testing import ScriptedModel, assistant_message

from cachepilot_agents import CachePilotAgents, MemoryStateStore

STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])


async def run(agent: Agent[Any], cp: CachePilotAgents | None, streamed: bool, **kw: Any) -> Any:
    if cp is not None:
        agent = cp.wrap(agent)
        kw["run_config"] = cp.run_config(kw.get("run_config"))
        if kw.get("session") is not None:
            kw["session"] = cp.session(kw["session"])
    if streamed:
        result = Runner.run_streamed(agent, "hi", **kw)
        async for _ in result.stream_events():
            pass
        return result
    return await Runner.run(agent, "hi", **kw)


class LegacySession:
    """A session written against the oldest `Session` shape (no `limit`, no `wrapper`)."""

    def __init__(self) -> None:
        self.session_id = "legacy"
        self.items: list[Any] = []
        self.calls: list[tuple[str, int]] = []

    async def get_items(self) -> list[Any]:
        self.calls.append(("get_items", 0))
        return list(self.items)

    async def add_items(self, items: list[Any]) -> None:
        self.calls.append(("add_items", len(items)))
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


class AwareSession(LegacySession):
    """A session that takes the run context in every history method."""

    def __init__(self) -> None:
        super().__init__()
        self.session_id = "aware"
        self.wrappers: list[Any] = []

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        self.wrappers.append(wrapper)
        return await super().get_items()

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        self.wrappers.append(wrapper)
        await super().add_items(items)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        return await super().pop_item()

    async def clear_session(self, *, wrapper: Any = None) -> None:
        await super().clear_session()


@STREAMED
@pytest.mark.parametrize("kind", [LegacySession, AwareSession])
def test_sessions_get_the_calls_the_sdk_makes_without_cachepilot(
    make_pilot: Any, streamed: bool, kind: type[LegacySession]
) -> None:
    seen: dict[str, LegacySession] = {}
    for name in ("plain", "cp"):
        cp = (
            CachePilotAgents(make_pilot(), state_store=MemoryStateStore()) if name == "cp" else None
        )
        session = seen[name] = kind()
        agent = Agent(name="a", model=ScriptedModel([[assistant_message("ok")]]))
        result = asyncio.run(run(agent, cp, streamed, session=session))
        assert result.final_output == "ok"
    assert seen["plain"].calls == seen["cp"].calls
    assert seen["plain"].items == seen["cp"].items
    if kind is AwareSession:
        plain, piloted = seen["plain"], seen["cp"]
        assert isinstance(plain, AwareSession) and isinstance(piloted, AwareSession)
        assert all(w is not None for w in plain.wrappers + piloted.wrappers)
    assert isinstance(CachePilotAgents(make_pilot()).session(kind()), kind)


def test_wrapped_models_look_like_the_users_and_copy(make_pilot: Any) -> None:
    cp = CachePilotAgents(make_pilot())
    model = ScriptedModel([[assistant_message("ok")]])
    agent = cp.wrap(Agent(name="a", model=model))
    assert isinstance(agent.model, ScriptedModel)  # as the SDK and users check it
    clone = copy.deepcopy(agent)  # e.g. items holding agents are deep-copied
    assert isinstance(clone.model, ScriptedModel) and clone.model is not agent.model
    config = cp.run_config(RunConfig(workflow_name="w"))
    assert copy.deepcopy(config).call_model_input_filter is config.call_model_input_filter
    result = asyncio.run(Runner.run(clone, "hi", run_config=config))
    assert result.final_output == "ok"


@STREAMED
def test_the_agent_is_released_after_the_run(make_pilot: Any, streamed: bool) -> None:
    cp = CachePilotAgents(make_pilot())
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("ok")]]))
    ref = weakref.ref(agent)
    result = asyncio.run(run(agent, cp, streamed))
    assert result.final_output == "ok"
    del agent, result
    gc.collect()
    assert ref() is None


@STREAMED
def test_a_run_closes_the_provider_it_creates_when_agents_hold_models(
    make_pilot: Any, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[MultiProvider] = []

    async def record(provider: MultiProvider) -> None:
        closed.append(provider)

    monkeypatch.setattr(MultiProvider, "aclose", record)
    counts = []
    for cp in (None, CachePilotAgents(make_pilot())):
        closed.clear()
        for _ in range(2):
            agent = Agent(name="a", model=ScriptedModel([[assistant_message("ok")]]))
            asyncio.run(run(agent, cp, streamed))
        counts.append(len(closed))
    assert counts == [2, 2]

"""`CachePilotMiddleware` computes ahead, after each answer, what the next maintenance point
will most likely need (`MaintenanceConfig.fold_ahead`): a real `create_agent` run sends
byte-identical requests with it on and off, sync and async, and what it computed is used."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import ScriptedChatModel, coding_responder, flaky, read_note, run_command

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold.ahead import SUMMARY_STAGES
from cachepilot_langgraph import CachePilotMiddleware


@pytest.fixture(autouse=True)
def _fresh_stages() -> Iterator[None]:
    SUMMARY_STAGES.clear()
    yield
    SUMMARY_STAGES.clear()


def _run(
    *,
    ahead: bool,
    scripted: Any,
    use_async: bool,
    monkeypatch: pytest.MonkeyPatch,
    slow_tools: bool = False,
) -> tuple[str, CachePilot]:
    SUMMARY_STAGES.clear()
    # Message ids the same in every run (LangGraph draws tool messages' from uuid4): the
    # archived ranges, and so the refs in the requests, depend on them.
    ids = itertools.count()
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(ids)))
    config = Config(maintenance={"fold_min_tokens": 1_000, "fold_ahead": ahead})
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    pending: list[Future[bool]] = []
    if slow_tools:  # the tools take longer than the computation: the next call finds it done
        soon = pilot.precompute_soon

        def recorded(thread: str = "default") -> Future[bool] | None:
            future = soon(thread)
            if future is not None:
                pending.append(future)
            return future

        monkeypatch.setattr(pilot, "precompute_soon", recorded)
    inner = coding_responder(30)

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        answer = inner(messages, i)
        answer.id = f"ai-{i}"
        return answer

    model: ScriptedChatModel = scripted(respond)

    agent = create_agent(
        model,
        [run_command, read_note, flaky],
        system_prompt="You are a careful coding agent.",
        middleware=[CachePilotMiddleware(pilot), *([_Waiting(pending)] if slow_tools else [])],
        checkpointer=InMemorySaver(),
    )
    inputs = {"messages": [HumanMessage("fix the build", id="task")]}
    config_ = {"configurable": {"thread_id": "t"}}
    if use_async:
        asyncio.run(agent.ainvoke(inputs, config_))
    else:
        agent.invoke(inputs, config_)
    return json.dumps(model.requests), pilot


class _Waiting(AgentMiddleware):  # type: ignore[type-arg]
    """Before each model call, waits for what was computed ahead (tools slower than it)."""

    def __init__(self, pending: list[Future[bool]]) -> None:
        super().__init__()
        self.pending = pending

    def before_model(self, state: Any, runtime: Any) -> None:
        for future in self.pending:
            future.result(timeout=120)

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        self.before_model(state, runtime)


def test_requests_are_the_same_with_folds_computed_ahead(
    scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = {"scripted": scripted, "monkeypatch": monkeypatch}
    plain, pilot = _run(ahead=False, use_async=False, **run)
    assert any(d.apply and d.reason.endswith("fold") for d in pilot.state("t").decisions)
    assert pilot.precompute_soon("t") is None  # off: nothing is computed in the background
    # (SUMMARY_STAGES' stats are per process: another test's worker may still be computing.)
    assert pilot.precomputations_pending == 0
    assert _run(ahead=True, use_async=False, **run)[0] == plain
    assert _run(ahead=True, use_async=True, **run)[0] == plain


@pytest.mark.parametrize("use_async", [False, True])
def test_what_was_computed_ahead_is_used_when_the_tools_take_longer(
    scripted: Any, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    run = {"scripted": scripted, "monkeypatch": monkeypatch}
    plain, _ = _run(ahead=False, use_async=use_async, **run)
    sent, _ = _run(ahead=True, use_async=use_async, slow_tools=True, **run)
    assert sent == plain
    assert SUMMARY_STAGES.stats.used > 0

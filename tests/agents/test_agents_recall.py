"""The model wrapper: recall answered inside the model call, kept in later views, usage summed,
and context-length recovery (emergency fold, persisted, one retry)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, Runner, SQLiteSession, function_tool
from agents.stream_events import RunItemStreamEvent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage as SdkUsage
from agents_helpers import dumps, is_prefix, pairing_problems
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from transparency_helpers import REF, recall_then_answer

from cachepilot import PilotState
from cachepilot_agents import CachePilotAgents, SQLiteStateStore

STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])


def log_text(tag: str) -> str:
    return "\n".join(
        f"{tag} step {i:05d}: checksum {i * 104_729 % 1_000_003}" for i in range(4_000)
    )


@function_tool
def build(target: str) -> str:
    """Build a target (long log)."""
    return log_text(target)


@function_tool
def read_source(path: str) -> str:
    """Read a source file (a few thousand characters, shown as is)."""
    return "\n".join(f"{path}:{i}: value_{i} = compute({i}, {path!r})" for i in range(150))


def usage(tokens: int) -> SdkUsage:
    return SdkUsage(
        requests=1,
        input_tokens=tokens,
        output_tokens=10,
        total_tokens=tokens + 10,
        input_tokens_details=InputTokensDetails(cached_tokens=tokens // 2, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
    )


async def drive(
    agent: Agent[Any], task: str, cp: CachePilotAgents, streamed: bool, **kw: Any
) -> Any:
    if streamed:
        result = Runner.run_streamed(agent, task, run_config=cp.run_config(), **kw)
        events = [e async for e in result.stream_events()]
        return result, events
    return await Runner.run(agent, task, run_config=cp.run_config(), **kw), []


@STREAMED
def test_a_recall_stays_in_the_view_and_the_run_never_sees_it(
    make_pilot: Any, streamed: bool
) -> None:
    respond = ModelStep.respond(recall_then_answer("built"))
    model = ScriptedModel(
        [
            [function_call("build", {"target": "a"}, call_id="b1")],
            respond,  # recall a's ref (answered inside the model call)...
            [function_call("build", {"target": "b"}, call_id="b2")],  # ...then act
            respond,  # recall b's ref
            respond,  # answer
        ],
        default_usage=usage(1_000),
    )
    cp = CachePilotAgents(make_pilot(), default_thread="view")
    agent = cp.wrap(Agent(name="builder", tools=[build], model=model))
    result, events = asyncio.run(drive(agent, "build a and b", cp, streamed))
    assert result.final_output == "built"
    calls = model.calls
    assert len(calls) == 5  # 3 turns, 2 of them with a recall round inside
    for previous, current in itertools.pairwise(calls):
        assert is_prefix(previous.input, current.input)  # the exchange stays in the view
        assert pairing_problems(list(current.input)) == []
    names = [getattr(i.raw_item, "name", None) for i in result.new_items]
    assert "recall" not in names
    assert [type(i).__name__ for i in result.new_items].count("ToolCallItem") == 2
    tool_events = [
        e for e in events if isinstance(e, RunItemStreamEvent) and e.name == "tool_called"
    ]
    assert all(getattr(e.item.raw_item, "name", None) == "build" for e in tool_events)
    # Every request is accounted: the SDK's totals include the recall rounds.
    total = result.context_wrapper.usage
    assert total.requests == 5 and total.input_tokens == 5_000
    assert len(cp.requests) == 5
    assert [r.usage.requests for r in result.raw_responses] == [1, 2, 2]


@STREAMED
def test_a_recall_mixed_with_other_calls_is_answered_first(make_pilot: Any, streamed: bool) -> None:
    seen: list[Any] = []

    def mixed(call: Any) -> Any:
        ref = REF.findall(str(call.input))[0]
        return [
            function_call("build", {"target": "too-early"}, call_id="early"),
            function_call("recall", {"ref": ref}, call_id="r1"),
        ]

    def after(call: Any) -> Any:
        seen.append(call.input)
        return [assistant_message("done")]

    model = ScriptedModel(
        [
            [function_call("build", {"target": "a"}, call_id="b1")],
            ModelStep.respond(mixed),
            ModelStep.respond(after),
        ]
    )
    cp = CachePilotAgents(make_pilot(), default_thread="mixed")
    agent = cp.wrap(Agent(name="builder", tools=[build], model=model))
    result, _ = asyncio.run(drive(agent, "build", cp, streamed))
    assert result.final_output == "done"
    ids = [i.get("call_id") for i in seen[0] if isinstance(i, dict)]
    assert "early" not in ids and ids.count("r1") == 2  # the unrun call was dropped
    raw = [i.raw_item for i in result.new_items]
    call_ids = [
        r.get("call_id") if isinstance(r, dict) else getattr(r, "call_id", None) for r in raw
    ]
    assert call_ids == ["b1", "b1", None]  # build, its output, the final message


def test_a_new_process_shows_the_recall_exchange_again(make_pilot: Any, tmp_path: Path) -> None:
    db = tmp_path / "s.db"

    def first_run() -> ScriptedModel:
        respond = ModelStep.respond(recall_then_answer("done"))
        model = ScriptedModel(
            [[function_call("build", {"target": "a"}, call_id="b1")], respond, respond]
        )
        cp = CachePilotAgents(make_pilot())
        agent = cp.wrap(Agent(name="builder", tools=[build], model=model))
        session = cp.session(SQLiteSession("proc", db))
        asyncio.run(Runner.run(agent, "build", run_config=cp.run_config(), session=session))
        return model

    first = first_run()
    second = ScriptedModel([[assistant_message("again")]])
    cp2 = CachePilotAgents(make_pilot())  # a new process: new pilot, same archive and session
    agent2 = cp2.wrap(Agent(name="builder", tools=[build], model=second))
    session2 = cp2.session(SQLiteSession("proc", db))
    asyncio.run(Runner.run(agent2, "and now?", run_config=cp2.run_config(), session=session2))
    assert is_prefix(first.calls[-1].input, second.calls[0].input)


# --- context-length recovery -------------------------------------------------------------------


def context_error(kind: str) -> Exception:
    if kind == "openai":
        request = httpx.Request("POST", "https://api.openai.com/v1/responses")
        return openai.BadRequestError(
            "This model's maximum context length is 128000 tokens.",
            response=httpx.Response(400, request=request),
            body={"error": {"code": "context_length_exceeded", "type": "invalid_request_error"}},
        )
    if kind == "anthropic":
        return RuntimeError("Error code: 400 - prompt is too long: 210000 tokens > 200000 maximum")

    class ContextWindowExceededError(Exception):  # LiteLLM's wrapper, by name
        pass

    return ContextWindowExceededError("litellm.ContextWindowExceededError: too long")


@STREAMED
@pytest.mark.parametrize("kind", ["openai", "anthropic", "litellm"])
def test_a_context_length_error_folds_persists_and_retries_once(
    make_pilot: Any, streamed: bool, kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    steps: list[Any] = [
        [function_call("read_source", {"path": f"/src/m{i}.py"}, call_id=f"r{i}")] for i in range(6)
    ]
    steps += [ModelStep.raise_error(context_error(kind)), [assistant_message("finished")]]
    model = ScriptedModel(steps)
    cp = CachePilotAgents(make_pilot())
    agent = cp.wrap(Agent(name="builder", tools=[read_source], model=model))
    db = tmp_path / "ctx.db"
    session = cp.session(SQLiteSession("ctx", db))
    with caplog.at_level(logging.WARNING):
        result, _ = asyncio.run(drive(agent, "build all", cp, streamed, session=session))
    assert result.final_output == "finished"
    assert len(model.calls) == 8  # 7 turns + the one retry
    epochs = cp.pilot.state("ctx").plan.epochs
    assert [e.reason for e in epochs].count("context-length-error") == 1
    assert "retrying once" in caplog.text
    retried, failed = model.calls[-1], model.calls[-2]
    assert len(dumps(retried.input)) < len(dumps(failed.input))
    saved = asyncio.run(SQLiteStateStore(db).load("ctx"))
    assert saved is not None
    reasons = [e.reason for e in PilotState.model_validate_json(saved).plan.epochs]
    assert "context-length-error" in reasons  # the fold is persisted


@STREAMED
def test_a_second_context_length_error_is_raised_as_without_cachepilot(
    make_pilot: Any, streamed: bool
) -> None:
    steps: list[Any] = [
        [function_call("read_source", {"path": f"/src/m{i}.py"}, call_id=f"r{i}")] for i in range(4)
    ]
    steps += [ModelStep.raise_error(context_error("openai"))] * 2
    model = ScriptedModel(steps)
    cp = CachePilotAgents(make_pilot(), default_thread="twice")
    agent = cp.wrap(Agent(name="builder", tools=[read_source], model=model))
    with pytest.raises(openai.BadRequestError):
        asyncio.run(drive(agent, "build", cp, streamed))
    assert len(model.calls) == 6  # one retry, no more

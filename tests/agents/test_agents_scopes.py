"""Runs without a thread of their own: a scope each, never shared, dropped when the run ends."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents_helpers import dumps

from cachepilot_agents import CachePilotAgents

REF = re.compile(r'recall\(ref=\\?"([0-9a-f]{12})\\?"\)')


def secret_log(user: str) -> str:
    return "\n".join(f"{user} record {i:05d}: balance {i * 7919 % 100_003}" for i in range(4_000))


@function_tool
def read_records(user: str) -> str:
    """Read a user's records."""
    return secret_log(user)


async def one_run(
    cp: CachePilotAgents, user: str, refs: dict[str, str], streamed: bool
) -> ScriptedModel:
    """`user`'s run: read the records; bob then tries alice's ref."""

    async def after_read(call: Any) -> Any:
        found = REF.search(dumps(call.input))
        assert found, "the reduced records name their ref"
        refs[user] = found.group(1)
        if user == "alice":
            return [assistant_message("alice done")]
        for _ in range(200):  # wait (bounded) until alice's run has shown its ref
            if "alice" in refs:
                break
            await asyncio.sleep(0.01)
        return [function_call("recall", {"ref": refs["alice"]}, call_id="steal")]

    model = ScriptedModel(
        [
            [function_call("read_records", {"user": user}, call_id=f"{user}-1")],
            ModelStep.respond(after_read),
            [assistant_message(f"{user} done")],
        ]
    )
    agent = cp.wrap(
        Agent(
            name=user,
            instructions=f"Help {user}. Today is 2025-0{1 if user == 'alice' else 2}-11, "
            f"cwd /home/{user}/work, session {user}-5f1c2a9e-77aa-4c3b-9e0d-1234567890ab.",
            tools=[read_records],
            model=model,
        )
    )
    if streamed:
        result = Runner.run_streamed(agent, "show my records", run_config=cp.run_config())
        async for _ in result.stream_events():
            pass
    else:
        await Runner.run(agent, "show my records", run_config=cp.run_config())
    return model


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
def test_concurrent_runs_without_a_session_never_share_a_scope(
    make_pilot: Any, streamed: bool
) -> None:
    cp = CachePilotAgents(make_pilot())
    refs: dict[str, str] = {}

    async def main() -> tuple[ScriptedModel, ScriptedModel]:
        alice, bob = await asyncio.gather(
            one_run(cp, "alice", refs, streamed), one_run(cp, "bob", refs, streamed)
        )
        return alice, bob

    _, bob = asyncio.run(main())
    stolen = next(
        i["output"]
        for i in bob.calls[-1].input
        if i.get("call_id") == "steal" and i.get("type") == "function_call_output"
    )
    assert "alice record" not in stolen  # alice's archive is not bob's
    assert "not found" in stolen.lower() or "no artifact" in stolen.lower()
    for call in bob.calls:  # no frozen value of alice's reached bob's model
        assert "alice" not in dumps(call.input) + (call.system_instructions or "")
    threads = {r.thread for r in cp.requests}
    assert len(threads) == 2 and not any(t == cp.default_thread for t in threads)
    # Both runs ended: their scopes, states and archives are gone.
    assert cp.live_scopes == 0
    for thread in threads:
        assert cp.pilot.store.list(thread) == []
        assert cp.pilot.state(thread).calls == 0  # a fresh, empty state


def test_scopes_do_not_accumulate_over_many_runs(make_pilot: Any) -> None:
    cp = CachePilotAgents(make_pilot())

    async def main() -> None:
        for i in range(30):
            model = ScriptedModel(
                [
                    [function_call("read_records", {"user": f"u{i}"}, call_id="c1")],
                    [assistant_message("ok")],
                ]
            )
            agent = cp.wrap(Agent(name="a", tools=[read_records], model=model))
            await Runner.run(agent, "go", run_config=cp.run_config())
            assert cp.live_scopes == 0

    asyncio.run(main())
    threads = {r.thread for r in cp.requests}
    assert len(threads) == 30
    assert all(cp.pilot.store.list(t) == [] for t in threads)

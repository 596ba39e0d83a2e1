"""The plugin next to the SDK's own context management: `OpenAIResponsesCompactionSession`
behind `cp.session(...)` (a session that compacts itself is left to itself) and
`ModelSettings(context_management=...)` (server-side compaction), under the real `Runner`
with `agents.testing.ScriptedModel`."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from agents import Agent, ModelSettings, Runner, SQLiteSession, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents_helpers import eager_config

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_agents import CachePilotAgents

compaction_module = pytest.importorskip("agents.memory.openai_responses_compaction_session")
OpenAIResponsesCompactionSession = compaction_module.OpenAIResponsesCompactionSession

TASKS = ("a", "b", "c")


def suite_log(pattern: str) -> str:
    return "\n".join(f"test_{pattern}_{i} ... ok ({i * 37 % 1000} ms)" for i in range(3_000))


@function_tool
def run_tests(pattern: str) -> str:
    """Run the test suite (a long log)."""
    return suite_log(pattern)


class CompactEndpoint:
    """Stands for `client.responses.compact`: one opaque compaction item per call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        n = len(self.calls)
        item = {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": f"opaque-{n}"}
        return SimpleNamespace(output=[item], usage=None)


def steps(prefix: str, calls: int = 4) -> list[Any]:
    out: list[Any] = [
        [function_call("run_tests", {"pattern": f"{prefix}{i}"}, call_id=f"{prefix}{i}")]
        for i in range(calls)
    ]
    out.append([assistant_message(f"{prefix}: all green")])
    return out


async def run_tasks(ours: bool) -> dict[str, Any]:
    endpoint = CompactEndpoint()
    compacting = OpenAIResponsesCompactionSession(
        "user-1",
        underlying_session=SQLiteSession("user-1"),
        client=SimpleNamespace(responses=endpoint),
        should_trigger_compaction=lambda ctx: len(ctx["compaction_candidate_items"]) >= 6,
    )
    pilot = CachePilot(eager_config(), store=InMemoryArtifactStore())
    cp = CachePilotAgents(pilot)
    session: Any = cp.session(compacting) if ours else compacting
    models: list[ScriptedModel] = []
    outputs: list[Any] = []
    for prefix in TASKS:
        model = ScriptedModel(steps(prefix))
        models.append(model)
        agent: Agent[Any] = Agent(name="coder", tools=[run_tests], model=model)
        extra: dict[str, Any] = {}
        if ours:
            agent = cp.wrap(agent)
            extra = {"run_config": cp.run_config(session=session), "hooks": cp.hooks}
        result = await Runner.run(agent, f"task {prefix}", session=session, max_turns=20, **extra)
        outputs.append(result.final_output)
    return {
        "compactions": endpoint.calls,
        "items": await session.get_items(),
        "outputs": outputs,
        "models": models,
        "pilot": pilot,
    }


def _dump(items: Any) -> str:
    return json.dumps(items, sort_keys=True, default=str)


def test_compaction_session_behind_cachepilot_compacts_as_without_it() -> None:
    plain = asyncio.run(run_tasks(ours=False))
    ours = asyncio.run(run_tasks(ours=True))

    assert plain["compactions"], "the plain run compacted"
    assert len(ours["compactions"]) == len(plain["compactions"])
    assert ours["outputs"] == plain["outputs"]
    assert _dump(ours["items"]) == _dump(plain["items"])
    # What the session sent to be compacted is the plain history, not cachepilot's view.
    assert _dump(ours["compactions"]) == _dump(plain["compactions"])


def test_compacted_history_reaches_the_model_untouched() -> None:
    plain = asyncio.run(run_tasks(ours=False))
    ours = asyncio.run(run_tasks(ours=True))
    # A session that compacts itself is left to itself: the model reads the plain inputs.
    for plain_model, our_model in zip(plain["models"], ours["models"], strict=True):
        assert [_dump(list(c.input)) for c in our_model.calls] == [
            _dump(list(c.input)) for c in plain_model.calls
        ]
    later = [call for model in ours["models"][1:] for call in model.calls]
    assert later
    for call in later:
        compactions = [
            i for i in call.input if isinstance(i, dict) and i.get("type") == "compaction"
        ]
        # Exactly the session's item, in first position: never folded, stubbed or moved.
        assert len(compactions) == 1
        assert call.input[0] == compactions[0]
        assert compactions[0]["encrypted_content"].startswith("opaque-")
    # Nothing of that thread was reduced, so nothing was archived or stubbed.
    pilot: CachePilot = ours["pilot"]
    assert pilot.store.list("user-1") == []
    assert not pilot.state("user-1").plan.epochs


@pytest.mark.skipif(
    "context_management" not in ModelSettings.__dataclass_fields__,
    reason="this Agents SDK has no ModelSettings.context_management",
)
def test_server_side_context_management_passes_through() -> None:
    """`ModelSettings(context_management=...)` reaches the model; the compaction item the
    server returns is kept in the history and sent back unchanged."""
    settings = ModelSettings(context_management=[{"type": "compaction", "compact_threshold": 2000}])
    server_item = {"type": "compaction", "id": "cmp_srv", "encrypted_content": "server-opaque"}

    async def main() -> tuple[ScriptedModel, Any]:
        pilot = CachePilot(eager_config(), store=InMemoryArtifactStore())
        cp = CachePilotAgents(pilot)
        session = cp.session(SQLiteSession("srv"))
        script: list[Any] = steps("s", 3)
        script[1] = [server_item, *script[1]]  # the server compacted during this response
        model = ScriptedModel(script)
        agent = cp.wrap(Agent(name="x", tools=[run_tests], model=model, model_settings=settings))
        await Runner.run(
            agent,
            "go",
            session=session,
            run_config=cp.run_config(session=session),
            hooks=cp.hooks,
            max_turns=20,
        )
        return model, await session.get_items()

    model, items = asyncio.run(main())
    assert all(
        c.model_settings.context_management == settings.context_management for c in model.calls
    )
    assert server_item in items
    for call in model.calls[2:]:
        assert server_item in list(call.input)

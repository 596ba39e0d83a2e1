"""The plugin changes only what the model reads: every observable of a run equals the plain SDK's.

Each test runs the same scenario twice through the real `Runner` with `ScriptedModel`s, without
and with cachepilot (`wrap`, `run_config()`, hooks and `session()`, as documented), streamed and
not, and compares what a caller, a hook, a guardrail or a session sees.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
from agents import (
    Agent,
    AgentHooks,
    RunConfig,
    RunHooks,
    Runner,
    SQLiteSession,
    ToolGuardrailFunctionOutput,
    ToolOutputGuardrailTripwireTriggered,
    function_tool,
    handoff,
    tool_output_guardrail,
)
from agents.agent import StopAtTools
from agents.exceptions import UserError
from agents.models.multi_provider import MultiProvider
from agents.run_config import CallModelData
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents_helpers import dumps
from pydantic import BaseModel
from transparency_helpers import recall_then_answer, refs_in, run

from cachepilot_agents import CachePilotAgents, MemoryStateStore

STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])

BIG = "\n".join(f"row {i:05d}: " + "abcdefgh" * 10 for i in range(3_000))  # ~262 K chars
SECRET = "sk-live-0123456789abcdef"
SECRET_DOC = "\n".join(
    f"key_{i:05d} = " + (SECRET if i == 2_800 else hashlib.sha256(str(i).encode()).hexdigest())
    for i in range(3_000)
)  # ~245 K chars of distinct lines, the secret deep inside


class Report(BaseModel):
    passed: int
    failed: list[str]


@function_tool
def fetch() -> str:
    """Fetch the big log."""
    return BIG


@function_tool
def as_dict() -> dict[str, Any]:
    """Return rows."""
    return {"rows": [{"id": i, "note": None} for i in range(3)], "total": 3}


@function_tool
def as_model() -> Report:
    """Return a report."""
    return Report(passed=3, failed=["test_a"])


@tool_output_guardrail
def no_secrets(data: Any) -> ToolGuardrailFunctionOutput:
    if SECRET in str(data.output):
        return ToolGuardrailFunctionOutput.reject_content("[blocked: the output held a secret]")
    return ToolGuardrailFunctionOutput.allow()


@tool_output_guardrail
def no_secrets_raise(data: Any) -> ToolGuardrailFunctionOutput:
    if SECRET in str(data.output):
        return ToolGuardrailFunctionOutput.raise_exception(output_info="secret")
    return ToolGuardrailFunctionOutput.allow()


@function_tool(tool_output_guardrails=[no_secrets])
def read_secrets() -> str:
    """Read the config dump."""
    return SECRET_DOC


@function_tool(tool_output_guardrails=[no_secrets_raise])
def read_secrets_strict() -> str:
    """Read the config dump."""
    return SECRET_DOC


def both(scenario: Any, make_pilot: Any, **options: Any) -> tuple[Any, Any, CachePilotAgents]:
    """(plain outcome, cachepilot outcome, plugin) of `scenario(cp)`."""
    options.setdefault("state_store", MemoryStateStore())
    cp = CachePilotAgents(make_pilot(), **options)
    plain = asyncio.run(scenario(None))
    piloted = asyncio.run(scenario(cp))
    return plain, piloted, cp


# --- 1. final_output ------------------------------------------------------------------------------


@STREAMED
@pytest.mark.parametrize("behavior", ["stop_on_first_tool", "stop_at_tools"])
@pytest.mark.parametrize("tool", ["fetch", "as_dict"])
def test_final_output_is_the_tools_own_return(
    make_pilot: Any, streamed: bool, behavior: str, tool: str
) -> None:
    tools = {"fetch": fetch, "as_dict": as_dict}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        model = ScriptedModel([[function_call(tool, {}, call_id="c1")]])
        use: Any = (
            behavior if behavior == "stop_on_first_tool" else StopAtTools(stop_at_tool_names=[tool])
        )
        agent = Agent(name="a", tools=[tools[tool]], model=model, tool_use_behavior=use)
        return await run(agent, "go", cp=cp, streamed=streamed)

    plain, piloted, _ = both(scenario, make_pilot)
    assert piloted.final_output == plain.final_output
    assert type(piloted.final_output) is type(plain.final_output)
    if tool == "fetch":
        assert piloted.final_output == BIG
    else:  # whatever the SDK makes of a dict, and nothing else
        assert "'total': 3" in str(piloted.final_output) or "total" in piloted.final_output


# --- 2. hooks -------------------------------------------------------------------------------------


class ToolEnds(RunHooks[Any]):
    def __init__(self) -> None:
        self.results: list[Any] = []
        self.handoffs: list[Any] = []

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.results.append(result)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        self.handoffs.append(to_agent)


class AgentToolEnds(AgentHooks[Any]):
    def __init__(self) -> None:
        self.results: list[Any] = []

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.results.append(result)


@STREAMED
def test_hooks_see_what_the_tools_returned(make_pilot: Any, streamed: bool) -> None:
    seen: dict[str, tuple[ToolEnds, AgentToolEnds]] = {}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        model = ScriptedModel(
            [
                [function_call("fetch", {}, call_id="c1")],
                [function_call("as_dict", {}, call_id="c2")],
                [function_call("as_model", {}, call_id="c3")],
                [assistant_message("done")],
            ]
        )
        run_hooks, agent_hooks = ToolEnds(), AgentToolEnds()
        seen["cp" if cp else "plain"] = (run_hooks, agent_hooks)
        agent = Agent(name="a", tools=[fetch, as_dict, as_model], model=model, hooks=agent_hooks)
        return await run(agent, "go", cp=cp, streamed=streamed, hooks=run_hooks)

    plain, piloted, _ = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "done"
    for which in ("plain", "cp"):
        run_hooks, agent_hooks = seen[which]
        assert run_hooks.results == agent_hooks.results
        big, rows, report = run_hooks.results
        assert big == BIG
        assert isinstance(rows, dict) and rows["total"] == 3
        assert isinstance(report, Report) and report.failed == ["test_a"]


# --- 3. guardrails --------------------------------------------------------------------------------


@STREAMED
def test_a_rejected_tool_output_never_reaches_the_model_or_the_archive(
    make_pilot: Any, streamed: bool, tmp_path: Any
) -> None:
    models: dict[str, ScriptedModel] = {}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        respond = ModelStep.respond(recall_then_answer("done"))
        model = ScriptedModel([[function_call("read_secrets", {}, call_id="c1")], *[respond] * 6])
        models["cp" if cp else "plain"] = model
        agent = Agent(name="a", tools=[read_secrets], model=model)
        return await run(agent, "go", cp=cp, streamed=streamed)

    plain, piloted, cp = both(scenario, make_pilot, default_thread="kept")
    assert plain.final_output == piloted.final_output == "done"
    assert plain.item_dumps == piloted.item_dumps
    for model in models.values():
        assert len(model.calls) == 2  # nothing to recall: the model read the rejection
        assert all(SECRET not in dumps(c.input) for c in model.calls)
    for info in cp.pilot.store.list("kept"):
        artifact = cp.pilot.store.get("kept", info.ref)
        assert artifact is None or SECRET not in artifact.text


@STREAMED
def test_a_raising_tool_output_guardrail_still_raises(make_pilot: Any, streamed: bool) -> None:
    async def scenario(cp: CachePilotAgents | None) -> Any:
        model = ScriptedModel([[function_call("read_secrets_strict", {}, call_id="c1")]])
        agent = Agent(name="a", tools=[read_secrets_strict], model=model)
        try:
            await run(agent, "go", cp=cp, streamed=streamed)
        except ToolOutputGuardrailTripwireTriggered as exc:
            return exc
        return None

    plain, piloted, _ = both(scenario, make_pilot)
    assert isinstance(plain, ToolOutputGuardrailTripwireTriggered)
    assert isinstance(piloted, ToolOutputGuardrailTripwireTriggered)


# --- 4 and 5. handoffs, run-time tools, identity --------------------------------------------------


def fixer_steps(call: Any) -> Any:
    """Recall any ref not recalled yet, then call `late_tool` once, then answer."""
    step = recall_then_answer("fixed")(call)
    if step[0].type == "function_call":
        return step
    if not any(isinstance(i, dict) and i.get("call_id") == "l1" for i in call.input):
        return [function_call("late_tool", {}, call_id="l1")]
    return step


@STREAMED
@pytest.mark.parametrize("style", ["handoff()", "agent"])
def test_a_handoff_target_can_recall_and_stays_the_users_agent(
    make_pilot: Any, streamed: bool, style: str
) -> None:
    agents_of: dict[str, tuple[Agent[Any], ToolEnds, ScriptedModel]] = {}

    @function_tool
    def late_tool() -> str:
        """Added after setup."""
        return "late result"

    async def scenario(cp: CachePilotAgents | None) -> Any:
        fixer_model = ScriptedModel([ModelStep.respond(fixer_steps)] * 6)
        fixer = Agent(name="fixer", model=fixer_model)
        triage_model = ScriptedModel(
            [
                [function_call("fetch", {}, call_id="f1")],
                [function_call("transfer_to_fixer", {}, call_id="h1")],
            ]
        )
        target: Any = handoff(agent=fixer) if style == "handoff()" else fixer
        triage = Agent(name="triage", tools=[fetch], handoffs=[target], model=triage_model)
        hooks = ToolEnds()
        agents_of["cp" if cp else "plain"] = (fixer, hooks, fixer_model)
        if cp is not None:
            triage = cp.wrap(triage)
        fixer.tools = [late_tool]  # a tool added after setup
        return await run(triage, "please fix", cp=cp, streamed=streamed, hooks=hooks)

    plain, piloted, _ = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "fixed"
    assert plain.item_kinds == piloted.item_kinds  # no recall items in the run
    assert plain.item_dumps == piloted.item_dumps
    fixer, hooks, fixer_model = agents_of["cp"]
    assert piloted.result.last_agent is fixer  # the user's agent, not a clone
    assert hooks.handoffs == [fixer]
    assert hooks.results[-1] == "late result"
    # The fixer was shown a ref and recalled it through the model wrapper.
    first = fixer_model.calls[0]
    assert refs_in(first.input)
    assert [getattr(t, "name", None) for t in first.tools] == ["late_tool", "recall"]
    recalled = [
        i
        for i in fixer_model.calls[1].input
        if isinstance(i, dict) and str(i.get("call_id", "")).startswith("recall-")
    ]
    assert [i["type"] for i in recalled] == ["function_call", "function_call_output"]
    assert "row 00000" in recalled[1]["output"]


@STREAMED
def test_tools_rebuilt_in_on_agent_start_keep_working(make_pilot: Any, streamed: bool) -> None:
    class Rebuild(RunHooks[Any]):
        async def on_agent_start(self, context: Any, agent: Any) -> None:
            agent.tools = [*agent.tools]

    async def scenario(cp: CachePilotAgents | None) -> Any:
        respond = ModelStep.respond(recall_then_answer("done"))
        model = ScriptedModel([[function_call("fetch", {}, call_id="f1")], *[respond] * 4])
        agent = Agent(name="a", tools=[fetch], model=model)
        return await run(agent, "go", cp=cp, streamed=streamed, hooks=Rebuild())

    plain, piloted, _ = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "done"
    assert plain.item_dumps == piloted.item_dumps


# --- 6. resources the run creates -----------------------------------------------------------------


@STREAMED
def test_the_provider_a_run_creates_is_closed_once_per_run(
    make_pilot: Any, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[MultiProvider] = []
    closed: list[MultiProvider] = []
    original_init = MultiProvider.__init__

    def init(self: MultiProvider, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        created.append(self)

    async def aclose(self: MultiProvider) -> None:
        closed.append(self)

    def get_model(self: MultiProvider, name: str | None) -> Any:
        return ScriptedModel([[assistant_message("hi")]])

    monkeypatch.setattr(MultiProvider, "__init__", init)
    monkeypatch.setattr(MultiProvider, "aclose", aclose)
    monkeypatch.setattr(MultiProvider, "get_model", get_model)

    def counts(cp: CachePilotAgents | None) -> tuple[int, int]:
        created.clear()
        closed.clear()
        for _ in range(2):
            outcome = asyncio.run(run(Agent(name="a"), "hi", cp=cp, streamed=streamed))
            assert outcome.final_output == "hi"
        used = [p for p in created if p in closed]
        return len(used), len(closed)

    assert counts(None) == (2, 2)
    cp = CachePilotAgents(make_pilot())
    assert counts(cp) == (2, 2)  # one provider per run, closed when the run ends


class _EndlessCleanup(ScriptedModel):
    """A model whose end-of-run cleanup never finishes on its own (only cancellation ends it)."""

    def __init__(self, started: asyncio.Event) -> None:
        super().__init__([[assistant_message("done")]])
        self._started = started

    async def _cleanup_on_run_end(self, owner: object) -> None:
        self._started.set()
        await asyncio.Event().wait()


def test_a_cancelled_stream_is_not_held_by_closing_its_provider(
    make_pilot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer of a stream whose model cleanup hangs is cancelled: the run ends without
    waiting for its provider to close, and the provider is still closed once."""

    async def scenario(cp: CachePilotAgents | None) -> int:
        cleanup_started, closing, release, closed = (asyncio.Event() for _ in range(4))
        count: list[MultiProvider] = []

        async def aclose(provider: MultiProvider) -> None:
            closing.set()
            await release.wait()
            count.append(provider)
            closed.set()

        monkeypatch.setattr(MultiProvider, "aclose", aclose)
        agent = Agent(name="a", model=_EndlessCleanup(cleanup_started))
        if cp is None:
            result = Runner.run_streamed(agent, "hi")
        else:
            result = Runner.run_streamed(cp.wrap(agent), "hi", run_config=cp.run_config())

        async def consume() -> None:
            async for _ in result.stream_events():
                pass

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(cleanup_started.wait(), timeout=10)
        consumer.cancel()
        await asyncio.wait_for(closing.wait(), timeout=10)
        # The run ends while its provider is still closing: that cleanup never holds it up.
        task = result.run_loop_task
        assert task is not None
        done, _ = await asyncio.wait({task}, timeout=10)
        assert task in done  # before the fix: held until the provider was closed
        assert not closed.is_set()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(consumer, timeout=10)
        await asyncio.wait_for(closed.wait(), timeout=10)
        return len(count)

    assert asyncio.run(scenario(None)) == 1
    assert asyncio.run(scenario(CachePilotAgents(make_pilot()))) == 1


class _UnformattableError(RuntimeError):
    def __str__(self) -> str:
        raise RuntimeError("format failed")


@STREAMED
def test_a_model_error_that_cannot_format_itself_reaches_the_caller_unchanged(
    make_pilot: Any, streamed: bool
) -> None:
    """The context-length check reads the error's text: one whose `str()` raises is still the
    error the caller gets, not the formatting failure."""

    async def scenario(cp: CachePilotAgents | None) -> BaseException:
        expected = _UnformattableError()

        def respond(_call: Any) -> Any:
            raise expected

        agent = Agent(name="a", model=ScriptedModel([ModelStep.respond(respond)]))
        try:
            await run(agent, "hi", cp=cp, streamed=streamed)
        except BaseException as exc:
            return exc
        raise AssertionError("the run did not fail")

    assert isinstance(asyncio.run(scenario(None)), _UnformattableError)
    assert isinstance(asyncio.run(scenario(CachePilotAgents(make_pilot()))), _UnformattableError)


# --- 7. sessions ----------------------------------------------------------------------------------


class _Item:
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def model_dump(self, exclude_unset: bool = False) -> dict[str, Any]:
        return dict(self._data)


class _Pages:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self._items = items

    def __aiter__(self) -> Any:
        async def gen() -> Any:
            for item in self._items:
                yield _Item(item)

        return gen()


class FakeConversations:
    """The slice of the OpenAI conversations API `OpenAIConversationsSession` uses."""

    def __init__(self) -> None:
        self.store: dict[str, list[dict[str, Any]]] = {}
        self.items = self
        self._next = 0

    def with_options(self, **kwargs: Any) -> Any:
        return _Client(self)

    async def create(self, items: Any = None, **kwargs: Any) -> Any:
        if "conversation_id" in kwargs:  # conversations.items.create
            stored = self.store[kwargs["conversation_id"]]
            for item in items:
                self._next += 1
                stored.append({**item, "id": f"item_{self._next}"})  # the server adds ids
            return None
        conversation = f"conv_{len(self.store) + 1}"
        self.store[conversation] = []
        return type("Conversation", (), {"id": conversation})()

    def list(self, conversation_id: str, order: str = "asc", **kwargs: Any) -> _Pages:
        items = list(self.store[conversation_id])
        return _Pages(items if order == "asc" else items[::-1])


class _Client:
    def __init__(self, conversations: FakeConversations) -> None:
        self.conversations = conversations

    def with_options(self, **kwargs: Any) -> _Client:
        return self


@STREAMED
def test_conversation_sessions_store_and_replay_the_same_items(
    make_pilot: Any, streamed: bool
) -> None:
    from agents.memory import OpenAIConversationsSession

    stores: dict[str, FakeConversations] = {}
    inputs: dict[str, list[Any]] = {}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        backend = FakeConversations()
        stores["cp" if cp else "plain"] = backend
        # No conversation id yet: the session creates one on first use.
        session = OpenAIConversationsSession(openai_client=_Client(backend))  # type: ignore[arg-type]
        model = ScriptedModel(
            [
                [function_call("as_dict", {}, call_id="c1")],
                [assistant_message("first")],
                [assistant_message("second")],
            ]
        )
        agent = Agent(name="a", tools=[as_dict], model=model)
        await run(agent, "one", cp=cp, session=session)
        second = await run(agent, "two", cp=cp, session=session, streamed=streamed)
        inputs["cp" if cp else "plain"] = list(model.calls[-1].input)
        return second

    plain, piloted, cp = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "second"
    assert stores["plain"].store == stores["cp"].store
    assert [dumps(i) for i in inputs["plain"]] == [dumps(i) for i in inputs["cp"]]
    assert cp.pilot.state("conv_1").calls == 3  # the conversation is the thread


# --- 8. the user's own input filter ---------------------------------------------------------------


@STREAMED
def test_a_user_filter_returning_the_wrong_type_gets_the_sdks_error(
    make_pilot: Any, streamed: bool
) -> None:
    def bad_filter(data: CallModelData[Any]) -> Any:
        return {"input": data.model_data.input}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        agent = Agent(name="a", model=ScriptedModel([[assistant_message("hi")]]))
        try:
            await run(
                agent,
                "hi",
                cp=cp,
                streamed=streamed,
                base=RunConfig(call_model_input_filter=bad_filter),
            )
        except Exception as exc:
            return exc
        return None

    plain, piloted, _ = both(scenario, make_pilot)
    assert type(plain) is UserError
    assert type(piloted) is UserError
    assert str(plain) == str(piloted)


# --- sessions of every kind pass items through unchanged ------------------------------------------


@STREAMED
def test_sqlite_session_items_are_the_plain_sdks(
    make_pilot: Any, streamed: bool, tmp_path: Any
) -> None:
    stored: dict[str, list[Any]] = {}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        respond = ModelStep.respond(recall_then_answer("done"))
        model = ScriptedModel([[function_call("fetch", {}, call_id="f1")], *[respond] * 4])
        agent = Agent(name="a", tools=[fetch], model=model)
        name = "cp" if cp else "plain"
        session = SQLiteSession(name, tmp_path / f"{name}.db")
        outcome = await run(agent, "go", cp=cp, streamed=streamed, session=session)
        stored[name] = await session.get_items()
        return outcome

    plain, piloted, _ = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "done"
    assert [dumps(i) for i in stored["plain"]] == [dumps(i) for i in stored["cp"]]
    outputs = [i["output"] for i in stored["cp"] if i.get("type") == "function_call_output"]
    assert outputs == [BIG]  # the tool's own output, not a reduced one


@STREAMED
def test_tool_output_trimmer_alongside(make_pilot: Any, streamed: bool, tmp_path: Any) -> None:
    from agents.extensions.tool_output_trimmer import ToolOutputTrimmer

    stored: dict[str, list[Any]] = {}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        name = "cp" if cp else "plain"
        session = SQLiteSession(name, tmp_path / f"trim-{name}.db")
        outcomes = []
        for turn in range(3):
            model = ScriptedModel(
                [[function_call("fetch", {}, call_id=f"f{turn}")], [assistant_message(f"t{turn}")]]
            )
            agent = Agent(name="a", tools=[fetch], model=model)
            base = RunConfig(call_model_input_filter=ToolOutputTrimmer(recent_turns=1))
            outcomes.append(
                await run(
                    agent, f"turn {turn}", cp=cp, streamed=streamed, session=session, base=base
                )
            )
        stored[name] = await session.get_items()
        return outcomes[-1]

    plain, piloted, _ = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "t2"
    assert [dumps(i) for i in stored["plain"]] == [dumps(i) for i in stored["cp"]]


# --- what the model reads stays the plain input where nothing is reduced ------------------


@STREAMED
def test_small_runs_send_the_plain_request(make_pilot: Any, streamed: bool) -> None:
    @function_tool
    def nothing() -> str:
        """Return nothing."""
        return ""

    models: dict[str, ScriptedModel] = {}

    async def scenario(cp: CachePilotAgents | None) -> Any:
        helper = ScriptedModel([[assistant_message("plain")]])
        model = ScriptedModel(
            [
                [function_call("nothing", {}, call_id="n1")],
                [function_call("transfer_to_helper", {}, call_id="h1")],
            ]
        )
        models["cp" if cp else "plain"] = helper
        models["cp-main" if cp else "plain-main"] = model
        helper_agent = Agent(name="helper", model=helper)
        agent = Agent(name="a", tools=[nothing], handoffs=[helper_agent], model=model)
        return await run(agent, "go", cp=cp, streamed=streamed)

    plain, piloted, _ = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "plain"
    # An agent without function tools and nothing to recall: the plain tool list and input.
    assert models["cp"].calls[0].tools == models["plain"].calls[0].tools == []
    assert dumps(models["cp"].calls[0].input) == dumps(models["plain"].calls[0].input)
    # An empty tool result stays empty.
    main = models["cp-main"].calls[1].input
    assert [i["output"] for i in main if i.get("type") == "function_call_output"] == [""]


@STREAMED
def test_a_compacting_session_reads_its_own_history(make_pilot: Any, streamed: bool) -> None:
    from agents.memory import OpenAIResponsesCompactionSession

    compacted: dict[str, int] = {}

    class Compacting(OpenAIResponsesCompactionSession):
        async def run_compaction(self, args: Any = None) -> None:
            compacted[self.session_id] = compacted.get(self.session_id, 0) + 1

    async def scenario(cp: CachePilotAgents | None) -> Any:
        name = "cp" if cp else "plain"
        session = Compacting(session_id=name, underlying_session=SQLiteSession(name))
        model = ScriptedModel(
            [[function_call("fetch", {}, call_id="f1")], [assistant_message("ok")]]
        )
        agent = Agent(name="a", tools=[fetch], model=model)
        outcome = await run(agent, "go", cp=cp, streamed=streamed, session=session)
        return outcome, model

    (plain, plain_model), (piloted, model), _ = both(scenario, make_pilot)
    assert plain.final_output == piloted.final_output == "ok"
    assert compacted.get("cp") == compacted.get("plain")
    assert [dumps(c.input) for c in model.calls] == [dumps(c.input) for c in plain_model.calls]


def test_a_dictionary_run_config_is_read_as_the_sdk_reads_it(make_pilot: Any) -> None:
    cp = CachePilotAgents(make_pilot())
    config = cp.run_config({"workflow_name": "mine", "tracing_disabled": True})
    assert config.workflow_name == "mine" and config.tracing_disabled
    with pytest.raises(ValueError, match="Unknown"):
        cp.run_config({"no_such_field": 1})

"""The plugin under the real Agents SDK `Runner`, with `agents.testing.ScriptedModel`."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    RunConfig,
    Runner,
    SQLiteSession,
    ToolOutputImage,
    function_tool,
    handoff,
)
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.usage import Usage as SdkUsage
from agents_helpers import (
    Clock,
    RecordingHooks,
    dumps,
    eager_config,
    is_prefix,
    pairing_problems,
    reasoning_followers,
)
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel

from cachepilot_agents import CachePilotAgents, PilotModel, prompt_cache_key_for

FILE_LINES = 80


def file_text(path: str) -> str:
    return "\n".join(f"{path}:{i}: value_{i} = compute({i}, '{path}')" for i in range(FILE_LINES))


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return file_text(path)


@function_tool
def run_tests(pattern: str) -> str:
    """Run the test suite (very long log)."""
    return "\n".join(f"test_{pattern}_{i} ... ok ({i * 37 % 1000} ms)" for i in range(6_000))


def reasoning(ident: str, text: str) -> ResponseReasoningItem:
    return ResponseReasoningItem(
        id=ident, type="reasoning", summary=[Summary(text=text, type="summary_text")]
    )


def coding_steps(turns: int, *, prefix: str = "c", files: int = 12) -> list[Any]:
    """One read per step, each preceded by a reasoning item; files get re-read (superseded)."""
    steps: list[Any] = []
    for i in range(turns):
        call_id = f"{prefix}{i}"
        steps.append(
            [
                reasoning(f"rs_{call_id}", f"I should read file {i % files}."),
                function_call("read_file", {"path": f"/src/mod{i % files}.py"}, call_id=call_id),
            ]
        )
    steps.append([assistant_message("All files read; the bug is in mod3.py.")])
    return steps


def usage(input_tokens: int = 1000, cached: int = 800, write: int = 50) -> SdkUsage:
    return SdkUsage(
        requests=1,
        input_tokens=input_tokens,
        output_tokens=20,
        total_tokens=input_tokens + 20,
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=write),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=5),
    )


async def run(
    cp: CachePilotAgents,
    agent: Agent[Any],
    task: str,
    session: Any = None,
    hooks: Any = None,
    base: RunConfig | None = None,
) -> Any:
    return await Runner.run(
        agent,
        task,
        run_config=cp.run_config(base),
        hooks=hooks if hooks is not None else cp.hooks,
        session=session,
        max_turns=200,
    )


def check_calls(model: ScriptedModel, epochs: list[int]) -> int:
    """Assert prefix extension between maintenance points, pairing and reasoning adjacency.

    Returns the number of calls whose input did not extend the previous one.
    """
    calls = model.calls
    assert len(calls) == len(epochs)
    breaks = 0
    for index, call in enumerate(calls):
        items = list(call.input)
        assert pairing_problems(items) == []
        for rs_id, follower in reasoning_followers(items).items():
            assert follower == rs_id.removeprefix("rs_"), (rs_id, follower)
        if index == 0:
            continue
        previous = calls[index - 1]
        extends = is_prefix(previous.input, items) and (
            previous.system_instructions == call.system_instructions
        )
        if not extends:
            breaks += 1
            assert epochs[index] > epochs[index - 1], f"call {index} rewrote history unplanned"
    return breaks


# --- the issue's usage, end to end -----------------------------------------------------------


def test_issue_usage_runs_as_is(make_pilot: Any, tmp_path: Path) -> None:
    model = ScriptedModel(coding_steps(3))
    cp = CachePilotAgents(make_pilot())
    agent = cp.wrap(
        Agent(name="coder", instructions="You fix bugs.", tools=[read_file], model=model)
    )

    async def main() -> Any:
        return await Runner.run(
            agent,
            "find the bug",
            run_config=cp.run_config(),
            hooks=cp.hooks,
            session=cp.session(SQLiteSession("user-1", tmp_path / "s.db")),
        )

    result = asyncio.run(main())
    assert result.final_output.startswith("All files read")
    names = [getattr(t, "name", None) for t in model.calls[0].tools]
    assert names == ["read_file", "recall"]  # recall present from the first call


def test_wrap_keeps_the_agent_and_wraps_only_its_model(make_pilot: Any) -> None:
    cp = CachePilotAgents(make_pilot())
    model = ScriptedModel([[assistant_message("hi")]])
    target = Agent(name="target", model=ScriptedModel([]))
    original = Agent(name="coder", tools=[read_file], model=model, handoffs=[handoff(target)])
    wrapped = cp.wrap(original)
    assert wrapped is original and original.tools == [read_file]  # same agent, same tools
    assert isinstance(original.model, PilotModel) and original.model.inner is model
    assert isinstance(target.model, PilotModel)  # handoff() targets too
    assert cp.wrap(original) is original and cp.model(original.model) is original.model
    other = CachePilotAgents(make_pilot())
    with pytest.raises(ValueError, match="another"):
        other.model(original.model)


def test_a_tool_of_the_users_named_recall_is_never_shadowed(make_pilot: Any) -> None:
    @function_tool(name_override="recall")
    def my_recall(ref: str) -> str:
        """The user's own recall."""
        return "mine"

    model = ScriptedModel(
        [[function_call("run_tests", {"pattern": "unit"}, call_id="t1")], [assistant_message("ok")]]
    )
    cp = CachePilotAgents(make_pilot(), default_thread="own-recall")
    agent = cp.wrap(Agent(name="x", tools=[run_tests, my_recall], model=model))
    asyncio.run(run(cp, agent, "go"))
    assert [t.name for t in model.calls[0].tools] == ["run_tests", "recall"]  # the user's only
    assert "recall(ref=" not in dumps(model.calls[-1].input)  # no ref the model cannot follow


# --- ingestion and recall ---------------------------------------------------------------------


def test_session_store_holds_the_tools_outputs_and_recall_returns_originals(
    make_pilot: Any, tmp_path: Path
) -> None:
    expected = "\n".join(f"test_unit_{i} ... ok ({i * 37 % 1000} ms)" for i in range(6_000))

    def recall_step(call: Any) -> Any:
        outputs = [i for i in call.input if isinstance(i, dict) and i.get("call_id") == "t1"]
        found = re.search(r'recall\(ref="([0-9a-f]{12})"\)', str(outputs[-1]["output"]))
        assert found, outputs
        return [function_call("recall", {"ref": found.group(1)}, call_id="r1")]

    from agents.testing import ModelStep

    model = ScriptedModel(
        [
            [function_call("run_tests", {"pattern": "unit"}, call_id="t1")],
            ModelStep.respond(recall_step),
            [assistant_message("done")],
        ]
    )
    pilot = make_pilot()
    cp = CachePilotAgents(pilot)
    agent = cp.wrap(Agent(name="coder", tools=[run_tests], model=model))
    session = SQLiteSession("user-2", tmp_path / "s.db")
    result = asyncio.run(run(cp, agent, "run the tests", cp.session(session)))
    assert result.final_output == "done"

    stored = asyncio.run(session.get_items())
    outputs = {i["call_id"]: i["output"] for i in stored if i.get("type") == "function_call_output"}
    assert outputs == {"t1": expected}  # the tool's own output; recall never reaches the session
    shown = next(i for i in model.calls[1].input if i.get("type") == "function_call_output")[
        "output"
    ]
    assert len(shown) < len(expected) // 10 and "recall(ref=" in shown  # the model's view
    answer = next(
        i["output"]
        for i in model.calls[2].input
        if i.get("call_id") == "r1" and i.get("type") == "function_call_output"
    )
    assert expected[:2_000] in answer  # the wrapper served the original bytes
    ref = re.search(r'recall\(ref="([0-9a-f]{12})"\)', shown).group(1)  # type: ignore[union-attr]
    assert expected in pilot.recall(ref, max_chars=10_000_000, thread="user-2")


class Report(BaseModel):
    passed: int
    failed: list[str]


@function_tool
def structured(kind: str) -> Any:
    """Return a structured result."""
    if kind == "dict":
        return {"rows": [{"id": i, "note": None, "tags": []} for i in range(3)]}
    if kind == "model":
        return Report(passed=3, failed=["test_a"])
    if kind == "small-image":
        return ToolOutputImage(image_url="data:image/png;base64," + "A" * 100)
    if kind == "huge-image":
        return ToolOutputImage(image_url="data:image/png;base64," + "B" * 3_000)
    if kind == "bytes":
        return b"\xff\xfe binary \x00 output"
    return [{"type": "text", "text": "caption"}, {"type": "image", "image_url": "https://x/y.png"}]


def test_structured_outputs_images_and_files(make_pilot: Any) -> None:
    kinds = ["dict", "model", "small-image", "huge-image", "bytes", "list"]
    steps: list[Any] = [
        [function_call("structured", {"kind": k}, call_id=f"s{i}")] for i, k in enumerate(kinds)
    ]
    steps.append([assistant_message("ok")])
    model = ScriptedModel(steps)
    plain_model = ScriptedModel(steps)
    pilot = make_pilot()
    cp = CachePilotAgents(pilot, default_thread="media", max_media_chars=1_000)
    agent = cp.wrap(Agent(name="coder", tools=[structured], model=model))
    asyncio.run(run(cp, agent, "go"))
    asyncio.run(Runner.run(Agent(name="coder", tools=[structured], model=plain_model), "go"))

    def outputs(m: ScriptedModel) -> dict[str, Any]:
        return {
            i["call_id"]: i["output"]
            for i in m.calls[-1].input
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }

    final, plain = outputs(model), outputs(plain_model)
    # Whatever the SDK makes of each return reaches the model as is, except large media.
    for call_id in ("s0", "s1", "s2", "s4", "s5"):
        assert final[call_id] == plain[call_id]
    assert final["s2"][0]["type"] == "input_image"  # small media kept as is
    huge = final["s3"]
    assert huge[0]["type"] == "input_text" and "recall(ref=" in huge[0]["text"]
    assert plain["s3"][0]["type"] == "input_image"
    ref = re.search(r'recall\(ref="([0-9a-f]{12})"\)', huge[0]["text"]).group(1)  # type: ignore[union-attr]
    assert ("B" * 2_900) in pilot.recall(ref, max_chars=100_000, thread="media")
    # The same bytes on every later call (content-addressed archive).
    shown = [
        dumps(i)
        for c in model.calls
        for i in c.input
        if i.get("call_id") == "s3" and i.get("type") == "function_call_output"
    ]
    assert len(shown) == 3 and len(set(shown)) == 1


# --- the view over a long run -----------------------------------------------------------------


def test_prefix_extends_between_maintenance_points_over_a_long_run(
    make_pilot: Any, tmp_path: Path
) -> None:
    model = ScriptedModel(coding_steps(36))
    pilot = make_pilot()
    cp = CachePilotAgents(pilot, clock=Clock())
    session = cp.session(SQLiteSession("long", tmp_path / "s.db"))
    hooks = RecordingHooks(probe=lambda: len(pilot.state("long").plan.epochs))
    agent = cp.wrap(
        Agent(
            name="coder",
            instructions="You fix bugs. Today is 2025-03-04, cwd /home/ana/proj.",
            tools=[read_file],
            model=model,
        )
    )
    asyncio.run(run(cp, agent, "find the bug", session, hooks=cp.hooks_with(hooks)))
    assert len(model.calls) == 37
    breaks = check_calls(model, hooks.epochs_at_call)
    epochs = pilot.state("long").plan.epochs
    assert epochs, "a 37-call run with superseded reads should reach a maintenance point"
    assert breaks <= len(epochs)
    # The date never changed: the instructions go as written (no placeholder, no block), and
    # the edit shows in the model input.
    instructions = {call.system_instructions for call in model.calls}
    assert instructions == {"You fix bugs. Today is 2025-03-04, cwd /home/ana/proj."}
    assert any("read_file output evicted" in dumps(i) for i in model.calls[-1].input)
    # The session keeps the full (ingested) history; the view is rebuilt, never stored.
    stored = asyncio.run(session.get_items())
    assert not any("evicted" in dumps(i) for i in stored)


def test_streaming_runs_keep_the_same_view(make_pilot: Any) -> None:
    model = ScriptedModel(coding_steps(4))
    cp = CachePilotAgents(make_pilot(), default_thread="stream")
    agent = cp.wrap(Agent(name="coder", tools=[read_file], model=model))

    async def main() -> None:
        result = Runner.run_streamed(agent, "go", run_config=cp.run_config(), hooks=cp.hooks)
        async for _ in result.stream_events():
            pass

    asyncio.run(main())
    calls = model.calls
    assert len(calls) == 5
    for a, b in itertools.pairwise(calls):
        assert is_prefix(a.input, b.input)
    assert len(cp.requests) == 5


# --- resume ------------------------------------------------------------------------------------


def _resume(
    make_pilot: Any, tmp_path: Path, idle_seconds: float, turns: int
) -> tuple[ScriptedModel, ScriptedModel, list[int], list[int]]:
    """Run `turns` + 1 calls, then resume in a 'new process' after `idle_seconds` for 9 more."""
    db = tmp_path / "resume.db"
    first = ScriptedModel(coding_steps(turns))
    clock = Clock()
    # The restored plan is what is checked here: a finished-task fold at the new user turn
    # would be one more maintenance point (tested in tests/core/test_maintenance.py).
    no_task_folds = eager_config(fold_finished_tasks=False)
    pilot1 = make_pilot(no_task_folds)
    cp1 = CachePilotAgents(pilot1, clock=clock)
    hooks1 = RecordingHooks(probe=lambda: len(pilot1.state("r").plan.epochs))
    agent1 = cp1.wrap(Agent(name="coder", tools=[read_file], model=first))
    asyncio.run(
        run(
            cp1,
            agent1,
            "read everything",
            cp1.session(SQLiteSession("r", db)),
            cp1.hooks_with(hooks1),
        )
    )
    clock.now += idle_seconds
    second = ScriptedModel(coding_steps(8, prefix="d"))
    pilot2 = make_pilot(no_task_folds)  # a new process: fresh pilot, same archive file
    cp2 = CachePilotAgents(pilot2, clock=clock)
    hooks2 = RecordingHooks(probe=lambda: len(pilot2.state("r").plan.epochs))
    agent2 = cp2.wrap(Agent(name="coder", tools=[read_file], model=second))
    asyncio.run(
        run(cp2, agent2, "now fix it", cp2.session(SQLiteSession("r", db)), cp2.hooks_with(hooks2))
    )
    assert pilot2.state("r").plan.epochs[: len(pilot1.state("r").plan.epochs)] == (
        pilot1.state("r").plan.epochs
    )
    return first, second, hooks1.epochs_at_call, hooks2.epochs_at_call


def test_resumed_session_keeps_the_same_view(make_pilot: Any, tmp_path: Path) -> None:
    first, second, epochs1, epochs2 = _resume(make_pilot, tmp_path, idle_seconds=10, turns=24)
    last = list(first.calls[-1].input)
    resumed = list(second.calls[0].input)
    # The first call after the restart extends the last call before it (final answer and the
    # new user message appended): the restored plan rebuilt the very same view.
    assert is_prefix(last, resumed)
    assert first.calls[-1].system_instructions == second.calls[0].system_instructions
    assert epochs1[-1] >= 1  # the restored plan had a maintenance epoch to re-apply
    assert epochs2[0] == epochs1[-1]
    check_calls(second, epochs2)


def test_cold_resume_prunes_once(make_pilot: Any, tmp_path: Path) -> None:
    first, second, epochs1, epochs2 = _resume(make_pilot, tmp_path, idle_seconds=3 * 3600, turns=10)
    last = list(first.calls[-1].input)
    resumed = list(second.calls[0].input)
    assert epochs1[-1] == 0  # the warm cache never paid for a rewrite in the first run
    assert not is_prefix(last, resumed)  # the cold cache made the first call a free rewrite
    assert epochs2[0] == epochs1[-1] + 1
    assert epochs2[-1] == epochs2[0]  # ...and only that one: the rest of the run extends
    assert check_calls(second, epochs2) == 0
    stubbed = re.compile(r"read_file output (pruned|evicted)")
    assert sum(bool(stubbed.search(dumps(i))) for i in last) == 0
    assert sum(bool(stubbed.search(dumps(i))) for i in resumed) >= 3


# --- merging with the user's own config, filters and hooks -------------------------------------


def test_user_filter_hooks_and_settings_keep_working(make_pilot: Any) -> None:
    seen: list[int] = []

    def user_filter(data: CallModelData[Any]) -> ModelInputData:
        seen.append(len(data.model_data.input))
        return ModelInputData(
            input=data.model_data.input,
            instructions=(data.model_data.instructions or "") + "\nBe brief.",
        )

    model = ScriptedModel(coding_steps(3))
    pilot = make_pilot()
    cp = CachePilotAgents(pilot, default_thread="merge")
    hooks = RecordingHooks()
    agent = cp.wrap(Agent(name="coder", instructions="Fix.", tools=[read_file], model=model))
    model.set_default_usage(usage())
    base = RunConfig(
        call_model_input_filter=user_filter,
        model_settings=ModelSettings(temperature=0.1),
        workflow_name="mine",
    )
    config = cp.run_config(base)
    assert base.call_model_input_filter is user_filter  # the base is not changed
    assert config.workflow_name == "mine" and config.model_settings is not None
    assert config.model_settings.temperature == 0.1
    asyncio.run(
        Runner.run(agent, "go", run_config=config, hooks=cp.hooks_with(hooks), max_turns=20)
    )
    assert seen == [1, 4, 7, 10]  # the user's filter ran on every call, before ours
    assert all(c.system_instructions == "Fix.\nBe brief." for c in model.calls)
    assert hooks.llm_starts == hooks.llm_ends == 4 and hooks.tool_ends == 3
    assert all(c.model_settings.temperature == 0.1 for c in model.calls)
    totals = pilot.state("merge").usage
    assert totals["input_tokens"] == 4_000
    assert totals["cached_tokens"] == 3_200
    assert totals["cache_write_tokens"] == 200
    assert [r.usage.cached_tokens for r in cp.requests] == [800] * 4


def test_prompt_cache_key_per_thread(make_pilot: Any) -> None:
    def keys(config: RunConfig) -> list[Any]:
        model = ScriptedModel([[assistant_message("hi")]])
        agent = cp.wrap(Agent(name="x", model=model))
        asyncio.run(Runner.run(agent, "hello", run_config=config))
        return [c.model_settings.extra_args for c in model.calls]

    cp = CachePilotAgents(make_pilot(), prompt_cache_key="always")
    key_a = prompt_cache_key_for("alice")
    assert keys(cp.run_config(thread="alice")) == [{"prompt_cache_key": key_a}]
    assert keys(cp.run_config(RunConfig(group_id="bob"))) == [
        {"prompt_cache_key": prompt_cache_key_for("bob")}
    ]
    assert "alice" not in key_a
    mine = RunConfig(
        group_id="g", model_settings=ModelSettings(extra_args={"prompt_cache_key": "k"})
    )
    assert keys(cp.run_config(mine)) == [{"prompt_cache_key": "k"}]  # yours is kept
    # A run with no thread of its own: a key of its own scope, never a shared one.
    first, second = keys(cp.run_config()), keys(cp.run_config())
    assert first != second and first[0]["prompt_cache_key"].startswith("cachepilot-")
    assert cp.run_config().model_settings is None  # the run config itself is not changed


class _DefaultKeyModel(ScriptedModel):
    """A model the SDK sends its default `prompt_cache_key` to (an official endpoint's)."""

    def _supports_default_prompt_cache_key(self) -> bool:
        return True


@pytest.mark.parametrize("mode", ["sdk", "always", "never"])
def test_prompt_cache_key_follows_the_sdk_by_default(make_pilot: Any, mode: str) -> None:
    def keys(model: ScriptedModel, config: RunConfig | None = None) -> list[Any]:
        agent = cp.wrap(Agent(name="x", model=model))
        asyncio.run(Runner.run(agent, "hello", run_config=config or cp.run_config(thread="t")))
        return [(c.model_settings.extra_args or {}).get("prompt_cache_key") for c in model.calls]

    cp = CachePilotAgents(make_pilot(), prompt_cache_key=mode)  # type: ignore[arg-type]
    # A model the SDK sends no default key to (a custom base_url): only "always" adds one.
    plain = keys(ScriptedModel([[assistant_message("hi")]]))
    assert plain == [prompt_cache_key_for("t") if mode == "always" else None]
    # Where the SDK sends its own key, that key goes out unchanged in every mode.
    sdk = keys(_DefaultKeyModel([[assistant_message("hi")]]))
    assert sdk[0] is not None and sdk[0].startswith("agents-sdk:")
    # A settings entry that disables the key (here `None`) is never overridden.
    off = RunConfig(model_settings=ModelSettings(extra_args={"prompt_cache_key": None}))
    model = ScriptedModel([[assistant_message("hi")]])
    assert keys(model, cp.run_config(off, thread="t")) == [None]
    assert model.calls[0].model_settings.extra_args == {"prompt_cache_key": None}


def test_prompt_cache_key_mode_is_checked(make_pilot: Any) -> None:
    with pytest.raises(ValueError, match="prompt_cache_key must be one of sdk, always, never"):
        CachePilotAgents(make_pilot(), prompt_cache_key="auto")  # type: ignore[arg-type]


def test_threads_follow_sessions_then_group_then_default(make_pilot: Any, tmp_path: Path) -> None:
    pilot = make_pilot()
    cp = CachePilotAgents(pilot, default_thread="fallback")

    def fresh() -> Agent[Any]:
        return cp.wrap(
            Agent(name="x", tools=[read_file], model=ScriptedModel(coding_steps(1, prefix="z")))
        )

    asyncio.run(run(cp, fresh(), "a", cp.session(SQLiteSession("sess", tmp_path / "t.db"))))
    asyncio.run(run(cp, fresh(), "b", base=RunConfig(group_id="grp")))
    asyncio.run(run(cp, fresh(), "c"))
    assert [r.thread for r in cp.requests] == ["sess"] * 2 + ["grp"] * 2 + ["fallback"] * 2
    for thread in ("sess", "grp", "fallback"):
        assert pilot.state(thread).calls == 2


# --- handoffs ----------------------------------------------------------------------------------


def test_handoffs_keep_working(make_pilot: Any) -> None:
    triage_model = ScriptedModel([[function_call("transfer_to_fixer", {}, call_id="h1")]])
    fixer_model = ScriptedModel(
        [
            [function_call("run_tests", {"pattern": "all"}, call_id="t1")],
            [assistant_message("fixed")],
        ]
    )
    fixer = Agent(name="fixer", tools=[run_tests], model=fixer_model)
    triage = Agent(name="triage", handoffs=[fixer], model=triage_model)
    cp = CachePilotAgents(make_pilot(), default_thread="handoff")
    wrapped = cp.wrap(triage)
    assert wrapped is triage and wrapped.handoffs[0] is fixer
    result = asyncio.run(run(cp, wrapped, "please fix"))
    assert result.final_output == "fixed"
    assert result.last_agent is fixer
    last = fixer_model.calls[-1].input
    assert pairing_problems(list(last)) == []
    output = next(
        i for i in last if i.get("type") == "function_call_output" and i["call_id"] == "t1"
    )
    assert "recall(ref=" in output["output"]  # the handed-off agent reads the view too


# --- items the plugin does not model -----------------------------------------------------------


def test_unknown_items_pass_through_in_place(make_pilot: Any, tmp_path: Path) -> None:
    session = SQLiteSession("seeded", tmp_path / "seed.db")
    opaque = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "cachepilot"},
    }
    history = [
        {"role": "user", "content": "search it"},
        {"type": "reasoning", "id": "rs_ws", "summary": []},
        opaque,
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "found", "annotations": []}],
        },
    ]
    asyncio.run(session.add_items(history))  # type: ignore[arg-type]
    model = ScriptedModel(coding_steps(2))
    cp = CachePilotAgents(make_pilot())
    agent = cp.wrap(Agent(name="x", tools=[read_file], model=model))
    asyncio.run(run(cp, agent, "go on", cp.session(session)))
    for call in model.calls:
        items = [dumps(i) for i in call.input]
        at = items.index(dumps(opaque))
        assert items[at - 1] == dumps(history[1])  # its reasoning item stays right before it
        assert items[:4] == [dumps(h) for h in history]


def test_a_failing_prepare_sends_the_input_unchanged(
    make_pilot: Any, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel(coding_steps(1))
    pilot = make_pilot()
    cp = CachePilotAgents(pilot, default_thread="broken")

    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("simulated failure")

    pilot.aprepare = boom  # type: ignore[method-assign]
    agent = cp.wrap(Agent(name="x", tools=[read_file], model=model))
    with caplog.at_level(logging.WARNING):
        result = asyncio.run(run(cp, agent, "go"))
    assert result.final_output.startswith("All files read")
    assert "input sent unchanged" in caplog.text


def test_bad_arguments_fail_fast(make_pilot: Any) -> None:
    pilot = make_pilot()
    with pytest.raises(ValueError):
        CachePilotAgents(pilot, max_media_chars=0)
    with pytest.raises(ValueError):
        CachePilotAgents("not a pilot")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        CachePilotAgents(pilot, default_thread="")
    cp = CachePilotAgents(pilot)
    with pytest.raises(ValueError):
        cp.run_config(thread="")
    with pytest.raises(ValueError):
        cp.session(object())  # type: ignore[arg-type]

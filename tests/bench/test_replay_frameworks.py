"""Real frameworks against the replay provider: LangChain `ChatOpenAI`, `create_agent`, and the
Agents SDK `Runner` with both OpenAI model classes.

The agents run the demo session's first turns with deterministic tools over the shipped
files (`run_demo_tool`): every tool result they produce must equal the recorded one, and
the provider must serve the turns in order with an unbroken prefix.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from cachepilot.usage import Usage
from cachepilot_bench.demo_workload import (
    DEMO_TOOL_SCHEMAS,
    DemoToolState,
    build_demo_session,
    run_demo_tool,
)
from cachepilot_bench.replay import FINISHED_TEXT, ReplayProvider, ReplayScript

langchain_openai = pytest.importorskip("langchain_openai")
from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

SESSION = build_demo_session()
FULL = ReplayScript.from_session(SESSION)
TURNS = 10
SHORT = ReplayScript(
    FULL.turns[:TURNS], FULL.tool_outputs, FULL.tools, system=FULL.system, prompts=FULL.prompts[:1]
)
TASK = FULL.prompts[0][1].text


@pytest.fixture
def provider() -> Iterator[ReplayProvider]:
    with ReplayProvider(FULL) as running:
        yield running


def chat_model(provider: ReplayProvider, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=provider.base_url, api_key="replay", model="gpt-5.4-mini", max_retries=0, **kwargs
    )


def cache_read(message: AIMessage) -> int:
    assert message.usage_metadata is not None
    return int(message.usage_metadata.get("input_token_details", {}).get("cache_read", -1))


# --------------------------------------------------------------------------- ChatOpenAI


@pytest.mark.parametrize("responses_api", [False, True])
def test_chat_openai_invoke_stream_and_tools(provider: ReplayProvider, responses_api: bool) -> None:
    model = chat_model(provider, use_responses_api=responses_api).bind_tools(DEMO_TOOL_SCHEMAS)
    prompt = [SystemMessage(FULL.system or ""), HumanMessage(TASK)]
    first = model.invoke(prompt)
    expected = FULL.turns[0].message
    assert [(c["id"], c["name"]) for c in first.tool_calls] == [
        (c.id, c.name) for c in expected.tool_calls
    ]
    assert first.tool_calls[0]["args"] == expected.tool_calls[0].parsed_arguments()
    assert cache_read(first) == 0
    second = model.invoke(prompt)  # the same prompt again: its prefix is cached
    assert cache_read(second) > 1000
    streamed: Any = None
    for chunk in model.stream(prompt):
        streamed = chunk if streamed is None else streamed + chunk
    assert [c["id"] for c in streamed.tool_calls] == [
        c.id for c in FULL.turns[2].message.tool_calls
    ]
    assert cache_read(streamed) > 1000
    records = provider.records
    assert [r.turn for r in records] == [0, 1, 2]
    assert [r.stream for r in records] == [False, False, True]
    assert {r.api for r in records} == {"responses" if responses_api else "chat"}
    for message, record in zip((first, second, streamed), records, strict=True):
        assert (
            Usage.from_langchain(message.usage_metadata).cached_tokens == record.usage.cached_tokens
        )


def test_chat_openai_stream_usage_with_include_usage(provider: ReplayProvider) -> None:
    model = chat_model(provider, stream_usage=True).bind_tools(DEMO_TOOL_SCHEMAS)
    prompt = [SystemMessage(FULL.system or ""), HumanMessage(TASK)]
    model.invoke(prompt)
    chunks = list(model.stream(prompt))
    assert provider.records[-1].body["stream_options"] == {"include_usage": True}
    merged: Any = None
    for chunk in chunks:
        merged = chunk if merged is None else merged + chunk
    assert merged.content == FULL.turns[1].message.text
    assert [c["id"] for c in merged.tool_calls] == [c.id for c in FULL.turns[1].message.tool_calls]
    assert cache_read(merged) == provider.records[-1].usage.cached_tokens > 0


# --------------------------------------------------------------------------- create_agent


def langchain_tools(state: DemoToolState) -> list[StructuredTool]:
    def make(schema: dict[str, Any]) -> StructuredTool:
        function = schema["function"]

        def run(**kwargs: Any) -> str:
            return run_demo_tool(function["name"], json.dumps(kwargs, ensure_ascii=False), state)

        return StructuredTool.from_function(
            func=run,
            name=function["name"],
            description=function["description"],
            args_schema=function["parameters"],
        )

    return [make(schema) for schema in DEMO_TOOL_SCHEMAS]


@pytest.mark.parametrize("responses_api", [False, True])
def test_create_agent_runs_the_recorded_session(
    provider: ReplayProvider, responses_api: bool
) -> None:
    provider.load(SHORT)
    agent = create_agent(
        chat_model(provider, use_responses_api=responses_api),
        tools=langchain_tools(DemoToolState()),
        system_prompt=SHORT.system,
    )
    result = agent.invoke({"messages": [{"role": "user", "content": TASK}]})
    messages = result["messages"]
    assert messages[-1].text == FINISHED_TEXT
    tool_messages = [m for m in messages if m.type == "tool"]
    expected_ids = [c.id for t in SHORT.turns for c in t.message.tool_calls]
    assert [m.tool_call_id for m in tool_messages] == expected_ids
    for message in tool_messages:  # the deterministic tools reproduce the recording
        assert message.content == SHORT.output_for(message.tool_call_id)
    records = provider.records
    assert [r.turn for r in records] == [*range(TURNS), None]
    assert all(r.prefix_extends for r in records)
    assert records[-1].usage.cached_tokens > 0.9 * records[-1].usage.input_tokens


# --------------------------------------------------------------------------- Agents SDK

agents = pytest.importorskip("agents")


def sdk_tools(state: DemoToolState) -> list[Any]:
    tools = []
    for schema in DEMO_TOOL_SCHEMAS:
        function = schema["function"]

        async def invoke(_ctx: Any, arguments: str, name: str = function["name"]) -> str:
            return run_demo_tool(name, arguments, state)

        tools.append(
            agents.FunctionTool(
                name=function["name"],
                description=function["description"],
                params_json_schema=function["parameters"],
                on_invoke_tool=invoke,
                strict_json_schema=False,
            )
        )
    return tools


@pytest.mark.parametrize("model_class", ["OpenAIResponsesModel", "OpenAIChatCompletionsModel"])
@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_runner_runs_the_recorded_session(
    provider: ReplayProvider, model_class: str, streamed: bool
) -> None:
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    script = ReplayScript(FULL.turns[:5], FULL.tool_outputs, FULL.tools, system=FULL.system)
    provider.load(script)

    async def run() -> Any:
        client = AsyncOpenAI(base_url=provider.base_url, api_key=provider.api_key, max_retries=0)
        model = getattr(agents, model_class)("gpt-5.4-mini", client)
        agent = agents.Agent(
            name="forge", instructions=script.system, tools=sdk_tools(DemoToolState()), model=model
        )
        if streamed:
            result = agents.Runner.run_streamed(agent, TASK, max_turns=20)
            async for _ in result.stream_events():
                pass
            return result
        return await agents.Runner.run(agent, TASK, max_turns=20)

    result = asyncio.run(run())
    assert result.final_output == FINISHED_TEXT
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert [item.output for item in outputs] == [
        script.output_for(c.id) for t in script.turns for c in t.message.tool_calls
    ]
    records = provider.records
    assert [r.turn for r in records] == [0, 1, 2, 3, 4, None]
    assert all(r.prefix_extends for r in records)
    usage = result.context_wrapper.usage
    assert usage.input_tokens == sum(r.usage.input_tokens for r in records)
    assert usage.input_tokens_details.cached_tokens == sum(r.usage.cached_tokens for r in records)

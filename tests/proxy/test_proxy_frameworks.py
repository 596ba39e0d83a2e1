"""LangChain `ChatOpenAI` / `ChatAnthropic` and an Agents SDK `Runner` pointed at the proxy
with `base_url`; upstream = the replay provider."""

from __future__ import annotations

import asyncio

from agents import RunConfig, Runner
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BASH, BIG, BIG_REF, CALL, FINAL, SYSTEM, recall_script

from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.frameworks.agents_replay import replay_agent
from cachepilot_bench.replay import ReplayProvider, ReplayScript


def lc_history() -> list[object]:
    return [
        SystemMessage(SYSTEM),
        HumanMessage("Build the project."),
        AIMessage(
            "Running the build.",
            tool_calls=[{"id": CALL.id, "name": "bash", "args": {"command": "make"}}],
        ),
        ToolMessage(BIG, tool_call_id=CALL.id),
    ]


def test_langchain_chat_openai_recall_is_invisible() -> None:
    with ReplayProvider(recall_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        model = ChatOpenAI(
            model="gpt-test", base_url=proxy.base_url, api_key="sk-test", max_retries=0
        ).bind_tools([BASH])
        reply = model.invoke(lc_history())
        records = upstream.records
    assert reply.content == FINAL and not reply.tool_calls
    assert len(records) == 2 and f'recall(ref="{BIG_REF}")' in str(records[0].body["messages"])


def test_langchain_chat_anthropic_streams_through_the_proxy() -> None:
    with (
        ReplayProvider(recall_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        model = ChatAnthropic(
            model="claude-test", base_url=proxy.root, api_key="sk-ant-test", max_retries=0
        ).bind_tools([ANTHROPIC_BASH])
        chunks = list(model.stream(lc_history()))
        records = upstream.records
    text = "".join(
        part.get("text", "") if isinstance(part, dict) else str(part)
        for chunk in chunks
        for part in (chunk.content if isinstance(chunk.content, list) else [chunk.content])
    )
    assert text.endswith(FINAL)
    assert not any(chunk.tool_call_chunks for chunk in chunks)
    assert len(records) == 2


def test_agents_sdk_runner_through_the_proxy() -> None:
    full = ReplayScript.from_session(build_demo_session())
    script = ReplayScript(full.turns[:6], full.tool_outputs, full.tools, system=full.system)
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        client = AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0)
        agent = replay_agent(script, upstream, client=client)
        prompt = full.prompts[0][1].text
        result = asyncio.run(
            Runner.run(agent, prompt, max_turns=12, run_config=RunConfig(tracing_disabled=True))
        )
        records = upstream.records
    assert len(records) == 7  # six recorded turns, then the replay's closing answer
    assert [r.turn for r in records[:6]] == list(range(6))
    assert all(r.prefix_extends for r in records)
    assert [t["name"] for t in records[0].body["tools"]][-1] == "recall"
    assert isinstance(result.final_output, str) and result.final_output

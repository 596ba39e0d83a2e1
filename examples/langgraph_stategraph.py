"""cachepilot in a hand-built LangGraph `StateGraph`, offline.

The graph is the tool-calling agent of the LangGraph docs (`StateGraph`, a `call_model` node,
`ToolNode`, `tools_condition`); the lines marked `# cachepilot` are all it takes to add
cachepilot. The model is a real `ChatOpenAI` talking HTTP to the embedded replay provider,
which replays the built-in demo session's recorded assistant turns and reports the cache
usage a provider would for the requests it actually receives. The tools are the demo's
deterministic tools over the files the project ships. The same session runs twice, without
and with cachepilot, and the input cost of each is printed.

Run: uv run python examples/langgraph_stategraph.py   (needs the `langchain` extra)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.pricing import cost
from cachepilot.sim import get_profile
from cachepilot_bench.demo_workload import (
    DEMO_TOOL_SCHEMAS,
    DemoToolState,
    build_demo_session,
    run_demo_tool,
    volatile_system_prompt,
)
from cachepilot_bench.replay import ReplayProvider, ReplayScript
from cachepilot_langgraph import (
    CachePilotChatModel,
    CachePilotNode,
    PilotStateMixin,
    cachepilot_tool_node,
)

PROFILE = "openai-gpt-5.4-mini"


class State(MessagesState, PilotStateMixin):  # cachepilot: the pilot state rides along
    """The docs' agent state."""


def system_prompt(state: State) -> str:
    """The agent's system prompt, rendered with the current date and session as agents do."""
    return volatile_system_prompt(sum(isinstance(m, AIMessage) for m in state["messages"]))


def build_graph(
    model: BaseChatModel,
    tools: list[BaseTool],
    pilot: CachePilot | None = None,
    clock: Callable[[], float] | None = None,
) -> Any:
    """The LangGraph docs' tool-calling agent; with a `pilot`, the cachepilot lines apply."""
    if pilot is not None:
        model = CachePilotChatModel(model, pilot, clock=clock)  # cachepilot: wrap the model
    llm = model.bind_tools(tools)

    def call_model(state: State) -> dict[str, Any]:
        messages = [SystemMessage(system_prompt(state)), *state["messages"]]
        return {"messages": [llm.invoke(messages)]}

    builder = StateGraph(State)
    builder.add_node("agent", call_model)
    builder.add_conditional_edges("agent", tools_condition)
    if pilot is None:
        builder.add_node("tools", ToolNode(tools))
        builder.add_edge(START, "agent")
        builder.add_edge("tools", "agent")
    else:
        # cachepilot: a maintenance node before the model, a ToolNode that reduces and recalls.
        node = CachePilotNode(pilot, system=system_prompt, tools=tools, clock=clock)
        builder.add_node("cachepilot", node)
        builder.add_node("tools", cachepilot_tool_node(pilot, tools))
        builder.add_edge(START, "cachepilot")
        builder.add_edge("cachepilot", "agent")
        builder.add_edge("tools", "cachepilot")
    return builder.compile(checkpointer=InMemorySaver())


def demo_tools() -> list[BaseTool]:
    """The demo session's tools (deterministic, over the files the project ships)."""
    state = DemoToolState()

    def make(schema: dict[str, Any]) -> BaseTool:
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


def run(script: ReplayScript, with_cachepilot: bool) -> dict[str, Any]:
    """Run the session's user turns through the graph; usage as the provider reported it."""
    price = get_profile(PROFILE).price
    with ReplayProvider(script, PROFILE) as provider:
        model = ChatOpenAI(
            base_url=provider.base_url, api_key="replay", model="gpt-5.4-mini", max_retries=0
        )
        pilot = CachePilot(Config(), store=InMemoryArtifactStore()) if with_cachepilot else None
        graph = build_graph(model, demo_tools(), pilot, clock=provider.clock)
        config = {"configurable": {"thread_id": "demo"}, "recursion_limit": 1_000}
        for first_turn, prompt in script.prompts:
            if first_turn < len(script):
                graph.invoke({"messages": [HumanMessage(prompt.text)]}, config)
        records = provider.records
    messages = graph.get_state(config).values["messages"]
    return {
        "calls": len(records),
        "input_tokens": sum(r.usage.input_tokens for r in records),
        "cached_tokens": sum(r.usage.cached_tokens for r in records),
        "input_cost_usd": sum(cost(r.usage, price).input_usd for r in records),
        "prefix_breaks": sum(not r.prefix_extends for r in records[1:]),
        "state_chars": sum(len(str(m.content)) for m in messages),
    }


def main(max_turns: int | None = None) -> dict[str, dict[str, Any]]:
    """Run the demo session without and with cachepilot; print and return the numbers."""
    script = ReplayScript.from_session(build_demo_session())
    if max_turns is not None:
        script = ReplayScript(
            script.turns[:max_turns],
            script.tool_outputs,
            script.tools,
            system=script.system,
            prompts=[p for p in script.prompts if p[0] < max_turns],
        )
    results = {"vanilla": run(script, False), "cachepilot": run(script, True)}
    print(f"{'':12}{'calls':>7}{'input tok':>11}{'hit rate':>10}{'input $':>10}{'breaks':>8}")
    for name, r in results.items():
        hit = r["cached_tokens"] / max(1, r["input_tokens"])
        print(
            f"{name:12}{r['calls']:>7}{r['input_tokens']:>11,}{hit:>10.0%}"
            f"{r['input_cost_usd']:>10.4f}{r['prefix_breaks']:>8}"
        )
    return results


if __name__ == "__main__":
    main()

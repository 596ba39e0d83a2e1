"""`CachePilotMiddleware` is a guest: the agent behaves as without it, except for what the model
reads. Each test compares with the plain `create_agent` run or checks what a user relies on."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.pii import PIIMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from lg_scripted import REF, run_command, tool_call

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot_langgraph import CachePilotMiddleware

BIG = "\n".join(f"row {i}: {'v' * 70}" for i in range(4_000))


@tool(return_direct=True)
def export_table() -> str:
    """Export the whole table."""
    return BIG


@tool
def lookup(account: str) -> str:
    """Look an account up."""
    return f"account {account}: owner jane.doe@example.com card 4111 1111 1111 1111\n" + BIG


def _pilot(**config: Any) -> CachePilot:
    return CachePilot(Config(**config), store=InMemoryArtifactStore())


def _plain_and_ours(
    build: Callable[[list[AgentMiddleware[Any, Any]]], Any], run: Callable[[Any], Any]
) -> tuple[Any, Any, CachePilot]:
    pilot = _pilot()
    plain = run(build([]))
    ours = run(build([CachePilotMiddleware(pilot)]))
    return plain, ours, pilot


def _messages(state: dict[str, Any]) -> list[tuple[str, str]]:
    return [(type(m).__name__, str(m.content)) for m in state["messages"]]


def test_return_direct_hands_the_caller_the_tools_own_output(scripted) -> None:
    def build(middleware: list[Any]) -> Any:
        model = scripted(lambda m, i: tool_call("export_table", {}, i))
        return create_agent(model, [export_table], middleware=middleware)

    plain, ours, _ = _plain_and_ours(build, lambda a: a.invoke({"messages": [HumanMessage("x")]}))
    assert ours["messages"][-1].content == BIG
    assert _messages(ours) == _messages(plain)


def test_state_and_output_are_the_plain_runs(scripted) -> None:
    def responder(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("run_command", {"command": "make all"}, i)
        return AIMessage(content="done")

    def build(middleware: list[Any]) -> Any:
        return create_agent(
            scripted(responder), [run_command], middleware=middleware, checkpointer=InMemorySaver()
        )

    config = {"configurable": {"thread_id": "s"}}
    plain, ours, _ = _plain_and_ours(
        build, lambda a: (a.invoke({"messages": [HumanMessage("go")]}, config), a)
    )
    assert set(ours[0]) == set(plain[0])  # no "cachepilot" key in the output
    assert _messages(ours[0]) == _messages(plain[0])
    assert _messages(ours[1].get_state(config).values) == _messages(plain[0])


def test_an_agent_without_tools_never_sees_recall() -> None:
    # GenericFakeChatModel has no tool support: binding any tool raises.
    model = GenericFakeChatModel(messages=iter([AIMessage(content="hello")]))
    agent = create_agent(model, [], middleware=[CachePilotMiddleware(_pilot())])
    out = agent.invoke({"messages": [HumanMessage("hi")]})
    assert out["messages"][-1].content == "hello"


def test_recall_false_keeps_a_tool_less_graph_identical() -> None:
    def graph(middleware: list[Any]) -> str:
        model = GenericFakeChatModel(messages=iter([AIMessage(content="hello")]))
        return str(create_agent(model, [], middleware=middleware).get_graph().draw_mermaid())

    middleware = CachePilotMiddleware(_pilot(), recall=False)
    assert graph([middleware]).replace("CachePilotMiddleware", "") == graph([]).replace(
        "CachePilotMiddleware", ""
    )


def test_outer_tool_middleware_still_receives_tool_messages(scripted) -> None:
    seen: list[type] = []

    class Outer(AgentMiddleware[Any, Any]):
        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            result = handler(request)
            seen.append(type(result))
            if isinstance(result, ToolMessage):
                return result.model_copy(update={"content": "edited"})
            return result

    def responder(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("run_command", {"command": "ls"}, i)
        return AIMessage(content="done")

    model = scripted(responder)
    agent = create_agent(model, [run_command], middleware=[Outer(), CachePilotMiddleware(_pilot())])
    out = agent.invoke({"messages": [HumanMessage("go")]})
    assert seen == [ToolMessage]
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["edited"]


def test_unregistered_tools_are_still_refused_by_langchain(scripted) -> None:
    @tool
    def stray(x: str) -> str:
        """Not registered with the agent."""
        return x

    class AddsStray(AgentMiddleware[Any, Any]):
        def wrap_model_call(
            self, request: ModelRequest[Any], handler: Callable[..., ModelResponse[Any]]
        ) -> Any:
            return handler(request.override(tools=[*request.tools, stray]))

    agent = create_agent(
        scripted(lambda m, i: AIMessage(content="x")),
        [run_command],
        middleware=[AddsStray(), CachePilotMiddleware(_pilot())],
    )
    with pytest.raises(ValueError, match="stray"):
        agent.invoke({"messages": [HumanMessage("go")]})


@pytest.mark.parametrize("first", [True, False])
def test_inner_middleware_appends_reach_state(scripted, first: bool) -> None:
    class Appends(AgentMiddleware[Any, Any]):
        def wrap_model_call(
            self, request: ModelRequest[Any], handler: Callable[..., ModelResponse[Any]]
        ) -> Any:
            request.messages.append(HumanMessage("remember to be nice!"))
            return handler(request)

    ours = CachePilotMiddleware(_pilot())
    order = [ours, Appends()] if first else [Appends(), ours]
    agent = create_agent(scripted(lambda m, i: AIMessage(content="ok")), [], middleware=order)
    out = agent.invoke({"messages": [HumanMessage("Hello")]})
    assert [m.content for m in out["messages"]] == ["Hello", "remember to be nice!", "ok"]


def test_runs_without_a_thread_never_share_a_scope(scripted) -> None:
    refs: dict[str, str] = {}
    accounts = {"a": "acct-1111-aaaa", "b": "acct-2222-bbbb"}

    def responder_for(user: str) -> Callable[[list[BaseMessage], int], AIMessage]:
        def respond(messages: list[BaseMessage], i: int) -> AIMessage:
            if i == 0:
                return tool_call("run_command", {"command": f"audit {user}"}, i)
            if i == 1:
                tool_text = str(messages[-1].content)
                found = REF.search(tool_text)
                assert found is not None
                refs[user] = found.group(1)
                other = "b" if user == "a" else "a"
                if other in refs:
                    return tool_call("recall", {"ref": refs[other]}, i)
            return AIMessage(content="done")

        return respond

    pilot = _pilot()
    middleware = CachePilotMiddleware(pilot)
    models = {u: scripted(responder_for(u)) for u in accounts}
    agents = {
        u: create_agent(
            models[u],
            [run_command],
            system_prompt=f"You serve account {accounts[u]}. Session id 3f2a9c1e-{u}.",
            middleware=[middleware],
        )
        for u in accounts
    }

    async def both() -> list[Any]:
        return await asyncio.gather(
            *(agents[u].ainvoke({"messages": [HumanMessage("check")]}) for u in accounts)
        )

    outs = dict(zip(accounts, asyncio.run(both()), strict=True))
    # Whatever the interleaving, a recall of the other run's ref is not found.
    for user, out in outs.items():
        for message in out["messages"]:
            if isinstance(message, ToolMessage) and message.name == "recall":
                assert "not found" in str(message.content)
                assert "step" not in str(message.content), user
    # Each model only ever saw its own account id.
    for user, model in models.items():
        other = accounts["b" if user == "a" else "a"]
        assert all(other not in str(r) for r in model.requests)
        assert "default" not in pilot._states  # no shared fallback thread


@pytest.mark.parametrize("pii_first", [True, False])
def test_a_redaction_is_never_undone_by_recall(scripted, pii_first: bool) -> None:
    sent: list[str] = []

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i == 0:
            return tool_call("lookup", {"account": "7"}, i)
        text = str(messages[-1].content)
        sent.append(text)
        found = REF.search(text)
        if i == 1 and found:
            return tool_call("recall", {"ref": found.group(1), "lines": "1-3"}, i)
        return AIMessage(content="done")

    pilot = _pilot()
    pii = [
        PIIMiddleware("email", strategy="redact", apply_to_tool_results=True),
        PIIMiddleware("credit_card", strategy="redact", apply_to_tool_results=True),
    ]
    ours = CachePilotMiddleware(pilot)
    middleware = [*pii, ours] if pii_first else [ours, *pii]
    agent = create_agent(scripted(respond), [lookup], middleware=middleware)
    agent.invoke({"messages": [HumanMessage("look up account 7")]})
    assert sent, "the model read the tool result"
    for text in sent:
        assert "jane.doe@example.com" not in text
        assert "4111 1111 1111 1111" not in text
    for thread, _ in pilot._states.items():
        for info in pilot.store.list(thread):
            artifact = pilot.store.get(thread, info.ref)
            assert artifact is not None
            assert "jane.doe@example.com" not in artifact.text
            assert re.search(r"4111.?1111.?1111.?1111", artifact.text) is None


def _context_error() -> openai.BadRequestError:
    response = httpx.Response(
        400, request=httpx.Request("POST", "https://api.openai.com/v1/chat/completions")
    )
    body = {
        "message": "This model's maximum context length is 128000 tokens.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
    return openai.BadRequestError(body["message"], response=response, body=body)


def test_context_length_error_folds_persists_and_retries_once(
    scripted, caplog: pytest.LogCaptureFixture
) -> None:
    pilot = CachePilot(
        Config(maintenance=MaintenanceConfig(enabled=False)), store=InMemoryArtifactStore()
    )
    raised: list[int] = []

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i < 6:
            return tool_call("run_command", {"command": f"step {i}"}, i)
        if not raised:
            raised.append(i)
            raise _context_error()
        return AIMessage(content="done")

    agent = create_agent(
        scripted(respond),
        [run_command],
        middleware=[CachePilotMiddleware(pilot)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "ctx"}}
    with caplog.at_level("WARNING"):
        out = agent.invoke({"messages": [HumanMessage("go")]}, config)
    assert out["messages"][-1].content == "done"
    assert raised == [6]
    saved = agent.get_state(config).values["cachepilot"]
    assert [e["reason"] for e in saved["plan"]["epochs"]] == ["context-length-error"]
    assert any("folded history and retrying" in r.getMessage() for r in caplog.records)

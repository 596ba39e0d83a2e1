"""`ChatGoogleGenerativeAI` (langchain-google-genai, on the real `google-genai` SDK) in a
LangGraph `create_agent`: plain, through `CachePilotMiddleware` and through the proxy, against a
scripted Gemini upstream that enforces the API's rules (signatures echoed, results in call
order). The run's outcome is the same in all three; cachepilot changes only what the upstream
reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "proxy"))
from gemini_upstream import gemini_upstream
from proxy_helpers import running_proxy

genai_chat = pytest.importorskip("langchain_google_genai")
agents = pytest.importorskip("langchain.agents")

SYSTEM = "You are a careful build assistant. " + "Follow the house rules exactly. " * 250
LOG = "\n".join(f"{i:05d} compiling module_{i % 97} ... ok" for i in range(3000))
FINAL = "The build is fine: 3000 modules compiled."


@tool
def bash(command: str) -> str:
    """Run a shell command."""
    return f"$ {command}\n{LOG}"


def replies() -> list[Any]:
    calls = [ToolCall(f"gemini-call-{i}", "bash", json.dumps({"command": f"make s{i}"}))
             for i in range(2)]  # fmt: skip
    return [
        Message("assistant", "Step one.", tool_calls=(calls[0],)),
        Message("assistant", "Step two.", tool_calls=(calls[1],)),
        Message("assistant", FINAL),
    ]


def model(root: str) -> Any:
    return genai_chat.ChatGoogleGenerativeAI(
        model="gemini-2.5-flash", google_api_key="gm-test-key", base_url=root, max_retries=0
    )


def run(root: str, middleware: list[Any] | None = None) -> list[Any]:
    agent = agents.create_agent(
        model(root),
        [bash],
        system_prompt=SYSTEM,
        middleware=middleware or [],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "g"}}
    out = agent.invoke({"messages": [HumanMessage("Build every step.")]}, config)
    return list(out["messages"])


def outcome(messages: list[Any]) -> tuple[str, list[str], list[str]]:
    """The run's answer, the tool results its state holds, the calls it made."""
    calls = [c["name"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
    return str(messages[-1].text), results, calls


def test_plain_middleware_and_proxy_runs_end_alike() -> None:
    from cachepilot_langgraph import CachePilotMiddleware

    with gemini_upstream(replies()) as plain_upstream:
        plain = outcome(run(plain_upstream.root))
    assert plain_upstream.refusals == []
    assert plain[0] == FINAL and plain[2] == ["bash", "bash"]

    pilot = CachePilot(Config(provider="gemini-2.5-flash"), store=InMemoryArtifactStore())
    with gemini_upstream(replies()) as upstream:
        with_middleware = outcome(run(upstream.root, [CachePilotMiddleware(pilot)]))
    assert with_middleware == plain  # the run returns what the plain run returns
    assert upstream.refusals == []  # signatures echoed, results paired in order
    bodies = upstream.bodies()
    names = [d["name"] for t in bodies[0]["tools"] for d in t.get("functionDeclarations", [])]
    assert "recall" in names and "bash" in names
    sent = json.dumps(bodies[-1]["contents"])
    assert LOG not in sent  # the model read the reduced views
    upstream.assert_append_only()

    with gemini_upstream(replies()) as upstream, running_proxy(upstream.root) as proxy:
        through_proxy = outcome(run(proxy.root))
    assert through_proxy == plain
    assert upstream.refusals == []
    assert LOG not in json.dumps(upstream.bodies()[-1]["contents"])
    upstream.assert_append_only()

"""The LangGraph / LangChain names that are not public API
(`cachepilot_langgraph._framework_private`): each resolves in the installed releases, and each
fallback degrades as documented."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.runtime import get_runtime

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_langgraph import CachePilotChatModel, _framework_private
from cachepilot_langgraph.run_scope import RunScopes, run_token


def test_every_private_framework_name_resolves() -> None:
    assert _framework_private.missing() == [], "a release moved a name: docs/compatibility.md"


class _State(TypedDict):
    seen: list[Any]


def _graph() -> Any:
    def node(state: _State, config: RunnableConfig) -> dict[str, list[Any]]:
        # The private key reads the very runtime LangGraph's public accessor returns.
        same = _framework_private.runtime_of(config) is get_runtime()
        return {"seen": [same, run_token(config)]}

    builder = StateGraph(_State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return builder.compile()


def test_the_runtime_is_read_from_a_nodes_config() -> None:
    seen = _graph().invoke({"seen": []})["seen"]
    assert seen[0] is True and seen[1] is not None
    assert _framework_private.runtime_of(None) is None
    assert _framework_private.runtime_of({"configurable": {}}) is None


def test_without_the_key_each_step_gets_a_fresh_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    pilot = CachePilot(store=InMemoryArtifactStore())
    scopes = RunScopes(pilot)
    tokens = []

    def node(state: _State, config: RunnableConfig) -> dict[str, list[Any]]:
        tokens.append(run_token(config))
        return {"seen": [scopes.resolve(config, None), scopes.resolve(config, None)]}

    builder = StateGraph(_State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile()
    first = graph.invoke({"seen": []})["seen"]
    assert first[0] == first[1]  # one run, one scope
    monkeypatch.setattr(_framework_private, "_RUNTIME_KEY", None)
    second = graph.invoke({"seen": []})["seen"]
    assert tokens[-1] is None and second[0] != second[1]  # isolation holds, continuity not


class _Bare:
    pass


def test_the_wrapped_models_type_and_parameters() -> None:
    inner = FakeListChatModel(responses=["hi"])
    wrapper = CachePilotChatModel(inner, pilot=CachePilot(store=InMemoryArtifactStore()))
    assert wrapper._llm_type == "cachepilot-fake-list-chat-model"
    assert wrapper._identifying_params == {"cachepilot": True, "model": {"responses": ["hi"]}}
    assert _framework_private.llm_type(_Bare()) == "_Bare"
    assert _framework_private.identifying_params(_Bare()) == {}

"""Pytest plugin: add cachepilot to every `create_agent` call of a host test run.

Loaded with `-p inject_langchain` into LangChain's own agent tests. It wraps
`langchain.agents.create_agent` (and every module that already holds it by name) so that each
agent gets `make_middleware()` first or last in its middleware list
(`$CACHEPILOT_COMPAT_POSITION`, `first` by default). Each test gets a fresh pilot.

When the plugin API changes, `make_middleware` is the one place to adjust.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Generator
from typing import Any

import pytest

__all__ = ["ENV_POSITION", "make_middleware", "pytest_configure", "pytest_runtest_protocol"]

ENV_POSITION = "CACHEPILOT_COMPAT_POSITION"

_pilot: Any = None


def _current_pilot() -> Any:
    """The pilot of the running test (one per test, made on first use)."""
    global _pilot
    if _pilot is None:
        from cachepilot import CachePilot
        from cachepilot.artifacts import InMemoryArtifactStore

        _pilot = CachePilot(store=InMemoryArtifactStore())
    return _pilot


def make_middleware() -> Any:
    """The cachepilot middleware a new user adds to an agent."""
    from cachepilot_langgraph import CachePilotMiddleware

    return CachePilotMiddleware(_current_pilot())


def _position() -> str:
    position = os.environ.get(ENV_POSITION, "first")
    if position not in ("first", "last"):
        raise pytest.UsageError(f"{ENV_POSITION} must be 'first' or 'last', not {position!r}")
    return position


def _injecting(create_agent: Callable[..., Any], position: str) -> Callable[..., Any]:
    @functools.wraps(create_agent)
    def create_agent_with_cachepilot(*args: Any, **kwargs: Any) -> Any:
        mine = list(kwargs.get("middleware") or ())
        ours = make_middleware()
        kwargs["middleware"] = [ours, *mine] if position == "first" else [*mine, ours]
        return create_agent(*args, **kwargs)

    create_agent_with_cachepilot.__cachepilot_compat__ = True  # type: ignore[attr-defined]
    return create_agent_with_cachepilot


def pytest_configure(config: pytest.Config) -> None:
    """Replace `create_agent` before any test module imports it."""
    import langchain.agents
    import langchain.agents.factory

    original = langchain.agents.factory.create_agent
    if getattr(original, "__cachepilot_compat__", False):
        return
    patched = _injecting(original, _position())
    for module in list(sys.modules.values()):
        if getattr(module, "create_agent", None) is original:
            module.create_agent = patched  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """A fresh pilot for every test."""
    global _pilot
    _pilot = None
    try:
        return (yield)
    finally:
        _pilot = None

"""Pytest plugin: run every Agents SDK run of a host test run through cachepilot.

Loaded with `-p inject_agents` into the Agents SDK's own tests. It wraps `AgentRunner.run`,
`run_sync` and `run_streamed` (what `Runner.run`, `run_sync` and `run_streamed` call) so that
every outermost run is made as the plugin's README tells a user to make it:

- the starting agent is `cp.wrap(agent)`;
- `run_config=cp.run_config(base, session=session)`: the test's own run config (a `RunConfig`
  or its dictionary form) and session, the session itself passed to the SDK unchanged (a run
  without one gets none: adding a session would carry history between the test's runs);
- `hooks=cp.hooks_with(hooks)` (or `cp.hooks`).

Nested runs (an agent used as a tool runs its own `Runner.run` inside a tool call) are left to
the SDK: a user cannot reach them either. Input the SDK itself rejects (a run config of the
wrong type, agent-scoped hooks) is passed through untouched so the SDK reports it as usual.
Each test gets a fresh `CachePilotAgents` over a fresh pilot.

When the plugin API changes, `make_plugin` and `_inject` are the places to adjust.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Generator
from typing import Any

import pytest

__all__ = ["make_plugin", "pytest_configure", "pytest_runtest_protocol"]

_plugin: Any = None
_inside_run: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "cachepilot_compat_inside_run", default=False
)


def make_plugin() -> Any:
    """The `CachePilotAgents` a new user creates."""
    from cachepilot import CachePilot
    from cachepilot.artifacts import InMemoryArtifactStore
    from cachepilot_agents import CachePilotAgents

    return CachePilotAgents(CachePilot(store=InMemoryArtifactStore()))


def _current_plugin() -> Any:
    """The plugin of the running test (one per test, made on first use)."""
    global _plugin
    if _plugin is None:
        _plugin = make_plugin()
    return _plugin


def _inject(agent: Any, kwargs: dict[str, Any]) -> Any:
    """The starting agent and keyword arguments of the run, as a user passes them."""
    from agents import Agent, RunConfig
    from agents.lifecycle import RunHooksBase

    cp = _current_plugin()
    if isinstance(agent, Agent):
        agent = cp.wrap(agent)
    session = kwargs.get("session")
    if session is not None and not all(
        callable(getattr(session, name, None)) for name in ("get_items", "add_items")
    ):
        session = None  # not a session: the SDK reports it as usual
    base = kwargs.get("run_config")
    if base is None or isinstance(base, (dict, RunConfig)):
        try:  # the dictionary form is read as the SDK reads it (provider ownership too)
            kwargs["run_config"] = cp.run_config(base, session=session)
        except ValueError:
            return agent  # the SDK rejects it; let it say so
    hooks = kwargs.get("hooks")
    if hooks is None:
        kwargs["hooks"] = cp.hooks
    elif isinstance(hooks, RunHooksBase):
        kwargs["hooks"] = cp.hooks_with(hooks)
    return agent


def _outermost(method: Callable[..., Any]) -> Callable[..., Any]:
    """Inject into the outermost run only (nested runs see the flag in their context)."""
    if getattr(method, "__cachepilot_compat__", False):
        return method

    @functools.wraps(method)
    def run_with_cachepilot(self: Any, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        if _inside_run.get():
            return method(self, starting_agent, input, **kwargs)
        starting_agent = _inject(starting_agent, kwargs)
        token = _inside_run.set(True)
        try:
            return method(self, starting_agent, input, **kwargs)
        finally:
            _inside_run.reset(token)

    if method.__name__ == "run":  # a coroutine function: keep the flag set while it runs

        @functools.wraps(method)
        async def arun_with_cachepilot(
            self: Any, starting_agent: Any, input: Any, **kwargs: Any
        ) -> Any:
            if _inside_run.get():
                return await method(self, starting_agent, input, **kwargs)
            starting_agent = _inject(starting_agent, kwargs)
            token = _inside_run.set(True)
            try:
                return await method(self, starting_agent, input, **kwargs)
            finally:
                _inside_run.reset(token)

        arun_with_cachepilot.__cachepilot_compat__ = True  # type: ignore[attr-defined]
        return arun_with_cachepilot
    run_with_cachepilot.__cachepilot_compat__ = True  # type: ignore[attr-defined]
    return run_with_cachepilot


def pytest_configure(config: pytest.Config) -> None:
    """Wrap the runner's entry points before any test runs."""
    from agents.run import AgentRunner

    for name in ("run", "run_sync", "run_streamed"):
        setattr(AgentRunner, name, _outermost(getattr(AgentRunner, name)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """A fresh plugin (and pilot) for every test."""
    global _plugin
    _plugin = None
    try:
        return (yield)
    finally:
        _plugin = None

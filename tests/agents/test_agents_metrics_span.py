"""Each model call of a run leaves a `cachepilot` custom span in the Agents SDK trace."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import TracingProcessor, get_trace_provider, set_trace_provider
from agents.tracing.provider import DefaultTraceProvider

from cachepilot_agents import CachePilotAgents


@function_tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def test_hooks_emit_metrics_spans(make_pilot: Any) -> None:
    seen: list[dict[str, Any]] = []

    class Collect(TracingProcessor):
        def on_trace_start(self, t: Any) -> None: ...
        def on_trace_end(self, t: Any) -> None: ...
        def on_span_start(self, span: Any) -> None: ...
        def on_span_end(self, span: Any) -> None:
            seen.append(span.span_data.export())

        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    previous = get_trace_provider()
    provider = DefaultTraceProvider()
    provider.register_processor(Collect())
    set_trace_provider(provider)
    try:
        model = ScriptedModel(
            [[function_call("lookup", {"key": "a"}, call_id="c1")], [assistant_message("ok")]]
        )
        cp = CachePilotAgents(make_pilot(), default_thread="spans", trace_metrics=True)
        agent = cp.wrap(Agent(name="a", tools=[lookup], model=model))
        asyncio.run(Runner.run(agent, "go", run_config=cp.run_config(), hooks=cp.hooks))
    finally:
        set_trace_provider(previous)
    spans = [s for s in seen if s.get("name") == "cachepilot"]
    assert len(spans) == 2
    assert [s["data"]["call"] for s in spans] == [1, 2]
    assert all(s["data"]["thread"] == "spans" for s in spans)

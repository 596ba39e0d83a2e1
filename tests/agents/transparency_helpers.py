"""Run one scenario plain and with cachepilot, through the real `Runner`, and compare."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, RunConfig, RunHooks, Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from cachepilot_agents import CachePilotAgents

REF = re.compile(r'recall\(ref=\\?"([0-9a-f]{12})\\?"\)')


@dataclass
class Outcome:
    """What one run produced, as its caller can observe it."""

    result: Any
    events: list[Any] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def final_output(self) -> Any:
        return self.result.final_output

    @property
    def item_kinds(self) -> list[str]:
        return [type(i).__name__ for i in self.result.new_items]

    @property
    def item_dumps(self) -> list[Any]:
        return [i.to_input_item() for i in self.result.new_items]


async def run(
    agent: Agent[Any],
    task: Any,
    *,
    cp: CachePilotAgents | None = None,
    streamed: bool = False,
    hooks: RunHooks[Any] | None = None,
    session: Any = None,
    base: RunConfig | None = None,
    max_turns: int = 20,
) -> Outcome:
    """One run, wired the way the plugin documents (all parts) when `cp` is given."""
    config = base
    if cp is not None:
        agent = cp.wrap(agent)
        config = cp.run_config(base)
        hooks = cp.hooks_with(hooks)
        session = cp.session(session) if session is not None else None
    if streamed:
        streaming = Runner.run_streamed(
            agent, task, run_config=config, hooks=hooks, session=session, max_turns=max_turns
        )
        events = [e async for e in streaming.stream_events()]
        return Outcome(streaming, events)
    result = await Runner.run(
        agent, task, run_config=config, hooks=hooks, session=session, max_turns=max_turns
    )
    return Outcome(result)


def refs_in(items: Sequence[Any]) -> list[str]:
    """Recall refs named anywhere in `items`."""
    return REF.findall(str(items))


def recall_then_answer(answer: str) -> Callable[[Any], Any]:
    """A responder: recall the first ref in the input if there is one, else answer."""

    def respond(call: Any) -> Any:
        answered = {
            i.get("call_id")
            for i in call.input
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }
        found = [r for r in refs_in(call.input) if f"recall-{r}" not in answered]
        if found:
            return [function_call("recall", {"ref": found[0]}, call_id=f"recall-{found[0]}")]
        return [assistant_message(answer)]

    return respond


def scripted(*steps: Any) -> ScriptedModel:
    """A scripted model."""
    return ScriptedModel(list(steps))

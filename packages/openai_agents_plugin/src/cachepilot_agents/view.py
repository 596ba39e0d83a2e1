"""One model call's view: plain input items in, the items the model reads out.

Steps, each deterministic, so the same history and state give the same bytes in any process:

1. the thread's recall exchanges are put back after their anchors (`exchanges`);
2. large inline media of tool results become archived notes (only when recall is offered);
3. items become neutral messages (`items.TranscriptBuilder`);
4. every tool result is shown as its reduced view (`CachePilot.reduce_results`), and only
   when the model can call recall: no ref is ever shown to a model that cannot follow it;
5. `CachePilot.prepare`: canonical instructions, the plan's stubs and folds, maintenance;
6. the view is mapped back to items (`Transcript.render`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agents import Agent, FunctionTool
from agents.handoffs import Handoff, handoff
from agents.run_config import ModelInputData

from cachepilot import CachePilot
from cachepilot.messages import Message
from cachepilot_agents._context import PreparedCall
from cachepilot_agents.exchanges import ExchangeBook, anchor_of
from cachepilot_agents.items import Transcript, TranscriptBuilder
from cachepilot_agents.media import MediaNotes

__all__ = ["ToolSchemas", "ViewOwner", "build_view"]

logger = logging.getLogger(__name__)


class ViewOwner(Protocol):
    """What building a view asks of the plugin (`CachePilotAgents` is one)."""

    @property
    def pilot(self) -> CachePilot:
        """The pilot."""
        ...

    @property
    def exchanges(self) -> ExchangeBook:
        """The threads' recall exchanges."""
        ...

    @property
    def media(self) -> MediaNotes:
        """Inline media archived out of tool results."""
        ...

    @property
    def tool_schemas(self) -> ToolSchemas:
        """The tool schemas of agents."""
        ...

    def builder(self, thread: str) -> TranscriptBuilder:
        """The transcript builder of `thread`."""
        ...

    async def save_state(self, thread: str) -> None:
        """Save `thread`'s state to its store."""
        ...


_MEMO_MAX = 64


class ToolSchemas:
    """Chat-style schemas of an agent's function tools and handoffs (memoised per tool set).

    The pilot counts their tokens and notices tool-set changes; the SDK sends its own list.
    """

    def __init__(self) -> None:
        # Weak references only: a memo must never keep an agent (or its tools) alive.
        self._memo: dict[tuple[int, ...], tuple[tuple[Any, ...], list[dict[str, Any]]]] = {}

    def __call__(self, agent: Agent[Any]) -> list[dict[str, Any]]:
        """The schemas of `agent`'s tools and handoffs."""
        sources: tuple[object, ...] = (*agent.tools, *agent.handoffs)
        key = tuple(id(s) for s in sources)
        hit = self._memo.get(key)
        if hit is not None and all(_deref(a) is b for a, b in zip(hit[0], sources, strict=True)):
            return hit[1]
        schemas: list[dict[str, Any]] = []
        for tool in agent.tools:
            if isinstance(tool, FunctionTool):
                schemas.append(_schema(tool.name, tool.description, tool.params_json_schema))
        for target in agent.handoffs:
            try:
                item = target if isinstance(target, Handoff) else handoff(target)
            except Exception:
                continue
            schemas.append(_schema(item.tool_name, item.tool_description, item.input_json_schema))
        self._memo[key] = (tuple(_weak(s) for s in sources), schemas)
        if len(self._memo) > _MEMO_MAX:
            self._memo.pop(next(iter(self._memo)))
        return schemas


_REF_MARK = 'recall(ref="'


def _keep_empty(original: Sequence[Message], reduced: list[Message]) -> list[Message]:
    """`reduced`, except that an empty tool result stays empty (as the SDK sent it)."""
    out = reduced
    for index, (before, after) in enumerate(zip(original, reduced, strict=True)):
        if after is not before and before.role == "tool" and before.content == "":
            if out is reduced:
                out = list(reduced)
            out[index] = before
    return out


def _names_a_ref(original: Sequence[Message], reduced: Sequence[Message]) -> bool:
    """Whether a result the view changed names a ref (only changed results are read)."""
    return any(
        after is not before and _REF_MARK in str(after.content)
        for before, after in zip(original, reduced, strict=True)
    )


def _weak(value: object) -> Any:
    try:
        return weakref.ref(value)
    except TypeError:
        return _Strong(value)


def _deref(ref: Any) -> object:
    return ref()


class _Strong:
    """A stand-in for objects that take no weak reference (held as they are)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __call__(self) -> object:
        return self.value


def _schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


async def build_view(
    owner: ViewOwner,
    model_data: ModelInputData,
    agent: Agent[Any],
    thread: str,
    *,
    recall: bool,
    now: Callable[[], float],
    strip_reasoning_ids: bool,
) -> tuple[ModelInputData, PreparedCall]:
    """The view of one call and what the model wrapper needs to know about it.

    Raises whatever the pilot raises; the caller sends the input unchanged then.
    """
    pilot = owner.pilot
    plain = list(model_data.input)
    items = owner.exchanges.splice(thread, plain)
    refs = len(items) != len(plain)  # earlier recall exchanges are shown again
    if recall:
        with_notes = owner.media.apply(items, thread)
        refs = refs or with_notes is not items
        items = with_notes
    transcript = owner.builder(thread).build(items)
    reduced = _keep_empty(
        transcript.messages,
        await pilot.areduce_results(transcript.messages, thread, recall=recall),
    )
    refs = recall and (refs or _names_a_ref(transcript.messages, reduced))
    tools = owner.tool_schemas(agent)
    # Refs may be named where the model will be offered recall: from the first call of a model
    # with function tools (a maintenance point of this very call included), else once named.
    named = refs or bool(pilot.state(thread).plan.epochs)
    function_tools = any(isinstance(t, FunctionTool) for t in agent.tools)
    system, view, _ = await pilot.aprepare(
        model_data.instructions,
        reduced,
        tools,
        thread,
        now=now(),
        recall=recall and (function_tools or named),
    )
    plan = pilot.state(thread).plan
    out = transcript.render(view, plan)
    await owner.save_state(thread)

    async def rebuild() -> tuple[str | None, list[Any]] | None:
        return await _after_emergency_fold(
            owner, model_data.instructions, reduced, tools, thread, transcript, recall, now
        )

    call = PreparedCall(
        owner=id(owner),
        thread=thread,
        recall=recall,
        refs=recall and (refs or bool(plan.epochs)),
        instructions=system,
        last_item=out[-1] if out else None,
        anchor=anchor_of(plain),
        agent=str(agent.name),
        rebuild=rebuild,
        strip_reasoning_ids=strip_reasoning_ids,
    )
    return ModelInputData(input=out, instructions=system), call


async def _after_emergency_fold(  # noqa: PLR0917 - one private call site
    owner: ViewOwner,
    instructions: str | None,
    reduced: Sequence[Message],
    tools: list[dict[str, Any]],
    thread: str,
    transcript: Transcript,
    recall: bool,
    now: Callable[[], float],
) -> tuple[str | None, list[Any]] | None:
    """Fold hard, persist, and render the call again (None when nothing could be folded)."""
    pilot = owner.pilot
    folded = await asyncio.to_thread(
        functools.partial(pilot.emergency_fold, recall=recall), instructions, reduced, thread, tools
    )
    if not folded:
        return None
    await owner.save_state(thread)
    system, view, _ = await pilot.aprepare(
        instructions, reduced, tools, thread, now=now(), maintain=False, recall=recall
    )
    await owner.save_state(thread)
    return system, transcript.render(view, pilot.state(thread).plan)

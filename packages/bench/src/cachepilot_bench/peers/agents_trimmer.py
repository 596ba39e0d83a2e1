"""`agents-trimmer`: the OpenAI Agents SDK's real `ToolOutputTrimmer`, as a model-input filter.

Driven as `Runner` drives a `RunConfig(call_model_input_filter=ToolOutputTrimmer())`: before
each model call the whole input list (Responses-API items converted from the transcript)
goes in a `CallModelData(model_data=ModelInputData(input, instructions), agent, context)`;
the filter's returned `ModelInputData` is what the model gets. The filter builds a new list
each call and the session keeps the full items, so nothing persists: the trim is recomputed
on every call.

Defaults are the SDK's: `recent_turns=2` (the items from the 2nd-to-last user message on are
never touched), `max_output_chars=500`, `preview_chars=200`, every tool trimmable. Older
outputs above 500 characters become `"[Trimmed: <tool> output — N chars → 200 char
preview]\\n<first 200 chars>..."`. With fewer than 2 user messages (most agent traces) the
SDK finds no old items and trims nothing.

Imports the Agents SDK at import time (the registry imports this module lazily).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, cast

from agents import Agent
from agents.extensions.tool_output_trimmer import ToolOutputTrimmer
from agents.run_config import CallModelData, ModelInputData

from cachepilot.messages import Message
from cachepilot_bench.peers._common import PairingWatch, is_prefix
from cachepilot_bench.peers.agents_convert import from_items, message_to_items, to_items
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext, StatefulStrategy

__all__ = ["AgentsTrimmer"]

logger = logging.getLogger(__name__)


class AgentsTrimmer(StatefulStrategy):
    """`agents.extensions.tool_output_trimmer.ToolOutputTrimmer()` at its defaults, per call."""

    name = "agents-trimmer"
    can_recall = False

    def __init__(self) -> None:
        super().__init__()
        self._trimmer: ToolOutputTrimmer | None = None
        self._agent: Agent[Any] | None = None
        self._items: list[list[dict[str, Any]]] = []
        self._previous: Sequence[Message] = ()
        self._pairing = PairingWatch(logger, self.name)

    def start(self, session: SessionContext) -> None:
        super().start(session)
        self._trimmer = ToolOutputTrimmer()
        self._agent = Agent(name="cachepilot-bench-replay")
        self._items = []
        self._previous = ()
        self._pairing = PairingWatch(logger, self.name)

    def filtered(self, system: str | None) -> tuple[list[Message], str | None]:
        """Run the filter over the current state: (messages, instructions) the model gets."""
        if self._trimmer is None or self._agent is None:
            raise RuntimeError(f"strategy {self.name!r} used before start()")
        for message in self.state[len(self._items) :]:
            self._items.append(message_to_items(message))
        items, spans = to_items(self.state, self._items)
        data: CallModelData[Any] = CallModelData(
            model_data=ModelInputData(input=cast("list[Any]", items), instructions=system),
            agent=self._agent,
            context=None,
        )
        result = self._trimmer(data)
        new_items = cast("list[dict[str, Any]]", result.input)
        return from_items(new_items, spans), result.instructions

    def view(self, call: CallContext) -> PreparedCall:
        messages, instructions = self.filtered(self.system_for(call))
        self._pairing.check(messages, call.call_number)
        maintenance = bool(self._previous) and not is_prefix(self._previous, messages)
        self._previous = messages
        return PreparedCall(
            system=instructions,
            messages=messages,
            tools=self.ctx.tools,
            maintenance=maintenance,
        )

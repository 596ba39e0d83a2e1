"""`lc-clear-tool-uses`: LangChain's real `ContextEditingMiddleware` + `ClearToolUsesEdit`.

Driven as `create_agent` drives it: each call builds a `ModelRequest` holding the agent
state's messages (system prompt apart) and calls the middleware's `wrap_model_call` with a
handler that stands for the model; the handler captures the request it receives, which is
what the model would be sent. The middleware edits a deep copy, so nothing persists: the
agent state keeps the full tool outputs and the edit is recomputed on every call (the cache
behaviour reported in langchain#37815). Token counting is the middleware's own default
(`count_tokens_approximately` on the messages).

- `lc-clear-tool-uses` (`LcClearToolUses`): `ClearToolUsesEdit()` at its defaults
  (trigger 100,000 tokens, keep 3, clear_at_least 0, placeholder `"[cleared]"`).
- `lc-clear-tool-uses-scaled` (`LcClearToolUsesScaled`): the same edit with `trigger` scaled
  to the trace so it fires: 50% of `SessionContext.trace_peak_tokens`, at least 2,000.

Imports LangChain at import time: the registry imports this module only when the strategy
is asked for (a missing `cachepilot[bench]` extra is then a clear error).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage
from langgraph.runtime import Runtime
from langsmith.run_helpers import tracing_context

from cachepilot.messages import Message
from cachepilot_bench.peers._common import PairingWatch, is_prefix
from cachepilot_bench.peers.lc_convert import LcConverter, from_lc_reusing
from cachepilot_bench.peers.lc_standin import StandInSummaryModel
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext, StatefulStrategy

__all__ = ["LcClearToolUses", "LcClearToolUsesScaled"]

logger = logging.getLogger(__name__)


class LcClearToolUses(StatefulStrategy):
    """LangChain `ContextEditingMiddleware(edits=[ClearToolUsesEdit()])`, run per call."""

    name = "lc-clear-tool-uses"
    can_recall = False

    def __init__(self) -> None:
        super().__init__()
        self._lc: list[AnyMessage] = []
        self._known: dict[str, tuple[BaseMessage, Message]] = {}
        self._converter: LcConverter | None = None
        self._middleware: ContextEditingMiddleware[Any, Any] | None = None
        self._model: StandInSummaryModel | None = None
        self._previous: Sequence[Message] = ()
        self._pairing = PairingWatch(logger, self.name)

    def make_edit(self, session: SessionContext) -> ClearToolUsesEdit:
        """The edit this peer runs (LangChain's defaults here)."""
        return ClearToolUsesEdit()

    def start(self, session: SessionContext) -> None:
        super().start(session)
        self._lc = []
        self._known = {}
        self._converter = LcConverter()
        self._middleware = ContextEditingMiddleware(edits=[self.make_edit(session)])
        self._model = StandInSummaryModel()
        self._previous = ()
        self._pairing = PairingWatch(logger, self.name)

    def _sync(self) -> None:
        if self._converter is None:
            raise RuntimeError(f"strategy {self.name!r} used before start()")
        for message in self.state[len(self._lc) :]:
            converted = self._converter.convert(message)
            self._lc.append(converted)
            if converted.id is not None:
                self._known[converted.id] = (converted, message)

    def edited_messages(self, system: str | None) -> list[BaseMessage]:
        """Run the middleware over the current state; the messages the model would get."""
        if self._middleware is None or self._model is None:
            raise RuntimeError(f"strategy {self.name!r} used before start()")
        self._sync()
        ctx = self.ctx
        captured: list[list[BaseMessage]] = []

        def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
            captured.append(list(request.messages))
            return ModelResponse(result=[AIMessage(content="")])

        request: ModelRequest[Any] = ModelRequest(
            model=self._model,
            messages=list(self._lc),
            system_message=SystemMessage(content=system) if system else None,
            tools=[dict(t) for t in ctx.tools],
            state={"messages": list(self._lc)},
            runtime=Runtime(),
        )
        with tracing_context(enabled=False):
            self._middleware.wrap_model_call(request, handler)
        if not captured:
            raise RuntimeError("ContextEditingMiddleware did not call the model handler")
        return captured[-1]

    def view(self, call: CallContext) -> PreparedCall:
        system = self.system_for(call)
        messages = from_lc_reusing(self.edited_messages(system), self._known)
        self._pairing.check(messages, call.call_number)
        maintenance = bool(self._previous) and not is_prefix(self._previous, messages)
        self._previous = messages
        return PreparedCall(
            system=system,
            messages=messages,
            tools=self.ctx.tools,
            maintenance=maintenance,
        )


class LcClearToolUsesScaled(LcClearToolUses):
    """`ClearToolUsesEdit` with its trigger scaled to the trace (so it fires on short traces).

    Args:
        trigger_fraction: fraction of `SessionContext.trace_peak_tokens` (default 0.5).
        min_trigger: lower bound of the trigger in tokens (default 2,000).
    """

    name = "lc-clear-tool-uses-scaled"

    def __init__(self, *, trigger_fraction: float = 0.5, min_trigger: int = 2_000) -> None:
        super().__init__()
        if not 0 < trigger_fraction <= 1:
            raise ValueError(f"trigger_fraction must be in (0, 1], got {trigger_fraction}")
        if min_trigger < 1:
            raise ValueError(f"min_trigger must be >= 1, got {min_trigger}")
        self.trigger_fraction = trigger_fraction
        self.min_trigger = min_trigger

    def trigger_for(self, session: SessionContext) -> int:
        """The trigger (tokens) used for a session."""
        return max(self.min_trigger, int(self.trigger_fraction * session.trace_peak_tokens))

    def make_edit(self, session: SessionContext) -> ClearToolUsesEdit:
        return ClearToolUsesEdit(trigger=self.trigger_for(session), clear_at_least=0, keep=3)

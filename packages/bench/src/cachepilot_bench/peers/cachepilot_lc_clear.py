"""`cachepilot+lc-clear-tool-uses`: cachepilot and LangChain's `ClearToolUsesEdit` together.

The combination a LangChain user gets from `create_agent(..., middleware=[
CachePilotMiddleware(pilot), ContextEditingMiddleware()])`: on every call cachepilot builds
its view (ingestion-time reductions, the plan's stubs and folds, canonical prefix), then
LangChain's real `ContextEditingMiddleware` with `ClearToolUsesEdit()` at its defaults
(trigger 100,000 tokens counted approximately on that view, keep 3, placeholder
`"[cleared]"`) edits a copy of it, as the inner middleware does. cachepilot's stubs carry
LangChain's `context_editing` mark (as `CachePilotMiddleware` hands them on), so the edit
clears only results cachepilot left in full or reduced at ingestion; a cleared result stays
recallable when cachepilot archived its original.

Imports LangChain at import time (the registry imports this module only when asked).
"""

from __future__ import annotations

import logging
from typing import Any

from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langgraph.runtime import Runtime
from langsmith.run_helpers import tracing_context

from cachepilot.maintenance.policy import is_stub
from cachepilot.messages import Message
from cachepilot.pilot.facade import Config
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.peers._common import PairingWatch, is_prefix
from cachepilot_bench.peers.lc_convert import LcConverter, from_lc_reusing
from cachepilot_bench.peers.lc_standin import StandInSummaryModel
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext

__all__ = ["CachePilotLcClearToolUses"]

logger = logging.getLogger(__name__)

_MARK = {"context_editing": {"cleared": True, "strategy": "cachepilot"}}


class CachePilotLcClearToolUses(CachePilotStrategy):
    """cachepilot's view, then `ContextEditingMiddleware(edits=[ClearToolUsesEdit()])`."""

    name = "cachepilot+lc-clear-tool-uses"

    def __init__(self, config: Config | None = None) -> None:
        super().__init__(config)
        self._middleware: ContextEditingMiddleware[Any, Any] = ContextEditingMiddleware(
            edits=[ClearToolUsesEdit()]
        )
        self._model = StandInSummaryModel()
        self._previous: tuple[Message, ...] = ()
        self._pairing = PairingWatch(logger, self.name)

    def start(self, session: SessionContext) -> None:
        super().start(session)
        self._middleware = ContextEditingMiddleware(edits=[ClearToolUsesEdit()])
        self._previous = ()
        self._pairing = PairingWatch(logger, self.name)

    def view(self, call: CallContext, archived: list[str] | None = None) -> PreparedCall:
        prepared = super().view(call, archived)
        messages = tuple(self._cleared(prepared.system, prepared.messages, prepared.tools))
        self._pairing.check(messages, call.call_number)
        rewritten = bool(self._previous) and not is_prefix(self._previous, messages)
        self._previous = messages
        if rewritten and not prepared.maintenance:
            self._count("native_clear_breaks", 1)
        return PreparedCall(
            system=prepared.system,
            messages=messages,
            tools=prepared.tools,
            extra_calls=prepared.extra_calls,
            archived=prepared.archived,
            maintenance=prepared.maintenance or rewritten,
            cache_breakpoints=prepared.cache_breakpoints,
        )

    def _cleared(self, system: str | None, view: Any, tools: Any) -> list[Message]:
        """The view after LangChain's edit (what the inner middleware hands the model)."""
        converter = LcConverter()  # fresh: ids depend only on this view
        lc: list[Any] = []
        known: dict[str, tuple[BaseMessage, Message]] = {}
        for message in view:
            converted = converter.convert(message)
            if isinstance(converted, ToolMessage) and is_stub(message.text):
                converted = converted.model_copy(update={"response_metadata": dict(_MARK)})
            lc.append(converted)
            if converted.id is not None:
                known[converted.id] = (converted, message)
        captured: list[list[BaseMessage]] = []

        def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
            captured.append(list(request.messages))
            return ModelResponse(result=[AIMessage(content="")])

        request: ModelRequest[Any] = ModelRequest(
            model=self._model,
            messages=lc,
            system_message=SystemMessage(content=system) if system else None,
            tools=[dict(t) for t in tools],
            state={"messages": lc},
            runtime=Runtime(),
        )
        with tracing_context(enabled=False):
            self._middleware.wrap_model_call(request, handler)
        if not captured:
            raise RuntimeError("ContextEditingMiddleware did not call the model handler")
        return from_lc_reusing(captured[-1], known)

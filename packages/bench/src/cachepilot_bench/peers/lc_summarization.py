"""`lc-summarization`: LangChain's real `SummarizationMiddleware` with a stand-in summarizer.

Driven as `create_agent` drives it: before every model call the middleware's `before_model`
hook gets the agent state (`{"messages": [...]}`, system prompt apart). When it summarizes it
returns `[RemoveMessage(REMOVE_ALL_MESSAGES), summary HumanMessage, *kept]`; that update is
applied to this strategy's own state with LangGraph's real `add_messages` reducer, so it
persists and later calls see the summarized history, as in a LangGraph thread. The only
change to the update: a summary message without an id gets `lc-summary-<n>` instead of the
random uuid `add_messages` would assign (determinism).

The summarizer is `StandInSummaryModel`, a deterministic `BaseChatModel` that never touches
the network (LangSmith tracing is disabled around the call) and answers with about
`summary_tokens` tokens. Every prompt the middleware sends it is billed as an `ExtraCall`
(system None, the prompt as one user message, output = the answer's tokens).

Configuration (installed `SummarizationMiddleware(model, *, trigger=None, keep=("messages",
20), token_counter=count_tokens_approximately, summary_prompt=DEFAULT_SUMMARY_PROMPT,
trim_tokens_to_summarize=4000)`): LangChain's `trigger` default is `None` (never fires), so
it is scaled to the trace: `("tokens", max(2000, 50% of trace_peak_tokens))`; everything
else stays at LangChain's defaults (keep the last 20 messages, its own approximate token
counter, its prompt, trim the summarized part to its last 4,000 tokens).

Known upstream behaviour kept as is: the trim uses `trim_messages(start_on="human")`, so
when no user message falls in the last 4,000 tokens of the summarized part (typical of agent
traces with one user message) the model is never called and the history is replaced by
"Previous conversation was too long to summarize." (langchain-ai/langchain#39261). Pass
`trim_tokens_to_summarize=None` to give the summarizer the whole summarized part instead.

Imports LangChain and LangGraph at import time (the registry imports this module lazily).
"""

from __future__ import annotations

import logging
from typing import Any, Literal, cast

from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from langsmith.run_helpers import tracing_context

from cachepilot.messages import Message
from cachepilot_bench.peers._common import PairingWatch
from cachepilot_bench.peers.lc_convert import LcConverter, from_lc, from_lc_reusing
from cachepilot_bench.peers.lc_standin import StandInSummaryModel
from cachepilot_bench.strategy import (
    CallContext,
    ExtraCall,
    PreparedCall,
    SessionContext,
    StatefulStrategy,
)

__all__ = ["LcSummarization"]

logger = logging.getLogger(__name__)

_DEFAULT_KEEP: tuple[Literal["messages"], int] = ("messages", 20)


class LcSummarization(StatefulStrategy):
    """LangChain `SummarizationMiddleware` as `before_model`, its update persisted.

    Args:
        summary_tokens: size of each stand-in summary (≈ tokens).
        trigger_fraction: trigger as a fraction of `SessionContext.trace_peak_tokens`.
        min_trigger: lower bound of the trigger (tokens).
        keep_messages: messages kept after a summary (LangChain default 20).
        trim_tokens_to_summarize: LangChain's trim of the summarized part (default 4000;
            None disables it).
    """

    name = "lc-summarization"
    can_recall = False

    def __init__(
        self,
        *,
        summary_tokens: int = 500,
        trigger_fraction: float = 0.5,
        min_trigger: int = 2_000,
        keep_messages: int = _DEFAULT_KEEP[1],
        trim_tokens_to_summarize: int | None = 4_000,
    ) -> None:
        super().__init__()
        if summary_tokens < 1:
            raise ValueError(f"summary_tokens must be >= 1, got {summary_tokens}")
        if not 0 < trigger_fraction <= 1:
            raise ValueError(f"trigger_fraction must be in (0, 1], got {trigger_fraction}")
        if min_trigger < 1 or keep_messages < 1:
            raise ValueError("min_trigger and keep_messages must be >= 1")
        self.summary_tokens = summary_tokens
        self.trigger_fraction = trigger_fraction
        self.min_trigger = min_trigger
        self.keep_messages = keep_messages
        self.trim_tokens_to_summarize = trim_tokens_to_summarize
        self.summaries = 0
        """Summaries applied in this session."""
        self._lc: list[AnyMessage] = []
        self._by_id: dict[str, tuple[BaseMessage, Message]] = {}
        self._converter: LcConverter | None = None
        self._middleware: SummarizationMiddleware[Any, Any] | None = None
        self._model: StandInSummaryModel | None = None
        self._extra: list[ExtraCall] = []
        self._maintenance = False
        self._pairing = PairingWatch(logger, self.name)

    def trigger_for(self, session: SessionContext) -> int:
        """The token trigger used for a session."""
        return max(self.min_trigger, int(self.trigger_fraction * session.trace_peak_tokens))

    def start(self, session: SessionContext) -> None:
        super().start(session)
        self.summaries = 0
        self._lc = []
        self._by_id = {}
        self._converter = LcConverter()
        self._model = StandInSummaryModel(
            summary_words=self.summary_tokens, token_counter=session.counter.count
        )
        self._middleware = SummarizationMiddleware(
            self._model,
            trigger=("tokens", self.trigger_for(session)),
            keep=("messages", self.keep_messages),
            trim_tokens_to_summarize=self.trim_tokens_to_summarize,
        )
        self._extra = []
        self._maintenance = False
        self._pairing = PairingWatch(logger, self.name)

    def _append(self, message: Message) -> None:
        if self._converter is None:
            raise RuntimeError(f"strategy {self.name!r} used before start()")
        converted = self._converter.convert(message)
        self.state.append(message)
        self._lc.append(converted)
        if converted.id is not None:
            self._by_id[converted.id] = (converted, message)

    def _apply(self, update: list[BaseMessage]) -> None:
        for message in update:
            if message.id is None:
                message.id = f"lc-summary-{self.summaries + 1}"
        self.summaries += 1
        merged = cast("list[AnyMessage]", add_messages(cast("Any", self._lc), cast("Any", update)))
        self._lc = merged
        self.state = from_lc_reusing(merged, self._by_id)
        self._by_id = {
            m.id: (m, n) for m, n in zip(merged, self.state, strict=True) if m.id is not None
        }

    def prepare(self, call: CallContext) -> PreparedCall:
        if self._middleware is None or self._model is None:
            raise RuntimeError(f"strategy {self.name!r} used before start()")
        for message in call.new_messages:
            self._append(message)
        seen = len(self._model.records)
        with tracing_context(enabled=False):
            update = self._middleware.before_model({"messages": self._lc}, Runtime())
        self._maintenance = False
        if update and update.get("messages"):
            self._apply(list(update["messages"]))
            self._maintenance = True
        counter = self.ctx.counter
        self._extra = [
            ExtraCall(
                system=None,
                messages=from_lc(prompt),
                output_tokens=counter.count(answer),
                purpose="summarize",
            )
            for prompt, answer in self._model.records[seen:]
        ]
        return self.view(call)

    def view(self, call: CallContext) -> PreparedCall:
        messages = list(self.state)
        self._pairing.check(messages, call.call_number)
        return PreparedCall(
            system=self.system_for(call),
            messages=messages,
            tools=self.ctx.tools,
            extra_calls=tuple(self._extra),
            maintenance=self._maintenance,
        )

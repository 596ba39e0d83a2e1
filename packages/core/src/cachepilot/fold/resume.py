"""The zero-LLM summary: the `SessionMemory` resume block of the folded messages (the
default summarizer, and the fallback whenever another one fails)."""

from __future__ import annotations

from cachepilot.fold.ahead import SUMMARY_STAGES
from cachepilot.fold.facts_in_use import facts_in_use, values_in_view
from cachepilot.fold.request import FoldMode, FoldRequest
from cachepilot.memory import SessionMemory
from cachepilot.memory.prefix_memo import SESSION_MEMORIES
from cachepilot.support.foreground import yield_to_foreground
from cachepilot.tokens import TokenCounter, get_counter

__all__ = ["DEFAULT_FACTS_SHARE", "ResumeBlockSummarizer"]

DEFAULT_FACTS_SHARE = 0.5
"""Share of the budget kept for the facts-in-use section by default."""

MAX_REBUILD_MESSAGES = 600
"""A range of more source messages is summarized differentially (the previous summary's
lines and the new messages): rebuilding the memory of all of them at every fold would cost
time in proportion to the whole session."""

_BLOCK_FLOOR = 300
"""Below this budget the session-memory block gets the whole of it."""


class ResumeBlockSummarizer:
    """Zero-LLM summarizer: the `SessionMemory` resume block of the folded messages.

    Differential: when the request carries the source messages of the whole range (earlier
    folds included, up to `MAX_REBUILD_MESSAGES` of them), the block is rebuilt from all of
    them, so facts of every part compete for the budget on equal terms. Otherwise the
    previous summary's lines are kept (as many as fit, from the top) under "Earlier:",
    followed by the resume block of the new messages.
    A "facts in use" section follows (`fold.facts_in_use`): the exact values of the folded
    tool outputs, the ones the agent acted on first, grouped by the file or command they came
    from; it takes what the block leaves of the budget (the block gets at least
    `1 - facts_share` of it, and all of a budget under 300 tokens). The result always fits
    the budget under the counter.

    Args:
        budget_tokens: the summary's size; None takes the request's `budget_tokens`.
        counter: token counter (default: the shared `tokens.get_counter()`).
        facts_share: share of the budget kept for the facts-in-use section (0 → none).
    """

    mode: FoldMode = "standalone"

    def __init__(
        self,
        budget_tokens: int | None = None,
        counter: TokenCounter | None = None,
        *,
        facts_share: float = DEFAULT_FACTS_SHARE,
    ) -> None:
        if budget_tokens is not None and budget_tokens < 1:
            raise ValueError(f"budget_tokens must be >= 1, got {budget_tokens}")
        if not 0.0 <= facts_share <= 0.9:
            raise ValueError(f"facts_share must be within [0, 0.9], got {facts_share}")
        self.budget_tokens = budget_tokens
        self.counter = counter
        self.facts_share = facts_share

    def summarize(self, request: FoldRequest) -> str:
        """The resume block (plus the previous summary's lines) and the facts in use, within
        the budget."""
        counter = self.counter or get_counter()
        budget = max(1, self.budget_tokens or request.budget_tokens)
        # A small budget goes to the block first: the facts only take what it leaves.
        block_budget = max(budget - int(budget * self.facts_share), min(budget, _BLOCK_FLOOR))
        # The block reads the folded range only: it may have been computed ahead (`fold.ahead`).
        block: str = SUMMARY_STAGES.get(
            ("block", type(self), request.previous_summary, block_budget, counter),
            (request.source_messages, request.folded_messages),
            lambda: self._block(request, block_budget, counter),
        )
        if not self.facts_share:
            return block
        yield_to_foreground()  # a precomputation's pause (a no-op on a request's thread)
        kept = request.view_messages[len(request.view_messages) - request.kept_messages :]
        # What the model still sees: the block and the kept tail (found message by message).
        shown = values_in_view([block], kept if request.kept_messages else [])
        room = budget - counter.count(block) - 2
        facts = facts_in_use(
            request.source_messages or request.folded_messages,
            room,
            counter,
            shown=shown,
        )
        lines = facts.splitlines()
        while True:
            facts = "\n".join(lines) if len(lines) > 1 else ""
            text = f"{block}\n\n{facts}" if facts and block else (facts or block)
            if not facts or counter.count(text) <= budget:
                return text
            lines.pop()

    def _block(self, request: FoldRequest, budget: int, counter: TokenCounter) -> str:
        if request.source_messages and (
            len(request.source_messages) <= MAX_REBUILD_MESSAGES or not request.previous_summary
        ):
            # The last fold's range and more: its memory is extended, not rebuilt.
            return SESSION_MEMORIES.of(request.source_messages).resume_block(budget, counter)
        memory = SessionMemory.from_messages(request.folded_messages)
        previous = (request.previous_summary or "").strip()
        if not previous:
            return memory.resume_block(budget, counter)
        lines = previous.splitlines()
        earlier_tokens = counter.count("\n".join(["Earlier:", *lines]))
        block = memory.resume_block(max(budget // 2, budget - earlier_tokens - 4), counter)
        while True:
            pieces = ["\n".join(["Earlier:", *lines])] if lines else []
            if block:
                pieces.append(block)
            text = "\n\n".join(pieces)
            if not lines or counter.count(text) <= budget:
                return text
            lines.pop()

    async def asummarize(self, request: FoldRequest) -> str:
        """Async `summarize` (the work is CPU-bound and short)."""
        return self.summarize(request)

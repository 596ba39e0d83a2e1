"""A deterministic stand-in chat model for summarizing peers (never touches the network).

It answers every request with a fixed-size text (about `summary_words` tokens of common
English words) chosen by a hash of the request, so equal inputs give byte-identical
summaries and different inputs different ones. Every request it receives is recorded, so a
strategy can bill the summarizer's real prompt. It is a benchmark stand-in, not a model.

Imports `langchain_core` at import time: import this module lazily.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

__all__ = ["StandInSummaryModel", "stand_in_text"]

_WORDS: tuple[str, ...] = (
    "the",
    "task",
    "state",
    "file",
    "test",
    "code",
    "change",
    "error",
    "result",
    "step",
    "plan",
    "next",
    "done",
    "open",
    "user",
    "goal",
    "path",
    "value",
    "check",
    "run",
    "build",
    "fix",
    "update",
    "review",
    "note",
    "keep",
    "remove",
    "add",
    "module",
    "function",
    "class",
    "method",
    "config",
    "output",
    "input",
    "data",
    "list",
    "item",
    "record",
    "call",
    "tool",
    "agent",
    "model",
    "request",
    "response",
    "cache",
    "prefix",
    "token",
    "cost",
    "time",
    "limit",
    "size",
    "order",
    "branch",
    "commit",
    "issue",
    "report",
    "log",
    "line",
    "field",
    "name",
    "type",
    "case",
    "rule",
)


def stand_in_text(seed: str, words: int) -> str:
    """Deterministic pseudo-summary of `words` words (about one token each)."""
    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).digest()
    out: list[str] = []
    while len(out) < words:
        for byte in digest:
            out.append(_WORDS[byte % len(_WORDS)])
            if len(out) >= words:
                break
        digest = hashlib.sha256(digest).digest()
    sentences = [" ".join(out[i : i + 12]) for i in range(0, len(out), 12)]
    ref = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"Summary {ref}: " + ". ".join(s.capitalize() for s in sentences) + "."


class StandInSummaryModel(BaseChatModel):
    """Deterministic summarizer stand-in; records the prompts it is sent."""

    summary_words: int = 500
    """Target size of each answer: words, or tokens when `token_counter` is set."""

    token_counter: Callable[[str], int] | None = None
    """Counts tokens of a text; when set, answers are sized to `summary_words` tokens."""

    _records: list[tuple[list[BaseMessage], str]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "cachepilot-stand-in"

    @property
    def records(self) -> list[tuple[list[BaseMessage], str]]:
        """Every (request, answer text) so far, oldest first."""
        return self._records

    def _sized_text(self, seed: str) -> str:
        target = self.summary_words
        words = target
        text = stand_in_text(seed, words)
        if self.token_counter is None:
            return text
        for _ in range(4):  # deterministic calibration to the counter's tokens
            tokens = self.token_counter(text)
            if tokens <= 0 or abs(tokens - target) <= max(2, target // 50):
                break
            words = max(1, round(words * target / tokens))
            text = stand_in_text(seed, words)
        return text

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        seed = "\n".join(f"{m.type}:{m.text}" for m in messages)
        text = self._sized_text(seed)
        self._records.append((list(messages), text))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

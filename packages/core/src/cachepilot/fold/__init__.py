"""The fold: last-resort summarization of everything before the protected tail.

A fold replaces one range of the view with a single summary message (a `fold` edit of the
plan, see `cachepilot.plan.epochs`). The range starts right after the task statement (the first user
message, which stays visible verbatim) and ends before the protected tail, at a boundary that
never separates an assistant's tool calls from their results. The folded messages are archived
first, as JSON, and the summary's header names the ref, so nothing is lost::

    [earlier conversation folded: 48 messages, 31,200 tokens; full text: recall(ref="9f2c41d07a1b")]

Folds are differential: a later fold's range starts at the earlier summary, and the summarizer
gets that summary plus only the messages that came after it. Summarizers: any LangChain chat
model or OpenAI client (`ChatModelSummarizer`, in "suffix" mode when it is the agent's own
model, so the summary call reuses the cached prefix), or the zero-LLM `ResumeBlockSummarizer`
(the fallback whenever a summarizer fails). Frameworks are duck-typed, never imported.
Modules: `cachepilot.fold.cut` (where a range starts and ends), `.request` (the summary
request, header and guideline), `.summary` (summarizers from chat models), `.resume` (the
zero-LLM resume block), `.plan` (planning a fold, the emergency fold), `.errors`
(context-length errors).

Part `fold` of the core (docs/architecture.md). May import: `artifacts`, `memory`, `messages`,
`plan`, `reduce`, `support`, `tokens`; tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.fold.cut import cut_before, fold_start, safe_cut
from cachepilot.fold.errors import is_context_length_error
from cachepilot.fold.plan import (
    EMERGENCY_PROTECT_TAIL_TOKENS,
    aemergency_fold,
    aplan_fold,
    emergency_fold,
    plan_fold,
)
from cachepilot.fold.request import (
    DEFAULT_GUIDELINE,
    FOLD_HEADER_PREFIX,
    MIN_FOLD_MESSAGES,
    FoldMode,
    FoldRequest,
    build_summary_prompt,
    chat_messages,
    fold_header,
)
from cachepilot.fold.resume import ResumeBlockSummarizer
from cachepilot.fold.summary import ChatModelSummarizer, Summarizer, content_text

__all__ = [
    "DEFAULT_GUIDELINE",
    "EMERGENCY_PROTECT_TAIL_TOKENS",
    "FOLD_HEADER_PREFIX",
    "MIN_FOLD_MESSAGES",
    "ChatModelSummarizer",
    "FoldMode",
    "FoldRequest",
    "ResumeBlockSummarizer",
    "Summarizer",
    "aemergency_fold",
    "aplan_fold",
    "build_summary_prompt",
    "chat_messages",
    "content_text",
    "cut_before",
    "emergency_fold",
    "fold_header",
    "fold_start",
    "is_context_length_error",
    "plan_fold",
    "safe_cut",
]

"""The fold: last-resort summarization of everything before the protected tail.

A fold replaces one range of the view with a single summary message (a `fold` edit of the
plan, see `cachepilot.plan`). The range starts right after the task statement (the first user
message, which stays visible verbatim) and ends before the protected tail, at a boundary that
never separates an assistant's tool calls from their results. The folded messages are archived
first, as JSON, and the summary's header names the ref, so nothing is lost::

    [earlier conversation folded: 48 messages, 31,200 tokens; full text: recall(ref="9f2c41d07a1b")]

Folds are differential: a later fold's range starts at the earlier summary, and the summarizer
gets that summary plus only the messages that came after it. Summarizers: any LangChain chat
model or OpenAI client (`ChatModelSummarizer`, in "suffix" mode when it is the agent's own
model, so the summary call reuses the cached prefix), or the zero-LLM `ResumeBlockSummarizer`
(the fallback whenever a summarizer fails). Frameworks are duck-typed, never imported.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from cachepilot.artifacts import ArtifactStore
from cachepilot.memory import SessionMemory
from cachepilot.messages import ImagePart, Message, TextPart, message_keys
from cachepilot.plan import FOLD_ID_PREFIX, Edit, Plan, PlanView, render_plan
from cachepilot.redact import redact
from cachepilot.tokens import TokenCounter, get_counter

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

logger = logging.getLogger(__name__)

FoldMode: TypeAlias = Literal["suffix", "standalone"]

FOLD_HEADER_PREFIX = "[earlier conversation folded:"
"""Every fold summary starts with this (see `fold_header`)."""

MIN_FOLD_MESSAGES = 4
"""A fold of fewer messages than this is not worth its summary."""

EMERGENCY_PROTECT_TAIL_TOKENS = 2_000
"""Protected tail of an emergency fold (after a provider context-length error)."""

DEFAULT_GUIDELINE = """\
Write a structured summary with these sections, in this order (leave out a section that \
would be empty):

## Goal
The user's task and its success criteria, in the user's own words where possible.
## Reasoning so far
The current understanding of the problem: what was tried and learned, the hypothesis being \
worked on, choices made with the reason for each, approaches rejected and why.
## Variables
Exact values the work depends on: file paths, identifiers, names, numbers, URLs, commands \
with their flags, versions, configuration. Copy them verbatim; never paraphrase a value.
## Completed
What has been done, with its outcome (tests passing, files changed, results found).
## To-do
What remains, as a short ordered list, the very next step first.
## Guardrails
Errors met and how they were resolved (or that they are still open); constraints and \
instructions from the user or the environment that must keep being followed.

Be concise: no narration of the conversation, no pleasantries. Do not invent anything that is \
not in the conversation. Merge an earlier summary instead of dropping it: keep its facts \
unless later messages made them obsolete."""
"""The history guideline (Acon-style): what a summary must keep for the agent to go on."""

_STANDALONE_SYSTEM = (
    "You summarize the history of an AI agent's working session. The agent will continue "
    "the task from your summary alone, so keep everything it needs."
)
_MAX_MESSAGE_CHARS = 4_000
_MAX_PROMPT_CHARS = 200_000
_FALLBACK_BUDGET = 600


def fold_header(messages: int, tokens: int, ref: str) -> str:
    """The first line of a fold summary: what was folded and how to get it back."""
    return (
        f"{FOLD_HEADER_PREFIX} {messages:,} messages, {tokens:,} tokens; "
        f'full text: recall(ref="{ref}")]'
    )


def _summary_body(text: str) -> str:
    """A fold summary without its header line."""
    if text.startswith(FOLD_HEADER_PREFIX):
        _, _, rest = text.partition("\n")
        return rest.strip()
    return text.strip()


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class FoldRequest:
    """What a summarizer is asked to summarize.

    Attributes:
        folded_messages: the messages to summarize: only those new since `previous_summary`.
        previous_summary: the body of the earlier fold summary the range starts with (a
            differential fold), or None.
        view_messages: the whole current view (suffix mode sends it as the prompt's prefix).
        kept_messages: how many messages at the end of `view_messages` stay verbatim.
        system: the agent's system prompt (suffix mode sends it first, like the agent does).
        guideline: what the summary must contain.
        mode: `suffix` (the view plus one instruction message: hits the agent's cached
            prefix) or `standalone` (the instruction as system, the range rendered as text).
        budget_tokens: the summary's target size.
        source_messages: every transcript message the new summary stands for, the ranges
            of earlier folds included (as ingested; a zero-LLM summarizer rebuilds its
            memory from them instead of nesting the previous summary).
    """

    folded_messages: tuple[Message, ...]
    previous_summary: str | None = None
    view_messages: tuple[Message, ...] = ()
    kept_messages: int = 0
    system: str | None = None
    guideline: str = DEFAULT_GUIDELINE
    mode: FoldMode = "standalone"
    budget_tokens: int = 800
    source_messages: tuple[Message, ...] = ()


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n… [{len(text) - head - tail:,} chars omitted] …\n{text[-tail:]}"


def _render_message(message: Message, limit: int) -> str:
    label: str = message.role
    if message.role == "tool":
        label = f"tool result {message.name or ''}".rstrip()
    lines = [f"[{label}]"]
    text = message.text
    if text:
        lines.append(_clip(text, limit))
    images = sum(1 for p in message.parts if isinstance(p, ImagePart))
    if images:
        lines.append(f"[{images} image(s)]")
    for call in message.tool_calls:
        lines.append(f"→ {call.name}({_clip(call.arguments, limit // 4)})")
    return "\n".join(lines)


def _render_range(messages: Sequence[Message], max_message: int, max_total: int) -> str:
    rendered = [_render_message(m, max_message) for m in messages]
    total = 0
    first = len(rendered)
    while first > 0 and total + len(rendered[first - 1]) + 2 <= max_total:
        first -= 1
        total += len(rendered[first]) + 2
    kept = rendered[first:]
    if first:
        kept.insert(0, f"[{first:,} earlier messages omitted here; they are archived]")
    return "\n\n".join(kept)


def build_summary_prompt(
    request: FoldRequest,
    *,
    max_message_chars: int = _MAX_MESSAGE_CHARS,
    max_prompt_chars: int = _MAX_PROMPT_CHARS,
) -> tuple[str | None, list[Message]]:
    """The deterministic summary prompt: `(system, messages)`.

    Suffix mode: the agent's system prompt and the exact view messages, then one user message
    with the instruction (a prefix-extending request: it hits the provider cache). Standalone
    mode: the guideline as the system prompt and one user message holding the previous
    summary and the new messages rendered as text (each clipped to `max_message_chars`, the
    oldest dropped beyond `max_prompt_chars`).
    """
    budget = f"Keep the summary under about {request.budget_tokens:,} tokens."
    if request.mode == "suffix":
        parts = [
            "[context maintenance] Pause the task and write a summary of the conversation "
            "above"
            + (
                f", except its last {request.kept_messages} message(s), which stay visible verbatim"
                if request.kept_messages
                else ""
            )
            + ". The summary replaces those messages, so keep everything needed to continue.",
        ]
        if request.previous_summary:
            parts.append(
                f'It starts with an earlier summary (the message beginning "{FOLD_HEADER_PREFIX}'
                '"): merge it into the new one.'
            )
        parts.append("Do not call any tool; answer with the summary only.")
        instruction = " ".join(parts) + "\n\n" + request.guideline + "\n\n" + budget
        return request.system, [*request.view_messages, Message(role="user", content=instruction)]
    system = f"{_STANDALONE_SYSTEM}\n\n{request.guideline}\n\n{budget}"
    blocks: list[str] = []
    if request.previous_summary:
        blocks.append(f"<previous-summary>\n{request.previous_summary}\n</previous-summary>")
    conversation = _render_range(request.folded_messages, max_message_chars, max_prompt_chars)
    blocks.append(f"<conversation>\n{conversation}\n</conversation>")
    verb = "updated summary (previous summary merged with the conversation)"
    blocks.append(
        f"Write the {verb} now." if request.previous_summary else "Write the summary now."
    )
    return system, [Message(role="user", content="\n\n".join(blocks))]


def chat_messages(system: str | None, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions message dicts (LangChain chat models accept them too)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        content: Any
        if isinstance(message.content, str):
            content = message.content
        else:
            blocks: list[dict[str, Any]] = []
            for part in message.content:
                if isinstance(part, TextPart):
                    blocks.append({"type": "text", "text": part.text})
                elif isinstance(part, ImagePart):
                    url: dict[str, Any] = {"url": part.url}
                    if part.detail:
                        url["detail"] = part.detail
                    blocks.append({"type": "image_url", "image_url": url})
            content = blocks
        item: dict[str, Any] = {"role": message.role, "content": content}
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ]
        if message.role == "tool":
            item["tool_call_id"] = message.tool_call_id
        out.append(item)
    return out


# --------------------------------------------------------------------------- summarizers


@runtime_checkable
class Summarizer(Protocol):
    """Turns a `FoldRequest` into summary text (no header: the fold adds it)."""

    def summarize(self, request: FoldRequest) -> str:
        """The summary of `request`."""
        ...

    async def asummarize(self, request: FoldRequest) -> str:
        """Async `summarize`."""
        ...


class ResumeBlockSummarizer:
    """Zero-LLM summarizer: the `SessionMemory` resume block of the folded messages.

    Differential: when the request carries the source messages of the whole range (earlier
    folds included), the block is rebuilt from all of them, so facts of every part compete
    for the budget on equal terms. Otherwise the previous summary's lines are kept (as many
    as fit, from the top) under "Earlier:", followed by the resume block of the new messages.
    The result always fits the budget under the counter.

    Args:
        budget_tokens: the summary's size; None takes the request's `budget_tokens`.
        counter: token counter (default: the shared `tokens.get_counter()`).
    """

    mode: FoldMode = "standalone"

    def __init__(
        self, budget_tokens: int | None = None, counter: TokenCounter | None = None
    ) -> None:
        if budget_tokens is not None and budget_tokens < 1:
            raise ValueError(f"budget_tokens must be >= 1, got {budget_tokens}")
        self.budget_tokens = budget_tokens
        self.counter = counter

    def summarize(self, request: FoldRequest) -> str:
        """The resume block (plus the previous summary's lines) within the budget."""
        counter = self.counter or get_counter()
        budget = max(1, self.budget_tokens or request.budget_tokens)
        if request.source_messages:
            return SessionMemory.from_messages(request.source_messages).resume_block(
                budget, counter
            )
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


def content_text(content: Any) -> str:
    """The text of a chat answer's content (a string or a list of content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        pieces: list[str] = []
        for block in content:
            if isinstance(block, str):
                pieces.append(block)
            elif isinstance(block, Mapping) and block.get("type") in ("text", "output_text"):
                pieces.append(str(block.get("text", "")))
        return "".join(pieces)
    return "" if content is None else str(content)


Converter: TypeAlias = Callable[[str | None, list[Message]], Any]


class ChatModelSummarizer:
    """Summaries from any chat model: a LangChain chat model or an OpenAI client.

    Duck-typed: an object with `.chat.completions.create` is an OpenAI client (sync or
    async; `model_name` required); anything with `.invoke` / `.ainvoke` is a LangChain chat
    model (it receives OpenAI-style message dicts, or whatever `converter` makes).

    Args:
        model: the chat model or client.
        guideline: what the summary must contain: text, or a history
            `cachepilot.compress.Guideline` (e.g. `load_guideline("swe.json")`, one file per
            environment, as written by `cachepilot optimize-guideline`).
        max_tokens: output limit (`max_completion_tokens` for a client; `.bind(max_tokens=)`
            for a LangChain model); None leaves the model's default.
        mode: `suffix` when `model` is the agent's own model (bound with the agent's tools),
            so the summary request extends the cached prefix; else `standalone`.
        model_name: the `model=` argument for an OpenAI client.
        tools: suffix mode with an OpenAI client: the agent's tool schemas, sent (with
            `tool_choice="none"`) so the prefix matches the agent's requests.
        converter: builds the LangChain input from `(system, messages)`; default OpenAI dicts.

    Raises:
        ValueError: when `model` is neither kind, or a client comes without `model_name`.
    """

    def __init__(
        self,
        model: Any,
        *,
        guideline: str | Any = DEFAULT_GUIDELINE,
        max_tokens: int | None = 2_000,
        mode: FoldMode = "standalone",
        model_name: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        converter: Converter | None = None,
    ) -> None:
        completions = getattr(getattr(model, "chat", None), "completions", None)
        if completions is not None and hasattr(completions, "create"):
            self._kind: Literal["openai", "langchain"] = "openai"
            if not model_name:
                raise ValueError("an OpenAI client needs model_name (the model= argument)")
        elif hasattr(model, "invoke") or hasattr(model, "ainvoke"):
            self._kind = "langchain"
        else:
            raise ValueError(
                f"{type(model).__name__} is neither a LangChain chat model (.invoke) nor an "
                "OpenAI client (.chat.completions.create)"
            )
        if mode not in ("suffix", "standalone"):
            raise ValueError(f"mode must be 'suffix' or 'standalone', not {mode!r}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.model = model
        self.guideline: str = _guideline_text(guideline)
        self.max_tokens = max_tokens
        self.mode: FoldMode = mode
        self.model_name = model_name
        self.tools = [dict(t) for t in tools] if tools else None
        self.converter = converter

    def _openai_kwargs(self, request: FoldRequest) -> dict[str, Any]:
        system, messages = build_summary_prompt(request)
        kwargs: dict[str, Any] = {
            "model": self.model_name,
            "messages": chat_messages(system, messages),
        }
        if self.max_tokens is not None:
            kwargs["max_completion_tokens"] = self.max_tokens
        if self.tools and request.mode == "suffix":
            kwargs["tools"] = self.tools
            kwargs["tool_choice"] = "none"
        return kwargs

    def _langchain_call(self, request: FoldRequest) -> tuple[Any, Any]:
        system, messages = build_summary_prompt(request)
        payload = (
            self.converter(system, messages)
            if self.converter is not None
            else chat_messages(system, messages)
        )
        runnable = self.model
        if self.max_tokens is not None and hasattr(runnable, "bind"):
            runnable = runnable.bind(max_tokens=self.max_tokens)
        return runnable, payload

    @staticmethod
    def _openai_text(response: Any) -> str:
        return content_text(response.choices[0].message.content).strip()

    def summarize(self, request: FoldRequest) -> str:
        """Call the model synchronously.

        Raises:
            TypeError: for an async-only model or client (use `asummarize`).
        """
        if self._kind == "openai":
            response = self.model.chat.completions.create(**self._openai_kwargs(request))
            if inspect.isawaitable(response):
                _close(response)
                raise TypeError("an async OpenAI client needs asummarize / aplan_fold")
            return self._openai_text(response)
        runnable, payload = self._langchain_call(request)
        if not hasattr(runnable, "invoke"):
            raise TypeError("this model has no .invoke; use asummarize / aplan_fold")
        return content_text(getattr(runnable.invoke(payload), "content", None)).strip()

    async def asummarize(self, request: FoldRequest) -> str:
        """Call the model asynchronously (a sync model runs in a worker thread)."""
        if self._kind == "openai":
            response = self.model.chat.completions.create(**self._openai_kwargs(request))
            if inspect.isawaitable(response):
                response = await response
            return self._openai_text(response)
        runnable, payload = self._langchain_call(request)
        if hasattr(runnable, "ainvoke"):
            result = await runnable.ainvoke(payload)
        else:
            result = await asyncio.to_thread(runnable.invoke, payload)
        return content_text(getattr(result, "content", None)).strip()


def _guideline_text(guideline: object) -> str:
    """The text of a guideline given as text or as a `compress.Guideline` (duck-typed)."""
    text: object = guideline
    if not isinstance(guideline, str):
        target = getattr(guideline, "target", None)
        text = getattr(guideline, "text", None)
        if target not in (None, "history"):
            raise ValueError(f"a {target} guideline cannot guide history summaries")
    if not isinstance(text, str):
        raise ValueError(f"guideline must be a str or a Guideline, not {type(guideline).__name__}")
    if not text.strip():
        raise ValueError("guideline must not be empty")
    return text.strip()


def _close(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


# --------------------------------------------------------------------------- the cut


def fold_start(messages: Sequence[Message], folds: Sequence[Edit | None] | None = None) -> int:
    """Where a fold range starts: after the leading system messages and the task statement.

    The first message after the leading system messages is kept out of the fold when it is a
    user message that is not itself a fold summary (`folds`: per message, its fold edit, as
    in `PlanView.folds`; summaries are also recognised by their id prefix or header, so a
    summary a framework persisted into its state still starts the next, differential fold).
    """
    index = 0
    while index < len(messages) and messages[index].role == "system":
        index += 1
    if index < len(messages) and messages[index].role == "user":
        planned = folds is not None and folds[index] is not None
        if not planned and not _is_summary(messages[index]):
            index += 1
    return index


def _straddled(messages: Sequence[Message]) -> list[bool]:
    """`bad[c]`: cutting before message c would separate a tool call from its result."""
    call_at: dict[str, int] = {}
    diff = [0] * (len(messages) + 2)
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            call_at.setdefault(call.id, index)
        if message.role == "tool" and message.tool_call_id in call_at:
            at = call_at[message.tool_call_id]
            if at < index:
                diff[at + 1] += 1
                diff[index + 1] -= 1
    bad: list[bool] = []
    running = 0
    for index in range(len(messages) + 1):
        running += diff[index]
        bad.append(running > 0)
    return bad


def safe_cut(
    messages: Sequence[Message],
    keys: Sequence[str] | None = None,
    *,
    protect_tail_tokens: int,
    counter: TokenCounter | None = None,
    min_messages: int = MIN_FOLD_MESSAGES,
    start: int | None = None,
) -> int | None:
    """Where the folded range ends (exclusive), or None when there is nothing worth folding.

    Rules: the range is `[start, cut)` with `start = fold_start(messages)` (the task statement
    stays); the tail `messages[cut:]` holds at least `protect_tail_tokens` tokens (counted
    back from the end) and at least the last message; `cut` then moves back (the tail only
    grows) until the tail does not start with a tool message and no tool call before `cut`
    is answered at or after it (parallel calls included). Messages are never split.

    Args:
        messages: the view.
        keys: its keys (for the counter's memo), when known.
        protect_tail_tokens: tokens at the end that are never folded.
        counter: token counter (default: the shared one).
        min_messages: fewer messages than this in the range → None.
        start: where the range starts (default `fold_start(messages)`).

    Raises:
        ValueError: on negative arguments or misaligned keys.
    """
    if protect_tail_tokens < 0 or min_messages < 1:
        raise ValueError("need protect_tail_tokens >= 0 and min_messages >= 1")
    if keys is not None and len(keys) != len(messages):
        raise ValueError(f"keys ({len(keys)}) must align with messages ({len(messages)})")
    counter = counter or get_counter()
    begin = fold_start(messages) if start is None else start
    n = len(messages)
    cut = n
    tail = 0
    while cut > begin and tail < protect_tail_tokens:
        cut -= 1
        tail += counter.count_message(messages[cut], None if keys is None else keys[cut])
    cut = min(cut, n - 1)
    bad = _straddled(messages)
    if begin < n and (bad[begin] or messages[begin].role == "tool"):
        logger.warning("fold: the range would start inside a tool exchange; not folding")
        return None
    while cut > begin and (messages[cut].role == "tool" or bad[cut]):
        cut -= 1
    if cut - begin < min_messages:
        return None
    return cut


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True, slots=True)
class _Prepared:
    key: str
    end_key: str
    ref: str
    header: str
    request: FoldRequest


def _prepare(
    messages: Sequence[Message],
    keys: Sequence[str] | None,
    *,
    plan: Plan | None,
    store: ArtifactStore,
    thread: str,
    summarizer: Summarizer | None,
    counter: TokenCounter,
    protect_tail_tokens: int,
    epoch_index: int,
    system: str | None,
    summary_tokens: int,
    min_messages: int,
    min_tokens: int,
    guideline: str | None,
    mode: FoldMode | None,
    keep_from: str | None = None,
) -> _Prepared | None:
    if summary_tokens < 1 or min_tokens < 0:
        raise ValueError("need summary_tokens >= 1 and min_tokens >= 0")
    keys = message_keys(messages) if keys is None else keys
    view: PlanView = render_plan(messages, plan or Plan(), keys)
    start = fold_start(view.messages, view.folds)
    if keep_from is not None:
        cut = cut_before(view, keep_from, start, min_messages)
    else:
        cut = safe_cut(
            view.messages,
            view.keys,
            protect_tail_tokens=protect_tail_tokens,
            counter=counter,
            min_messages=min_messages,
            start=start,
        )
    if cut is None:
        return None
    folded = view.messages[start:cut]
    # An earlier summary opens the range: from this plan, or persisted into the transcript
    # by a framework that writes the view back (recognised by its id or header).
    previous = folded[0] if (view.folds[start] is not None or _is_summary(folded[0])) else None
    new = folded[1:] if previous is not None else folded
    if len(new) < min_messages:
        return None
    new_keys = view.keys[start + 1 : cut] if previous is not None else view.keys[start:cut]
    tokens = sum(counter.count_message(m, k) for m, k in zip(new, new_keys, strict=True))
    if tokens < min_tokens:
        return None
    key, end_key = view.spans[start][0], view.spans[cut - 1][1]
    archive = "[\n" + ",\n".join(_json(m) for m in folded) + "\n]"
    try:
        ref = store.put(
            thread,
            archive,
            meta={
                "reason": "fold",
                "epoch": epoch_index,
                "messages": len(folded),
                "tokens": tokens,
                "first_key": key,
                "last_key": end_key,
            },
        )
    except Exception as exc:  # nothing may be lost: no archive, no fold
        logger.warning("fold: archiving failed (%s); not folding", type(exc).__name__)
        return None
    request = FoldRequest(
        folded_messages=tuple(new),
        previous_summary=_summary_body(previous.text) if previous is not None else None,
        view_messages=tuple(view.messages),
        kept_messages=len(view.messages) - cut,
        system=system,
        guideline=guideline or getattr(summarizer, "guideline", None) or DEFAULT_GUIDELINE,
        mode=mode or getattr(summarizer, "mode", None) or "standalone",
        budget_tokens=summary_tokens,
        source_messages=_source_range(messages, keys, key, end_key),
    )
    return _Prepared(key, end_key, ref, fold_header(len(new), tokens, ref), request)


def _source_range(
    messages: Sequence[Message], keys: Sequence[str], first: str, last: str
) -> tuple[Message, ...]:
    """The transcript messages from key `first` to key `last` (empty when they do not
    resolve, e.g. a summary a framework persisted in place of its range)."""
    try:
        start, end = list(keys).index(first), list(keys).index(last)
    except ValueError:
        return ()
    return tuple(messages[start : end + 1]) if start <= end else ()


def cut_before(
    view: PlanView, keep_from: str, start: int, min_messages: int = MIN_FOLD_MESSAGES
) -> int | None:
    """The view index of transcript key `keep_from` as the end of a fold starting at
    `start`, when it is a safe one (no tool exchange split, at least `min_messages`)."""
    cut = next((i for i, span in enumerate(view.spans) if span[0] == keep_from), None)
    if cut is None or cut - start < min_messages:
        return None
    bad = _straddled(view.messages)
    if bad[cut] or bad[start] or view.messages[cut].role == "tool":
        logger.debug("fold: %s is inside a tool exchange; not folding there", keep_from)
        return None
    return cut


def _is_summary(message: Message) -> bool:
    return message.role == "user" and (
        (message.id or "").startswith(FOLD_ID_PREFIX) or message.text.startswith(FOLD_HEADER_PREFIX)
    )


def _json(message: Message) -> str:
    return json.dumps(message.to_dict(), ensure_ascii=False, separators=(",", ":"))


def _fallback(request: FoldRequest, counter: TokenCounter) -> str:
    try:
        return ResumeBlockSummarizer(counter=counter).summarize(request)
    except Exception as exc:  # the header alone still names the archive
        logger.warning("fold: the resume block failed too (%s)", type(exc).__name__)
        return ""


def _finish(prepared: _Prepared, body: str) -> Edit:
    # Whatever wrote the summary (a model or the resume block), it is cachepilot's text:
    # credential shapes copied from the folded messages are replaced (the archive keeps them).
    body = redact(body).strip()
    text = prepared.header if not body else f"{prepared.header}\n\n{body}"
    return Edit(
        kind="fold", key=prepared.key, end_key=prepared.end_key, text=text, ref=prepared.ref
    )


def _warn_fallback(summarizer: object, exc: BaseException | None) -> None:
    why = "an empty summary" if exc is None else type(exc).__name__
    logger.warning(
        "fold: summarizer %s failed (%s); using the zero-LLM resume block",
        type(summarizer).__name__,
        why,
    )


def plan_fold(
    messages: Sequence[Message],
    keys: Sequence[str] | None = None,
    *,
    store: ArtifactStore,
    thread: str,
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
    protect_tail_tokens: int = 20_000,
    epoch_index: int = 0,
    plan: Plan | None = None,
    system: str | None = None,
    summary_tokens: int = 800,
    min_messages: int = MIN_FOLD_MESSAGES,
    min_tokens: int = 1_000,
    guideline: str | None = None,
    mode: FoldMode | None = None,
    keep_from: str | None = None,
) -> Edit | None:
    """Plan one fold of the view `render_plan(messages, plan, keys)`: archive, summarize, edit.

    The range runs from `fold_start` to `safe_cut` of the view. When it starts with an earlier
    fold summary, the fold is differential: the summarizer gets that summary's body plus only
    the newer messages, and the new edit's range (in transcript keys) contains the old one,
    so it supersedes it. The folded view messages are archived first (JSON list of
    `Message.to_dict()`, one message per line); the summary's header names the ref. A failing
    or empty summarizer falls back to `ResumeBlockSummarizer` with one warning. Never raises
    on bad input or a failing summarizer (only on invalid arguments).

    Args:
        messages: the transcript as `apply_plan` receives it.
        keys: its stable keys.
        store: where the folded range is archived.
        thread: the artifact namespace.
        summarizer: None → the zero-LLM resume block.
        counter: token counter (default: the shared one).
        protect_tail_tokens: tokens at the end that stay verbatim.
        epoch_index: index of the epoch the edit will join (archive metadata).
        plan: the thread's plan so far (None: empty).
        system: the agent's system prompt (suffix mode sends it).
        summary_tokens: the summary's target size.
        min_messages: fewer new messages than this → no fold.
        min_tokens: fewer new tokens than this → no fold.
        guideline: default: the summarizer's `guideline`, else `DEFAULT_GUIDELINE`.
        mode: default: the summarizer's `mode`, else `standalone`.
        keep_from: transcript key of the first message to keep: the fold ends right before
            it instead of before the protected tail (a finished task's end); no fold when
            that is not a safe cut.

    Returns:
        The fold edit to append in a new epoch, or None when there is nothing to fold.
    """
    counter = counter or get_counter()
    prepared = _prepare(
        messages,
        keys,
        plan=plan,
        store=store,
        thread=thread,
        summarizer=summarizer,
        counter=counter,
        protect_tail_tokens=protect_tail_tokens,
        epoch_index=epoch_index,
        system=system,
        summary_tokens=summary_tokens,
        min_messages=min_messages,
        min_tokens=min_tokens,
        guideline=guideline,
        mode=mode,
        keep_from=keep_from,
    )
    if prepared is None:
        return None
    body = ""
    if summarizer is not None:
        try:
            body = summarizer.summarize(prepared.request).strip()
            if not body:
                _warn_fallback(summarizer, None)
        except Exception as exc:
            _warn_fallback(summarizer, exc)
    if not body:
        body = _fallback(prepared.request, counter)
    return _finish(prepared, body)


async def aplan_fold(
    messages: Sequence[Message],
    keys: Sequence[str] | None = None,
    *,
    store: ArtifactStore,
    thread: str,
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
    protect_tail_tokens: int = 20_000,
    epoch_index: int = 0,
    plan: Plan | None = None,
    system: str | None = None,
    summary_tokens: int = 800,
    min_messages: int = MIN_FOLD_MESSAGES,
    min_tokens: int = 1_000,
    guideline: str | None = None,
    mode: FoldMode | None = None,
    keep_from: str | None = None,
) -> Edit | None:
    """Async `plan_fold` (the summarizer is awaited via `asummarize`)."""
    counter = counter or get_counter()
    prepared = _prepare(
        messages,
        keys,
        plan=plan,
        store=store,
        thread=thread,
        summarizer=summarizer,
        counter=counter,
        protect_tail_tokens=protect_tail_tokens,
        epoch_index=epoch_index,
        system=system,
        summary_tokens=summary_tokens,
        min_messages=min_messages,
        min_tokens=min_tokens,
        guideline=guideline,
        mode=mode,
        keep_from=keep_from,
    )
    if prepared is None:
        return None
    body = ""
    if summarizer is not None:
        try:
            body = (await summarizer.asummarize(prepared.request)).strip()
            if not body:
                _warn_fallback(summarizer, None)
        except Exception as exc:
            _warn_fallback(summarizer, exc)
    if not body:
        body = _fallback(prepared.request, counter)
    return _finish(prepared, body)


def emergency_fold(
    messages: Sequence[Message],
    keys: Sequence[str] | None = None,
    *,
    store: ArtifactStore,
    thread: str,
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
    protect_tail_tokens: int = EMERGENCY_PROTECT_TAIL_TOKENS,
    epoch_index: int = 0,
    plan: Plan | None = None,
    summary_tokens: int = 800,
) -> Edit | None:
    """A fold after a provider context-length error: small protected tail, any range size.

    The summary request is always standalone (the view itself no longer fits the window).
    """
    return plan_fold(
        messages,
        keys,
        store=store,
        thread=thread,
        summarizer=summarizer,
        counter=counter,
        protect_tail_tokens=protect_tail_tokens,
        epoch_index=epoch_index,
        plan=plan,
        summary_tokens=summary_tokens,
        min_messages=1,
        min_tokens=0,
        mode="standalone",
    )


async def aemergency_fold(
    messages: Sequence[Message],
    keys: Sequence[str] | None = None,
    *,
    store: ArtifactStore,
    thread: str,
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
    protect_tail_tokens: int = EMERGENCY_PROTECT_TAIL_TOKENS,
    epoch_index: int = 0,
    plan: Plan | None = None,
    summary_tokens: int = 800,
) -> Edit | None:
    """Async `emergency_fold`."""
    return await aplan_fold(
        messages,
        keys,
        store=store,
        thread=thread,
        summarizer=summarizer,
        counter=counter,
        protect_tail_tokens=protect_tail_tokens,
        epoch_index=epoch_index,
        plan=plan,
        summary_tokens=summary_tokens,
        min_messages=1,
        min_tokens=0,
        mode="standalone",
    )


# --------------------------------------------------------------------------- errors

_CONTEXT_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "model_context_window_exceeded"}
)
_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context length exceeded",
    "context window exceeded",
    "exceeds the context window",
    "exceed context limit",
    "prompt is too long",
    "input is too long",
    "reduce the length of the messages",
    "too many tokens in the prompt",
    "input token count",
    "exceeds the maximum number of tokens",
    "maximum prompt length",
)
_CONTEXT_CLASS_HINTS = ("contextlength", "contextwindow", "contextoverflow")


def _codes(exc: BaseException) -> list[str]:
    out: list[str] = []
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        out.append(code)
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            for field_name in ("code", "type"):
                value = error.get(field_name)
                if isinstance(value, str):
                    out.append(value)
    return out


def is_context_length_error(exc: BaseException) -> bool:
    """True when `exc` (or an exception it was raised from) says the prompt is too long.

    Recognises OpenAI (`context_length_exceeded`, "maximum context length"), Anthropic
    ("prompt is too long"), Gemini / Bedrock / vLLM phrasings, and exception classes named
    like `ContextLengthError` / `ContextWindowExceeded` / `ContextOverflowError`.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(code in _CONTEXT_CODES for code in _codes(current)):
            return True
        name = type(current).__name__.lower()
        if any(hint in name for hint in _CONTEXT_CLASS_HINTS):
            return True
        text = str(current).lower()
        if any(phrase in text for phrase in _CONTEXT_PHRASES):
            return True
        current = current.__cause__ or current.__context__
    return False

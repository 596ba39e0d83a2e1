"""The summary request: what a summarizer is asked (`FoldRequest`), the fold header, the
history guideline and the prompt built from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from cachepilot.messages import ImagePart, Message, TextPart
from cachepilot.plan.epochs import FOLD_ID_PREFIX
from cachepilot.reduce.handles import host_handles, is_handle_line
from cachepilot.reduce.stubs import pointer

__all__ = [
    "DEFAULT_GUIDELINE",
    "FOLD_HANDLES_INTRO",
    "FOLD_HEADER_PREFIX",
    "MAX_FOLD_HANDLES",
    "MIN_FOLD_MESSAGES",
    "FoldMode",
    "FoldRequest",
    "build_summary_prompt",
    "chat_messages",
    "fold_handles_block",
    "fold_header",
    "is_fold_summary",
    "summary_body",
    "summary_budget",
]


FoldMode: TypeAlias = Literal["suffix", "standalone"]

FOLD_HEADER_PREFIX = "[earlier conversation folded:"
"""Every fold summary starts with this (see `fold_header`)."""

MIN_FOLD_MESSAGES = 4
"""A fold of fewer messages than this is not worth its summary."""

FOLD_HANDLES_INTRO = "Where the folded outputs said their full text was saved:"
"""Opens the lines under a fold header that keep the host's pointers to its saved outputs."""

MAX_FOLD_HANDLES = 8
"""Host pointer lines a fold keeps at most (the latest ones; the archive holds them all)."""

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


def fold_header(messages: int, tokens: int, ref: str, *, recall: bool = True) -> str:
    """The first line of a fold summary: what was folded and how to get it back (without
    `recall`, the model has no recall tool: the header says the full text was elided)."""
    return (
        f"{FOLD_HEADER_PREFIX} {messages:,} messages, {tokens:,} tokens; "
        f"{pointer(ref if recall else None)}]"
    )


def fold_handles_block(messages: Sequence[Message], previous: str | None = None) -> str:
    """The lines a fold header carries for the host's pointers to outputs it saved in full
    (`reduce.handles.host_handles` of the folded tool results, after those the `previous`
    fold summary carried), the latest `MAX_FOLD_HANDLES`; empty when there are none.

    A host that capped an output points to its file (deepagents' `/large_tool_results/<id>`,
    Claude Code's saved-output path); the fold keeps that pointer in view, so a model that
    follows the host's prompt still reads the file (DESIGN §2.7)."""
    found: list[str] = list(_carried_handles(previous)) if previous else []
    for message in messages:
        if message.role == "tool":
            found.extend(host_handles(message.text))
    latest: list[str] = []
    for line in reversed(found):  # each line once, at its latest place
        if line not in latest:
            latest.append(line)
            if len(latest) >= MAX_FOLD_HANDLES:
                break
    if not latest:
        return ""
    return "\n".join([FOLD_HANDLES_INTRO, *reversed(latest)])


def _carried_handles(summary: str) -> list[str]:
    """The handle lines a fold summary's header carries (none when it has no such block)."""
    _, _, rest = summary.partition("\n")
    if not rest.startswith(FOLD_HANDLES_INTRO + "\n"):
        return []
    block, _, _ = rest.partition("\n\n")
    lines = block.split("\n")[1 : MAX_FOLD_HANDLES + 1]
    return [line for line in lines if is_handle_line(line)]


def summary_budget(
    replaces: int,
    minimum: int,
    share: float = 0.0,
    maximum: int | None = None,
    earlier: int = 0,
) -> int:
    """A fold summary's token budget: `share` of the view tokens it replaces, at least
    `minimum`, at most `maximum` (a zero share or no maximum: `minimum`). A fold of a long
    stretch of work keeps more of its exact values than a fold of a short one. With a share,
    never smaller than `earlier`, the body of an earlier summary the fold replaces too (the
    new one stands for all of it), up to `maximum`."""
    if share <= 0:
        return minimum
    budget = minimum if maximum is None else max(minimum, min(maximum, int(replaces * share)))
    if earlier > 0:
        budget = max(budget, min(earlier, maximum or earlier))
    return budget


def summary_body(text: str) -> str:
    """A fold summary without its header line (and the host's pointer lines under it)."""
    if text.startswith(FOLD_HEADER_PREFIX):
        _, _, rest = text.partition("\n")
        if rest.startswith(FOLD_HANDLES_INTRO + "\n"):
            _, _, rest = rest.partition("\n\n")
        return rest.strip()
    return text.strip()


def is_fold_summary(message: Message) -> bool:
    return message.role == "user" and (
        (message.id or "").startswith(FOLD_ID_PREFIX) or message.text.startswith(FOLD_HEADER_PREFIX)
    )


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

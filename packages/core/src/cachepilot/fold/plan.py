"""Planning a fold: archive the range, ask the summarizer (the resume block when it fails),
and return the `fold` edit; the emergency fold after a context-length error."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from cachepilot.artifacts import ArtifactStore
from cachepilot.fold.cut import cut_before, fold_start, safe_cut
from cachepilot.fold.request import (
    DEFAULT_GUIDELINE,
    MIN_FOLD_MESSAGES,
    FoldMode,
    FoldRequest,
    fold_handles_block,
    fold_header,
    is_fold_summary,
    summary_body,
    summary_budget,
)
from cachepilot.fold.resume import DEFAULT_FACTS_SHARE, ResumeBlockSummarizer
from cachepilot.fold.summary import Summarizer
from cachepilot.messages import Message, message_keys
from cachepilot.plan.epochs import Edit, Plan, PlanView, render_plan
from cachepilot.support.redact import redact
from cachepilot.tokens import TokenCounter, get_counter

__all__ = [
    "EMERGENCY_PROTECT_TAIL_TOKENS",
    "aemergency_fold",
    "aplan_fold",
    "emergency_fold",
    "plan_fold",
]

logger = logging.getLogger(__name__)


EMERGENCY_PROTECT_TAIL_TOKENS = 2_000
"""Protected tail of an emergency fold (after a provider context-length error)."""


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
    recall: bool = True,
    summary_share: float = 0.0,
    summary_max_tokens: int | None = None,
    start_key: str | None = None,
) -> _Prepared | None:
    if summary_tokens < 1 or min_tokens < 0:
        raise ValueError("need summary_tokens >= 1 and min_tokens >= 0")
    if not 0.0 <= summary_share <= 1.0:
        raise ValueError("need 0 <= summary_share <= 1")
    keys = message_keys(messages) if keys is None else keys
    view: PlanView = render_plan(messages, plan or Plan(), keys)
    start = fold_start(view.messages, view.folds)
    if start_key is not None:
        at = next((i for i, span in enumerate(view.spans) if span[0] == start_key), None)
        if at is None or at < start:
            return None
        start = at
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
    previous = folded[0] if (view.folds[start] is not None or is_fold_summary(folded[0])) else None
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
    budget = summary_tokens
    if summary_share:
        # Never smaller than the summary it replaces (it stands for all of that too): its
        # body, since the header and the host's pointer lines are written anew around it.
        before = counter.count(summary_body(previous.text)) if previous is not None else 0
        budget = summary_budget(
            tokens + before, summary_tokens, summary_share, summary_max_tokens, earlier=before
        )
    request = FoldRequest(
        folded_messages=tuple(new),
        previous_summary=summary_body(previous.text) if previous is not None else None,
        view_messages=tuple(view.messages),
        kept_messages=len(view.messages) - cut,
        system=system,
        guideline=guideline or getattr(summarizer, "guideline", None) or DEFAULT_GUIDELINE,
        mode=mode or getattr(summarizer, "mode", None) or "standalone",
        budget_tokens=budget,
        source_messages=_source_range(messages, keys, key, end_key),
    )
    header = fold_header(len(new), tokens, ref, recall=recall)
    handles = fold_handles_block(
        request.source_messages or new, None if request.source_messages else _text(previous)
    )
    if handles:
        header = f"{header}\n{handles}"
    return _Prepared(key, end_key, ref, header, request)


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


def _text(message: Message | None) -> str | None:
    return message.text if message is not None else None


def _json(message: Message) -> str:
    return json.dumps(message.to_dict(), ensure_ascii=False, separators=(",", ":"))


def _fallback(request: FoldRequest, counter: TokenCounter, facts_share: float) -> str:
    try:
        return ResumeBlockSummarizer(counter=counter, facts_share=facts_share).summarize(request)
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
    recall: bool = True,
    summary_share: float = 0.0,
    summary_max_tokens: int | None = None,
    facts_share: float = DEFAULT_FACTS_SHARE,
    start_key: str | None = None,
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
        recall: the model is offered the recall tool (else the header names no recall call
            and says the full text was elided; the range is archived all the same).
        summary_share: the summary may take this share of the view tokens it replaces (the
            new messages and an earlier summary), at least `summary_tokens` and never less
            than the earlier summary…
        summary_max_tokens: …and at most this (None: `summary_tokens` always).
        facts_share: the zero-LLM resume block (no summarizer, or the fallback): share of the
            summary kept for the facts in use.
        start_key: transcript key of the first message to fold, instead of `fold_start`
            (a fold that keeps the conversation before it in view, see `fold.keep`); no
            fold when it is not a message of the view at or after `fold_start`.

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
        recall=recall,
        summary_share=summary_share,
        summary_max_tokens=summary_max_tokens,
        start_key=start_key,
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
        body = _fallback(prepared.request, counter, facts_share)
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
    recall: bool = True,
    summary_share: float = 0.0,
    summary_max_tokens: int | None = None,
    facts_share: float = DEFAULT_FACTS_SHARE,
    start_key: str | None = None,
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
        recall=recall,
        summary_share=summary_share,
        summary_max_tokens=summary_max_tokens,
        start_key=start_key,
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
        body = _fallback(prepared.request, counter, facts_share)
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
    recall: bool = True,
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
        recall=recall,
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
    recall: bool = True,
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
        recall=recall,
    )

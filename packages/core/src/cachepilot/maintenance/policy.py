"""Maintenance points: which history edits to make, and whether now is the time to make them.

Rewriting already-sent history breaks the provider's cached prefix from the first edited
message on: every later token is billed once more at the miss price. An edit that removes R
tokens saves about R × p_hit on every later call. The scheduler appends an epoch only when

* the expected saving over the remaining calls exceeds the one-off re-miss cost,
* the context has passed the fold trigger (it must shrink whatever the cost),
* the cache is cold anyway (idle longer than `cache_cold_after`, by default the provider's
  TTL: rewriting is free), or
* (ablation) a fixed every-B schedule says so.

All pending edits coalesce into that one epoch. Every decision is returned as a small record
that says why, what it saves and what it re-misses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from cachepilot.messages import Message
from cachepilot.plan.arguments import ReducedArguments, reduce_arguments
from cachepilot.plan.epochs import Edit
from cachepilot.pricing import Price
from cachepilot.reduce.handles import (
    HANDLE_LINE_CHARS,
    MAX_HANDLES,
    host_handles,
    is_handle_line,
)
from cachepilot.reduce.stubs import pointer
from cachepilot.support.redact import redact
from cachepilot.tokens import TokenCounter

__all__ = [
    "Candidate",
    "Decision",
    "MaintenanceConfig",
    "Rates",
    "argument_plan",
    "build_edits",
    "decide",
    "is_stub",
    "message_sizes",
    "prune_candidates",
    "rates",
    "stub_text",
]

_STUB_MAX_LABEL = 60
_STUB = re.compile(
    r"\[[^\n]{1,60} output (?:pruned|evicted)(?: \([^\n]{0,80}\))?: [\d,]{1,15} tokens; "
    r'(?:full text: recall\(ref="[0-9a-f]{12}"\)|full text elided)(?:; keeps: [^\n\]]{1,400})?\]'
)
_STUB_MAX_CHARS = 720
_STUB_WITH_HANDLES_MAX_CHARS = _STUB_MAX_CHARS + MAX_HANDLES * (HANDLE_LINE_CHARS + 1)
_KEEPS_MAX_CHARS = 409  # "; keeps: " and 400 characters, as `_STUB` allows


class MaintenanceConfig(BaseModel):
    """When and how history is rewritten. Defaults were tuned with `cachepilot bench`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    """Rewrite history at maintenance points at all."""
    evict: bool = True
    """Stub tool results of work units the lifecycle marks evictable."""
    prune: bool = False
    """Stub old tool results outside the protected tail (opt-in). Off by default because
    `cachepilot bench --audit` found it losing money where it acts: on the recorded traces
    it acted only on Claude Code in continuous mode, where its stubs predicted to save $0.0189
    realized -$0.0345 (facts they removed were needed later, and the cost model does not price
    their recall round trips); with it off, continuous $5.779 (0.383 x, visible fidelity
    0.991) against $5.814 (0.386 x, 0.990), isolated the same (docs/audit.md)."""
    schedule: Literal["cost", "fixed"] = "cost"
    """`cost`: the cost model decides; `fixed`: apply pending edits every `every` calls."""
    every: int = 3
    """Lifecycle batch size B (calls), and the period of the `fixed` schedule."""
    protect_tool_tokens: int = 10_000
    """Tool-output tokens at the end of the history that are never pruned."""
    protect_results: int = 4
    """The last N tool results are never pruned or evicted."""
    protect_user_turns: int = 0
    """Also protect every tool result of the last N user turns (OpenCode uses 2; sessions that
    are one long task would then never prune)."""
    min_prune_tokens: int = 2_000
    """Prune only when it would remove at least this many tokens."""
    min_result_tokens: int = 200
    """Results smaller than this are not worth a stub."""
    stub_keeps_chars: int = 240
    """A stub keeps this many characters of the output's most telling exact values (names
    it defines, identifiers, paths, numbers) in view; 0 keeps none."""
    reduce_arguments: bool = True
    """Also reduce large tool-call arguments (a file's content in a `write` call) of calls
    answered before the last `protect_results` results (and the last `protect_user_turns`
    turns): each string value longer than `argument_min_chars` is archived and replaced by a
    preview naming its ref (the call's id, name and JSON shape stay)."""
    argument_min_chars: int = 5_000
    """Argument string values longer than this are reduced."""
    argument_preview_chars: int = 300
    """Head of a reduced argument value kept in the preview."""
    cache_cold_after: float | None = None
    """Idle seconds after which the provider cache counts as cold, so a pending rewrite is
    applied for free; None takes the provider profile's TTL. A cautious value above the TTL
    avoids rewriting a cache the provider still holds (providers often keep entries longer
    than documented)."""
    fold_trigger: float = 0.8
    """Share of the usable input window past which maintenance is forced (and, if pruning
    and eviction do not bring the context below it, the history is folded)."""
    fold: bool = True
    """Fold (summarize) as the last resort past the fold trigger."""
    fold_protect_tokens: int = 2_000
    """Tokens at the end of the history a fold never summarizes."""
    fold_by_cost: bool = True
    """Also fold below the trigger when the cost model says the fold pays for its re-miss."""
    fold_min_tokens: int = 6_000
    """A cost-model fold, and a fold of finished tasks on a warm cache, must remove at least
    this many tokens."""
    fold_summary_tokens: int = 800
    """Least size of a fold summary (the cost model counts on its size)."""
    fold_summary_share: float = 0.4
    """A fold summary may take this share of the view tokens it replaces (room for the exact
    values of a long stretch of work), within [`fold_summary_tokens`,
    `fold_summary_max_tokens`] and never less than the summary it replaces; 0 keeps every
    summary at `fold_summary_tokens`."""
    fold_summary_max_tokens: int = 12_800
    """Largest fold summary when `fold_summary_share` scales it (chosen with
    `fold_facts_share`, see docs/defaults.md)."""
    fold_facts_share: float = 0.7
    """Share of a zero-LLM fold summary (the resume block, the default summarizer) kept for
    the facts in use: the exact values of the folded tool output; the session-memory block
    gets the rest (chosen leaving each trace source out, see docs/defaults.md)."""
    fold_ahead: bool = True
    """Once a request was prepared, the pilot's background worker runs the next request's
    maintenance on a prediction of it (`CachePilot.precompute_soon`, which the plugins and the
    proxy call), so the summary of the range the next fold takes is computed before that
    request comes (zero-LLM summaries only); off: every fold is computed on the request path.
    The requests are the same bytes either way."""
    fold_finished_tasks: bool = True
    """Fold the tasks the lifecycle marks evictable (a later user turn started the next task
    and none of their work is referenced any more) as soon as the cost model says it pays, by
    the rule of cost-model folds (at least `fold_min_tokens` removed): the current task is
    the protected tail (on a cold cache whenever the fold removes tokens: the rewrite is free
    then). When a cost-model fold that would take the same messages is expected before the
    current task's expected end, the fold must also pay over the calls until then
    (`maintenance.next_fold`)."""
    fold_conversation: bool = False
    """Let the finished-task and cost-model folds fold conversation too: tool-less exchanges
    (plain chat turns, files, repo maps and few-shot examples sent as messages) inside their
    range, and user messages or replies longer than `conversation_tokens`. Off, the folds end
    before it and the model keeps reading it. A tool-less exchange is never finished work
    (the lifecycle never marks it evictable) either way, and without the recall tool no fold
    takes a user message or a reply (DESIGN §2.7)."""
    conversation_tokens: int = 4_000
    """A user message or a reply without tool calls longer than this is content the model
    works with (pasted text, a file, a plan), not a task statement: kept in view like a
    tool-less exchange unless `fold_conversation`."""
    context_window: int | None = None
    """Usable input window in tokens; None takes the provider profile's."""
    horizon: float = 0.5
    """Expected remaining calls as a multiple of the calls made so far (a session that has
    run N calls is expected to run about `horizon` × N more)."""
    fold_margin: float = 0.0
    """A fold (cost-model or finished-task) is taken only when its expected saving exceeds
    its re-miss by this share (0.1: by 10 %): a fold at the break-even point pays only if
    the session runs as long as the horizon guesses, and one that ends sooner loses the
    re-miss (see docs/audit.md)."""
    min_expected_calls: int = 2
    """The cost model never assumes fewer remaining calls than this."""
    max_expected_calls: int = 200
    """…nor more than this."""

    @model_validator(mode="after")
    def _check(self) -> MaintenanceConfig:
        if self.every < 1:
            raise ValueError("every must be >= 1")
        if self.conversation_tokens < 0:
            raise ValueError("conversation_tokens must be >= 0")
        if not 0.1 <= self.fold_trigger <= 1.0:
            raise ValueError("fold_trigger must be within [0.1, 1.0]")
        for name in (
            "protect_tool_tokens",
            "protect_results",
            "protect_user_turns",
            "min_prune_tokens",
            "min_result_tokens",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0.0 <= self.fold_summary_share <= 0.8:
            raise ValueError("fold_summary_share must be within [0, 0.8]")
        if not 0.0 <= self.fold_facts_share <= 0.9:
            raise ValueError("fold_facts_share must be within [0, 0.9]")
        if not 1 <= self.fold_summary_tokens <= self.fold_summary_max_tokens:
            raise ValueError("need 1 <= fold_summary_tokens <= fold_summary_max_tokens")
        if not 0 <= self.stub_keeps_chars <= 400:
            raise ValueError("stub_keeps_chars must be within [0, 400]")
        if self.argument_min_chars < 200:
            raise ValueError("argument_min_chars must be >= 200")
        if not 0 <= self.argument_preview_chars <= self.argument_min_chars // 2:
            raise ValueError("argument_preview_chars must be within [0, argument_min_chars / 2]")
        if self.cache_cold_after is not None and not 0 < self.cache_cold_after <= 30 * 86_400:
            raise ValueError("cache_cold_after must be within (0, 30 days] seconds, or None")
        if self.context_window is not None and self.context_window < 1_000:
            raise ValueError("context_window must be >= 1000 tokens")
        if not 0.0 < self.horizon <= 10.0:
            raise ValueError("horizon must be within (0, 10]")
        if not 0.0 <= self.fold_margin <= 10.0:
            raise ValueError("fold_margin must be within [0, 10]")
        if not 1 <= self.min_expected_calls <= self.max_expected_calls:
            raise ValueError("need 1 <= min_expected_calls <= max_expected_calls")
        return self


@dataclass(frozen=True, slots=True)
class Candidate:
    """A tool result that could be stubbed at the next maintenance point."""

    index: int
    """Position in the view (the transcript with earlier epochs applied)."""
    key: str
    kind: Literal["stub", "evict", "args"]
    tokens: int
    """Tokens of the result as it stands (`args`: of the arguments to reduce)."""
    reason: str
    kept_tokens: int = 30
    """Tokens left after the edit (a stub: about 30, plus the host's pointer lines it carries;
    the values it keeps are added by the caller; `args`: the reduced arguments)."""
    calls: tuple[str, ...] = ()
    """`args` only: ids of the calls whose arguments are reduced."""


class Decision(BaseModel):
    """One scheduler decision, kept small so a log of them explains a whole session."""

    call: int
    """Ordinal of the model call."""
    apply: bool
    reason: str
    """`cost-model`, `fold-trigger`, `cold-cache`, `fixed-schedule` or why not."""
    candidates: int = 0
    removed_tokens: int = 0
    """Tokens the edits remove from every later request."""
    remiss_tokens: int = 0
    """Tokens after the first edited message: billed again at the miss price once."""
    expected_calls: int = 0
    saving_usd: float = 0.0
    """Expected saving over the remaining calls."""
    cost_usd: float = 0.0
    """One-off cost of the broken prefix."""
    context_tokens: int = 0


def stub_text(
    kind: Literal["stub", "evict"],
    message: Message,
    tokens: int,
    ref: str,
    reason: str,
    *,
    recall: bool = True,
    keeps: Sequence[str] = (),
    handles: Sequence[str] = (),
) -> str:
    """Deterministic one-line stub that names the ref to recall (without `recall`, the model
    has no recall tool: the stub says the text was elided) and, when given, the exact values
    of the output it keeps in view (`keeps`, see `memory.values.output_values`).

    `handles` are the host's own pointer lines of the output (`reduce.handles.host_handles`):
    each follows the stub line verbatim, so a model that follows the host's prompt still finds
    the file the host saved the full output in (DESIGN §2.7).

    The reason may come from a model (the LLM lifecycle estimator): credential shapes in it
    are replaced (`cachepilot.support.redact`).
    """
    label = (message.name or "tool")[:_STUB_MAX_LABEL]
    verb = "pruned" if kind == "stub" else "evicted"
    why = f" ({redact(reason)})" if reason and kind == "evict" else ""
    kept = "; keeps: " + ", ".join(keeps) if keeps else ""
    stub = (
        f"[{label} output {verb}{why}: {tokens:,} tokens; "
        f"{pointer(ref if recall else None)}{kept[:_KEEPS_MAX_CHARS]}]"
    )
    lines = [h for h in handles[:MAX_HANDLES] if is_handle_line(h)]
    return "\n".join([stub, *lines])


def is_stub(text: str) -> bool:
    """True when `text` is exactly a `stub_text`, the host's handle lines it carries included
    (a result that a framework already holds as its stub: stubbing it again could only lose
    the ref it names)."""
    if len(text) > _STUB_WITH_HANDLES_MAX_CHARS:
        return False
    first, *rest = text.split("\n")
    return (
        len(first) <= _STUB_MAX_CHARS
        and _STUB.fullmatch(first) is not None
        and len(rest) <= MAX_HANDLES
        and all(is_handle_line(line) for line in rest)
    )


def prune_candidates(
    messages: Sequence[Message],
    keys: Sequence[str],
    counter: TokenCounter,
    config: MaintenanceConfig,
    *,
    already: set[str],
    evictable: dict[str, str] | None = None,
    sizes: Sequence[int] | None = None,
) -> list[Candidate]:
    """Tool results outside the protected tail that a maintenance point could stub.

    Args:
        messages: the transcript (already-edited results are skipped via `already`).
        keys: stable keys of `messages`.
        counter: token counter (memoised).
        config: maintenance settings.
        already: keys edited by earlier epochs.
        evictable: key → reason for results of evictable work units (from the lifecycle).
        sizes: `counter.count_message` of each message, when the caller keeps them.
    """
    evictable = evictable or {}
    size = _sizer(messages, counter, sizes)
    tool_indices = [i for i, m in enumerate(messages) if m.role == "tool"]
    protected: set[int] = set(
        tool_indices[-config.protect_results :] if config.protect_results else ()
    )
    recent = set(protected)  # what protects arguments: the last results, not the token budget
    budget = config.protect_tool_tokens
    for i in reversed(tool_indices):
        if budget <= 0:
            break
        protected.add(i)
        budget -= size(i)
    if config.protect_user_turns:
        users = [i for i, m in enumerate(messages) if m.role == "user"]
        if users:
            start = users[-min(config.protect_user_turns, len(users))]
            protected.update(i for i in tool_indices if i >= start)
            recent.update(i for i in tool_indices if i >= start)
    out: list[Candidate] = []
    for i in tool_indices:
        key = keys[i]
        if i in protected or key in already:
            continue
        tokens = size(i)
        if tokens < config.min_result_tokens or is_stub(messages[i].text):
            continue
        # The stub keeps the host's pointer lines (about 4 characters a token).
        kept = 30 + sum(len(h) + 1 for h in host_handles(messages[i].text)) // 4
        if config.evict and key in evictable:
            out.append(Candidate(i, key, "evict", tokens, evictable[key], kept))
        elif config.prune:
            out.append(Candidate(i, key, "stub", tokens, "old tool output", kept))
    if config.reduce_arguments:
        # A large argument is the exchange's big item: the token budget that keeps recent
        # outputs would keep it for many calls; the last `protect_results` results do.
        tail = min(recent) if recent else len(messages)
        found = _argument_candidates(
            messages, keys, counter, config, already=already, tool_indices=tool_indices, tail=tail
        )
        out.extend(found)
        out.sort(key=lambda c: c.index)
    return out


def argument_plan(
    arguments: str, config: MaintenanceConfig, *, recall: bool = True
) -> ReducedArguments | None:
    """`reduce_arguments` with the config's sizes (memoised: the same text is judged on
    every call until it is reduced)."""
    if len(arguments) <= config.argument_min_chars:
        return None
    return _argument_plan(
        arguments, config.argument_min_chars, config.argument_preview_chars, recall
    )


@lru_cache(maxsize=256)
def _argument_plan(
    arguments: str, min_chars: int, preview_chars: int, recall: bool
) -> ReducedArguments | None:
    return reduce_arguments(
        arguments, min_chars=min_chars, preview_chars=preview_chars, recall=recall
    )


def _argument_candidates(
    messages: Sequence[Message],
    keys: Sequence[str],
    counter: TokenCounter,
    config: MaintenanceConfig,
    *,
    already: set[str],
    tool_indices: Sequence[int],
    tail: int,
) -> list[Candidate]:
    """Assistant messages before the protected tail with long argument values, every call of
    them answered before the tail (a call still running, or one whose result is protected,
    keeps its arguments)."""
    answered: dict[str, int] | None = None
    out: list[Candidate] = []
    for i in range(min(tail, len(messages))):
        message = messages[i]
        if message.role != "assistant" or not message.tool_calls or keys[i] in already:
            continue
        if all(len(c.arguments) <= config.argument_min_chars for c in message.tool_calls):
            continue
        if answered is None:
            answered = {}
            for t in tool_indices:
                answered.setdefault(str(messages[t].tool_call_id), t)
        if any(answered.get(c.id, tail) >= tail for c in message.tool_calls):
            continue
        tokens = kept = 0
        calls: list[str] = []
        for call in message.tool_calls:
            plan = argument_plan(call.arguments, config)
            if plan is None:
                continue
            tokens += counter.count(call.arguments)
            kept += counter.count(plan.text)
            calls.append(call.id)
        if calls and tokens - kept >= config.min_result_tokens:
            out.append(
                Candidate(i, keys[i], "args", tokens, "old tool-call arguments", kept, tuple(calls))
            )
    return out


def _sizer(
    messages: Sequence[Message], counter: TokenCounter, sizes: Sequence[int] | None
) -> Callable[[int], int]:
    """Tokens of `messages[i]`: from `sizes` when given (they must align), else counted."""
    if sizes is None:
        return lambda i: counter.count_message(messages[i])
    if len(sizes) != len(messages):
        raise ValueError(f"sizes ({len(sizes)}) must align with messages ({len(messages)})")
    known = sizes
    return lambda i: known[i]


def message_sizes(
    messages: Sequence[Message], counter: TokenCounter, sizes: Sequence[int] | None
) -> Sequence[int]:
    if sizes is None:
        return [counter.count_message(m) for m in messages]
    if len(sizes) != len(messages):
        raise ValueError(f"sizes ({len(sizes)}) must align with messages ({len(messages)})")
    return sizes


@dataclass(slots=True)
class _Totals:
    removed: int = 0
    first_index: int | None = None
    edits: list[Candidate] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Rates:
    """The cost model's prices at one call."""

    expected_calls: int
    """Calls the session is expected to run after this one."""
    saving_per_token: float
    """USD a token removed from the history saves over those calls (it was a cache hit)."""
    remiss_per_token: float
    """USD a token costs once when an edit before it breaks the cached prefix."""


def rates(
    config: MaintenanceConfig, price: Price, call: int, expected_calls: int | None = None
) -> Rates:
    """Cost-model rates at call `call`.

    Remaining calls: `expected_calls` when the caller knows better (bounded by the config's
    limits), else `horizon` × calls so far.
    """
    guess = round(call * config.horizon) if expected_calls is None else expected_calls
    expected = max(config.min_expected_calls, min(config.max_expected_calls, guess))
    hit = price.hit_per_m / 1e6
    write_premium = max(0.0, price.effective_write_per_m - price.miss_per_m) / 1e6
    return Rates(
        expected_calls=expected,
        saving_per_token=hit * expected,
        remiss_per_token=price.miss_per_m / 1e6 - hit + write_premium,
    )


def decide(
    *,
    call: int,
    messages: Sequence[Message],
    candidates: Sequence[Candidate],
    counter: TokenCounter,
    config: MaintenanceConfig,
    price: Price,
    ttl_seconds: float | None,
    idle_seconds: float | None,
    context_tokens: int,
    context_window: int,
    stub_tokens: Callable[[Candidate], int],
    sizes: Sequence[int] | None = None,
    until_fold: int | None = None,
) -> tuple[Decision, list[Candidate]]:
    """Decide whether this call is a maintenance point, and which candidates to apply.

    `sizes`: `counter.count_message` of each of `messages`, when the caller keeps them.
    `until_fold`: calls until a fold is expected to take every candidate anyway (see
    `next_fold.calls_until_fold`); an edit saves its whole size until then, and after it only the
    `fold_summary_share` of it the fold summary would have kept.

    Returns:
        The decision record and the candidates to turn into edits (empty when not applying).
    """
    totals = _Totals()
    for cand in candidates:
        saved = cand.tokens - stub_tokens(cand)
        if saved <= 0:
            continue
        totals.removed += saved
        totals.edits.append(cand)
        if totals.first_index is None or cand.index < totals.first_index:
            totals.first_index = cand.index
    record = Decision(
        call=call,
        apply=False,
        reason="nothing to remove",
        candidates=len(totals.edits),
        context_tokens=context_tokens,
    )
    if not config.enabled or not totals.edits or totals.first_index is None:
        return record, []
    all_sizes = message_sizes(messages, counter, sizes)
    remiss = sum(all_sizes[totals.first_index :])
    rate = rates(config, price, call)
    if until_fold is not None and until_fold < rate.expected_calls:
        # Until the fold the edit saves its whole size; after it only the share of that size
        # the fold summary would have spent on it (summaries scale with what they replace).
        after = (rate.expected_calls - until_fold) * config.fold_summary_share
        rate = rates(config, price, call, round(until_fold + after))
    cost_usd = remiss * rate.remiss_per_token
    saving_usd = totals.removed * rate.saving_per_token
    record = record.model_copy(
        update={
            "removed_tokens": totals.removed,
            "remiss_tokens": remiss,
            "expected_calls": rate.expected_calls,
            "saving_usd": round(saving_usd, 6),
            "cost_usd": round(cost_usd, 6),
        }
    )
    forced = context_tokens >= config.fold_trigger * context_window
    cold_after = config.cache_cold_after if config.cache_cold_after is not None else ttl_seconds
    cold = cold_after is not None and idle_seconds is not None and idle_seconds > cold_after
    if config.schedule == "fixed":
        if call % config.every == 0 or forced:
            return record.model_copy(
                update={"apply": True, "reason": "fixed-schedule"}
            ), totals.edits
        return record.model_copy(update={"reason": "not a scheduled call"}), []
    if forced:
        return record.model_copy(update={"apply": True, "reason": "fold-trigger"}), totals.edits
    if cold:
        return record.model_copy(update={"apply": True, "reason": "cold-cache"}), totals.edits
    # Cost model: the earliest edit decides how much is re-missed, so also weigh leaving the
    # oldest candidates for later: pick the cut with the best net saving.
    best = _best_cut(
        messages=messages,
        edits=totals.edits,
        counter=counter,
        stub_tokens=stub_tokens,
        sizes=all_sizes,
        saving_per_token=rate.saving_per_token,
        remiss_per_token=rate.remiss_per_token,
    )
    if best is None:
        return record.model_copy(update={"reason": "saving does not pay for the re-miss"}), []
    chosen, removed, remiss_best, saving_best, cost_best = best
    record = record.model_copy(
        update={
            "candidates": len(chosen),
            "removed_tokens": removed,
            "remiss_tokens": remiss_best,
            "saving_usd": round(saving_best, 6),
            "cost_usd": round(cost_best, 6),
        }
    )
    if removed < config.min_prune_tokens:
        return record.model_copy(update={"reason": "below minimum saving"}), []
    return record.model_copy(update={"apply": True, "reason": "cost-model"}), chosen


def _best_cut(
    *,
    messages: Sequence[Message],
    edits: Sequence[Candidate],
    counter: TokenCounter,
    stub_tokens: Callable[[Candidate], int],
    saving_per_token: float,
    remiss_per_token: float,
    sizes: Sequence[int] | None = None,
) -> tuple[list[Candidate], int, int, float, float] | None:
    """Among "every candidate from the j-th on", the set with the largest positive net saving.

    Returns:
        (candidates, tokens removed, tokens re-missed, saving USD, cost USD), or None when no
        cut pays.
    """
    ordered = sorted(edits, key=lambda c: c.index)
    sizes = message_sizes(messages, counter, sizes)
    best: tuple[list[Candidate], int, int, float, float] | None = None
    best_net = 0.0
    removed = 0
    # Tokens from each candidate to the end, walked backwards one gap at a time: the cost
    # follows the candidates, not the history's length.
    remiss = 0
    at = len(sizes)
    for j in range(len(ordered) - 1, -1, -1):
        removed += max(0, ordered[j].tokens - stub_tokens(ordered[j]))
        index = ordered[j].index
        if not 0 <= index <= len(sizes):
            raise IndexError(f"candidate index {index} outside the {len(sizes)} messages")
        remiss += sum(sizes[index:at])
        at = index
        saving = removed * saving_per_token
        cost = remiss * remiss_per_token
        if saving - cost > best_net:
            best_net = saving - cost
            best = (ordered[j:], removed, remiss, saving, cost)
    return best


def build_edits(
    chosen: Sequence[Candidate], texts: Sequence[str], refs: Sequence[str]
) -> list[Edit]:
    """Stub and evict edits for the chosen candidates, in transcript order."""
    return [
        Edit(kind=c.kind, key=c.key, text=t, ref=r)
        for c, t, r in sorted(zip(chosen, texts, refs, strict=True), key=lambda x: x[0].index)
    ]

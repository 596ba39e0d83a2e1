"""Maintenance points: when and how already-sent history is rewritten, as plan epochs."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from cachepilot.artifacts import ArtifactStore
from cachepilot.fold import (
    MIN_FOLD_MESSAGES,
    cut_before,
    emergency_fold,
    fold_start,
    plan_fold,
)
from cachepilot.lifecycle import LifecycleRegistry, SegmentState
from cachepilot.maintenance.fold_cost import (
    FoldEstimate,
    earlier_summary_tokens,
    fold_estimate,
    task_fold_estimate,
)
from cachepilot.maintenance.next_fold import (
    NextFold,
    calls_until_cost_fold,
    calls_until_fold,
    prepaid_remiss,
)
from cachepilot.maintenance.pointers import restore_pointers
from cachepilot.maintenance.policy import (
    Candidate,
    MaintenanceConfig,
    argument_plan,
    build_edits,
    decide,
    prune_candidates,
    stub_text,
)
from cachepilot.maintenance.settle import settle
from cachepilot.maintenance.view_cache import ViewCache
from cachepilot.memory.values import output_values
from cachepilot.messages import KeyTracker, Message
from cachepilot.pilot.base import PilotBase, check_pilot_thread, check_request
from cachepilot.pilot.fold_keeps import FoldKeeps, keeps_start, view_index
from cachepilot.pilot.state import PilotState
from cachepilot.plan.epochs import Edit, Epoch, PlanView
from cachepilot.pricing import Price
from cachepilot.reduce.handles import host_handles
from cachepilot.sim import get_profile
from cachepilot.support.foreground import foreground, yield_to_foreground
from cachepilot.support.log_labels import thread_label
from cachepilot.tokens import TokenCounter, get_counter

__all__ = ["Maintenance"]

logger = logging.getLogger(__name__)


_MAX_DECISIONS = 50


class Maintenance(PilotBase):
    """Maintenance points of `CachePilot`: the cost-model scheduler decides when already-sent
    history is rewritten (stubs, eviction, argument reduction, folds) as one plan epoch."""

    def maintain(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        recall: bool | None = None,
    ) -> bool:
        """Ask the scheduler only: append a maintenance epoch if this call should be one.

        For graphs with a maintenance step before the model step: call `maintain` there and
        `prepare(..., maintain=False)` for the model call itself. Returns True when an epoch
        was appended. Never raises on a scheduler failure (it is logged).
        """
        check_pilot_thread(thread)
        check_request(system, messages, tools)
        state = self.state(thread)
        with foreground(), self._lock:  # a precomputation steps aside meanwhile
            in_tools = self._with_recall(tools, recall)
            # A scratch copy: the real frozen values change only with an epoch.
            scratch = state.canonical.model_copy(deep=True)
            refreshed, _ = self._schedule(
                thread=thread,
                state=state,
                raw_system=system,
                messages=messages,
                in_tools=in_tools,
                request=self._canonical(system, messages, in_tools, scratch),
                keys=self._trackers.setdefault(thread, KeyTracker()).keys(messages),
                clock=time.time() if now is None else now,
                recall=self.config.recall_tool if recall is None else bool(recall),
            )
            appended = refreshed is not None
            state.revision += 1  # decisions and the lifecycle change even without an epoch
            return appended

    def _schedule(
        self,
        *,
        thread: str,
        state: PilotState,
        raw_system: str | None,
        messages: Sequence[Message],
        in_tools: list[dict[str, Any]],
        request: tuple[str | None, list[Message], list[dict[str, Any]]],
        keys: Sequence[str],
        clock: float,
        recall: bool,
    ) -> tuple[tuple[str | None, list[Message], list[dict[str, Any]]] | None, PlanView | None]:
        """Ask the scheduler about `request` (canonical).

        Returns:
            (None, the view of `request` under the plan, when the scheduler rendered one) when
            no epoch is appended, else (the request canonicalized again with the frozen values
            refreshed, None).
        """
        system, canon_messages, out_tools = request
        idle = None if state.last_request_time is None else clock - state.last_request_time
        appended, rendered = self._maintain(
            thread=thread,
            state=state,
            messages=messages,
            canon_messages=canon_messages,
            keys=keys,
            system=system,
            tools=out_tools,
            idle=idle,
            recall=recall,
        )
        if not appended:
            return None, rendered
        if not self.config.canonicalize:
            return request, None
        # Frozen volatile values refresh at maintenance points only.
        return self._canonicalizer.apply(
            raw_system, messages, in_tools, state.canonical, maintenance=True
        ), None

    def _maintain(
        self,
        *,
        thread: str,
        state: PilotState,
        messages: Sequence[Message],
        canon_messages: Sequence[Message],
        keys: Sequence[str],
        system: str | None,
        tools: Sequence[Mapping[str, Any]],
        idle: float | None,
        recall: bool,
        cache: ViewCache | None = None,
        store: ArtifactStore | None = None,
    ) -> tuple[bool, PlanView | None]:
        """Ask the scheduler whether this call is a maintenance point; append the epoch if so.

        Prune and evict come first; the fold runs only when the context is still above the
        fold trigger after them. Returns whether an epoch was appended, and the view it
        judged (None when it rendered none, or when an epoch made it stale). `recall`: the
        model is offered the recall tool (else no stub or summary names a recall call).
        `cache` and `store` replace the thread's view cache and the archive (a prediction's
        run on a scratch state: `Preparation.precompute`). Never raises: a failure skips
        maintenance for this call.
        """
        cfg = self.config.maintenance
        if not cfg.enabled or not messages:
            return False, None
        try:
            counter = get_counter(self.config.encoding)
            profile = get_profile(self.config.provider)
            if cache is None:
                cache = self._views.setdefault(thread, ViewCache())
            rendered = cache.render(canon_messages, state.plan, keys)
            view, view_keys = rendered.messages, rendered.keys
            sizes, view_tokens = cache.sizes(view, counter)
            yield_to_foreground()  # a precomputation's pauses (no-ops on a request's thread)
            ttl = profile.ttl_seconds
            cold = ttl is not None and idle is not None and idle > ttl
            # A cold cache makes this rewrite free: evaluate the lifecycle now, so everything
            # finished by now goes in this epoch rather than breaking a warm prefix later.
            evictable = (
                self._evictable(state, messages, keys, cache, force=cold) if cfg.evict else {}
            )
            yield_to_foreground()
            candidates = prune_candidates(
                view,
                view_keys,
                counter,
                cfg,
                already=cache.edited_keys(state.plan),
                evictable=evictable,
                sizes=sizes,
            )
            context = view_tokens + counter.count(system or "")
            context += self._tools_tokens(tools, counter)
            window = cfg.context_window or profile.context_window
            # What a fold keeps in view (DESIGN §2.7): a fold starts after the conversation it
            # must keep; without recall no fold takes a user message or a reply.
            keeps = FoldKeeps(rendered, sizes, cfg, counter, recall=recall) if cfg.fold else None
            yield_to_foreground()
            decision, chosen = decide(
                call=state.calls,
                messages=view,
                candidates=candidates,
                counter=counter,
                config=cfg,
                price=profile.price,
                ttl_seconds=profile.ttl_seconds,
                idle_seconds=idle,
                context_tokens=context,
                context_window=window,
                stub_tokens=lambda c: _stub_tokens(c, cfg.stub_keeps_chars if recall else 0),
                sizes=sizes,
                until_fold=_until_fold(state, candidates, keeps, cfg),
            )
            prune_decision = decision
            edits: list[Edit] = []
            if decision.apply and chosen:
                edits = self._stub_edits(thread, view, chosen, counter, recall=recall, store=store)
            remaining = context - (decision.removed_tokens if edits else 0)
            fold_reason = None
            keep_from: str | None = None
            start_key: str | None = None
            task_fold = (
                self._finished_task_fold(
                    state, rendered, counter, profile.price, sizes, cold=cold, keeps=keeps
                )
                if keeps is not None and cfg.fold_finished_tasks
                else None
            )
            cost_fold = (
                fold_estimate(view, counter, cfg, profile.price, state.calls, sizes=sizes)
                if keeps is not None and cfg.fold_by_cost and not edits and task_fold is None
                else None
            )
            cost_range = None
            if keeps is not None and cost_fold is not None:
                # The whole range would remove enough: the stretch the fold may take.
                cost_range = keeps.stretch(trigger=False)
                cost_fold = (
                    fold_estimate(
                        view,
                        counter,
                        cfg,
                        profile.price,
                        state.calls,
                        sizes=sizes,
                        begin=cost_range[0],
                        end=cost_range[1],
                    )
                    if cost_range is not None
                    else None
                )
            foldable = True
            if keeps is not None and remaining >= cfg.fold_trigger * window:
                fold_reason = "fold-trigger"
                trigger_range = keeps.stretch(trigger=True)
                foldable = trigger_range is not None
                if trigger_range is not None:
                    start_key, keep_from = keeps.keys(trigger_range)
            elif task_fold is not None:
                fold_reason = "finished-task-fold"
                keep_from, start_key, estimate, span = task_fold
                decision = estimate.decision(state.calls, fold_reason, context, span)
            elif (
                keeps is not None
                and cost_range is not None
                and cost_fold is not None
                and cost_fold.pays
            ):
                fold_reason = "cost-model-fold"
                decision = cost_fold.decision(state.calls, fold_reason, context, 0)
                start_key, keep_from = keeps.keys(cost_range)
            if fold_reason is not None:
                yield_to_foreground()
                folded = (
                    self._fold_edits(
                        thread=thread,
                        state=state,
                        canon_messages=canon_messages,
                        keys=keys,
                        pending=edits,
                        system=system,
                        counter=counter,
                        keep_from=keep_from,
                        start_key=start_key,
                        finished=fold_reason == "finished-task-fold",
                        recall=recall,
                        store=store,
                    )
                    if foldable
                    else []
                )
                edits += folded
                if not folded and fold_reason != "fold-trigger":
                    # No safe range after all: the record says what was done, not the plan.
                    decision = (
                        prune_decision
                        if prune_decision.apply
                        else prune_decision.model_copy(
                            update={"reason": f"{fold_reason}: no safe range to fold"}
                        )
                    )
                elif edits and not decision.apply:
                    decision = decision.model_copy(update={"apply": True, "reason": fold_reason})
            if edits:
                state.plan.epochs.append(
                    Epoch(index=len(state.plan.epochs), reason=decision.reason, edits=edits)
                )
                settle(state.plan, state.lifecycle, canon_messages, keys)  # state stays small
            if decision.apply or decision.candidates:
                state.decisions.append(decision)
                del state.decisions[:-_MAX_DECISIONS]
            if edits and store is None:
                logger.info(
                    "thread %s: maintenance at call %d (%s): %d edits",
                    thread_label(thread),
                    decision.call,
                    decision.reason,
                    len(edits),
                )
                return True, None
            return False, rendered
        except Exception:
            logger.log(
                logging.WARNING if store is None else logging.DEBUG,  # a prediction's: a guess
                "thread %s: maintenance skipped after an error",
                thread_label(thread),
                exc_info=True,
            )
            return False, None  # the plan may have changed half-way: render it afresh

    def _fold_edits(
        self,
        *,
        thread: str,
        state: PilotState,
        canon_messages: Sequence[Message],
        keys: Sequence[str],
        pending: Sequence[Edit],
        system: str | None,
        counter: TokenCounter,
        emergency: bool = False,
        keep_from: str | None = None,
        start_key: str | None = None,
        finished: bool = False,
        recall: bool = True,
        store: ArtifactStore | None = None,
    ) -> list[Edit]:
        """A fold of everything before the protected tail (or before the message keyed
        `keep_from`), from the task statement on (or from the message keyed `start_key`), as
        seen after `pending` edits; `finished`: the range is finished tasks (their summary
        stays small)."""
        trial = state.plan.model_copy(deep=True)
        if pending:
            trial.epochs.append(
                Epoch(index=len(trial.epochs), reason="pending", edits=list(pending))
            )
        args: dict[str, Any] = {
            "plan": trial,
            "store": self.store if store is None else store,
            "thread": thread,
            "summarizer": self._summarizer,
            "counter": counter,
            "epoch_index": len(state.plan.epochs),
            "system": system,
            "recall": recall,
        }
        if emergency:
            del args["system"]  # the emergency summary request is always standalone
            edit = emergency_fold(canon_messages, keys, **args)
        else:
            edit = plan_fold(
                canon_messages,
                keys,
                protect_tail_tokens=self.config.maintenance.fold_protect_tokens,
                summary_tokens=self.config.maintenance.fold_summary_tokens,
                # Finished tasks are not in use any more: their summary stays small.
                summary_share=0.0 if finished else self.config.maintenance.fold_summary_share,
                summary_max_tokens=self.config.maintenance.fold_summary_max_tokens,
                facts_share=self.config.maintenance.fold_facts_share,
                keep_from=keep_from,
                start_key=start_key,
                **args,
            )
        if edit is None:
            return []
        if finished:
            # Finished work is not in use (its summary keeps the least size): a pointer into
            # it stays a pointer (measured: restoring there cost more than it kept).
            return [edit]
        # A pointer kept after the range to a call the range takes gets its content back.
        return [edit, *restore_pointers(canon_messages, keys, edit)]

    def emergency_fold(
        self,
        system: str | None,
        messages: Sequence[Message],
        thread: str = "default",
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        recall: bool | None = None,
    ) -> bool:
        """Fold hard after a provider context-length error; call `prepare` again afterwards.

        Pass the same system prompt, transcript, tools and `recall` as to `prepare` (without
        recall the summary's header names no recall call). Returns True when a fold was added
        to the plan, False when nothing could be folded (or the fold failed, which is logged):
        the thread's state is untouched then.
        """
        check_pilot_thread(thread)
        check_request(system, messages, tools)
        state = self.state(thread)
        with foreground(), self._lock:  # a precomputation steps aside meanwhile
            try:
                # A scratch copy: the real frozen values change only with an epoch.
                scratch = state.canonical.model_copy(deep=True)
                system, canon_messages, _ = self._canonical(
                    system, messages, self._with_recall(tools, recall), scratch
                )
                keys = self._trackers.setdefault(thread, KeyTracker()).keys(messages)
                counter = get_counter(self.config.encoding)
                edits = self._fold_edits(
                    thread=thread,
                    state=state,
                    canon_messages=canon_messages,
                    keys=keys,
                    pending=[],
                    system=system,
                    counter=counter,
                    emergency=True,
                    recall=self.config.recall_tool if recall is None else bool(recall),
                )
            except Exception:
                logger.warning(
                    "thread %s: emergency fold failed", thread_label(thread), exc_info=True
                )
                return False
            if not edits:
                return False
            state.plan.epochs.append(
                Epoch(index=len(state.plan.epochs), reason="context-length-error", edits=edits)
            )
            state.revision += 1
            logger.warning(
                "thread %s: emergency fold after a context-length error", thread_label(thread)
            )
            return True

    def _finished_task_fold(
        self,
        state: PilotState,
        rendered: PlanView,
        counter: TokenCounter,
        price: Price,
        sizes: Sequence[int],
        *,
        cold: bool = False,
        keeps: FoldKeeps | None = None,
    ) -> tuple[str, str | None, FoldEstimate, int] | None:
        """A fold of the latest run of finished tasks, when the cost model says it pays (or,
        on a cold cache, whenever it removes tokens: the rewrite is free then): (key of the
        first message kept after it, key of its first message or None for the task
        statement's end, the estimate, messages folded), else None.

        The run ends before the first task after it that the lifecycle does not mark
        evictable (the current one at the latest) and starts after the one before it (a
        tool-less exchange is never evictable: it stays in view), and after the conversation
        `keeps` holds in view. The current task is expected to run as long as the finished
        ones did on average, and no longer than until the cost model would fold the same
        messages on its own.
        """
        registry = state.lifecycle
        tasks = registry.tasks()
        evictable = [t.state is SegmentState.EVICTABLE for t in tasks]
        last = max((i for i, e in enumerate(evictable) if e), default=-1)
        if last < 0 or last + 1 >= len(tasks) or not tasks[last + 1].keys:
            return None
        first = last
        while first > 0 and evictable[first - 1]:
            first -= 1
        keep_from = tasks[last + 1].keys[0]
        start = fold_start(rendered.messages, rendered.folds)
        if first > 0:
            at = view_index(rendered, tasks[first].keys[0]) if tasks[first].keys else None
            if at is None:
                return None
            start = max(start, at)
        cut = cut_before(rendered, keep_from, start)
        if cut is None:
            return None
        if keeps is not None:
            start = max(start, keeps.begin(trigger=False, end=cut))
            if cut - start < MIN_FOLD_MESSAGES:
                return None
        start_key = None if start == keeps_start(rendered) else rendered.spans[start][0]
        cfg = self.config.maintenance
        expected = _expected_task_calls(registry, cfg.horizon)
        estimate = task_fold_estimate(
            sizes, start, cut, config=cfg, price=price, expected_calls=expected
        )
        # A cost-model fold due sooner takes the same messages: this fold gains only the
        # calls until then, less the re-miss that fold pays anyway (`maintenance.next_fold`).
        # It never makes a fold that does not pay over the task's horizon pay.
        nxt = (
            _next_cost_fold(
                state,
                rendered,
                sizes,
                keeps,
                cfg=cfg,
                price=price,
                counter=counter,
                start=start,
                cut=cut,
                # Within the calls the fold is priced over (the search is linear in them).
                limit=min(expected, cfg.max_expected_calls) - 1,
            )
            if estimate.pays and not cold
            else None
        )
        if nxt is not None:
            fold, begin = nxt
            # After this fold, the cost-model fold's range opens with its summary when both
            # ranges open alike, else still with the earlier summary that opens it now.
            prepaid = prepaid_remiss(
                sum(sizes[start:cut]),
                fold.folded_tokens,
                cfg,
                earlier=fold.earlier_tokens,
                takes_earlier=start == begin,
            )
            estimate = task_fold_estimate(
                sizes,
                start,
                cut,
                config=cfg,
                price=price,
                expected_calls=fold.calls,
                prepaid=prepaid,
            )
        pays = estimate.pays or (cold and estimate.removed_tokens > 0)
        return (keep_from, start_key, estimate, cut - start) if pays else None

    def _evictable(
        self,
        state: PilotState,
        messages: Sequence[Message],
        keys: Sequence[str],
        cache: ViewCache,
        *,
        force: bool = False,
    ) -> dict[str, str]:
        """Keys of tool results whose work unit the lifecycle marks evictable, with why.

        The lifecycle reads the transcript as ingested (not the view: stubs hide outputs) and
        is evaluated every `maintenance.every` calls (and whenever `force`).
        """
        registry = state.lifecycle
        every = self.config.maintenance.every
        applied = registry.update(messages, keys, self._estimator, every=every, force=force)
        # States move one step per evaluation (active -> completed -> evictable); a forced
        # evaluation settles them, so a free rewrite takes everything finished by now.
        for _ in range(2):
            if not (force and applied):
                break
            applied = registry.update(messages, keys, self._estimator, every=every, force=True)
        return cache.evictable(registry)

    def _stub_edits(
        self,
        thread: str,
        view: Sequence[Message],
        chosen: Sequence[Candidate],
        counter: TokenCounter,
        *,
        recall: bool = True,
        store: ArtifactStore | None = None,
    ) -> list[Edit]:
        """Archive each chosen result as it stands, then stub it (nothing is lost); without
        `recall` the stubs name no recall call."""
        archive = self.store if store is None else store
        texts: list[str] = []
        refs: list[str] = []
        stubbed: list[Candidate] = []
        arguments: list[Edit] = []
        for cand in chosen:
            message = view[cand.index]
            if cand.kind == "args":
                arguments.extend(
                    self._argument_edits(thread, message, cand, recall=recall, store=archive)
                )
                continue
            stubbed.append(cand)
            # Parts (images, reasoning) are archived whole, as the message's JSON.
            content = (
                message.content
                if isinstance(message.content, str)
                else json.dumps(message.to_dict(), ensure_ascii=False)
            )
            ref = archive.put(
                thread,
                content,
                meta={
                    "tool": message.name or "tool",
                    "call_id": message.tool_call_id,
                    "reason": "evicted" if cand.kind == "evict" else "pruned",
                    "source": f"call:{message.tool_call_id}",
                },
            )
            refs.append(ref)
            limit = self.config.maintenance.stub_keeps_chars
            keeps = output_values(message.text, limit) if limit and recall else []
            texts.append(
                stub_text(
                    cand.kind,
                    message,
                    cand.tokens,
                    ref,
                    cand.reason,
                    recall=recall,
                    keeps=keeps,
                    handles=host_handles(message.text),
                )
            )
        edits = build_edits(stubbed, texts, refs)
        if not arguments:
            return edits
        order = {c.key: c.index for c in chosen}
        return sorted([*edits, *arguments], key=lambda e: order.get(e.key, -1))

    def _argument_edits(
        self,
        thread: str,
        message: Message,
        cand: Candidate,
        *,
        recall: bool = True,
        store: ArtifactStore | None = None,
    ) -> list[Edit]:
        """Archive the arguments of the candidate's calls (each whole, and each long value on
        its own, which is what the preview names), then reduce them. A call whose values
        cannot all be archived keeps its arguments."""
        cfg = self.config.maintenance
        archive = self.store if store is None else store
        out: list[Edit] = []
        for call in message.tool_calls:
            if call.id not in cand.calls:
                continue
            reduced = argument_plan(call.arguments, cfg, recall=recall)
            if reduced is None:
                continue
            meta = {"tool": call.name, "call_id": call.id, "source": f"call:{call.id}:args"}
            try:
                whole = archive.put(thread, call.arguments, meta={**meta, "reason": "arguments"})
                stored = [
                    archive.put(thread, value, meta={**meta, "reason": "argument"})
                    for value, _ in reduced.values
                ]
            except Exception:
                # Call ids are the client's: DEBUG only.
                logger.warning(
                    "arguments of a tool call could not be archived; kept as they are",
                    exc_info=True,
                )
                logger.debug("thread %s: unarchived arguments of call %s", thread, call.id)
                continue
            if stored != [ref for _, ref in reduced.values]:
                logger.error("argument ref mismatch; the call's arguments are kept")
                logger.debug("thread %s: argument ref mismatch in call %s", thread, call.id)
                continue
            out.append(
                Edit(kind="args", key=cand.key, text=reduced.text, ref=whole, call_id=call.id)
            )
        return out

    async def amaintain(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        recall: bool | None = None,
    ) -> bool:
        """Async twin of `maintain` (a fold may call a model: run off the event loop)."""
        return await asyncio.to_thread(
            self.maintain, system, messages, tools, thread, now=now, recall=recall
        )


_FOLD_REASONS = frozenset({"cost-model-fold", "finished-task-fold", "fold-trigger"})


def _until_fold(
    state: PilotState,
    candidates: Sequence[Candidate],
    keeps: FoldKeeps | None,
    cfg: MaintenanceConfig,
) -> int | None:
    """Calls until a cost-model fold is expected to take every candidate anyway, or None (no
    such fold: folds by cost off, a candidate before where folds start, or too few folds seen
    to judge their pace)."""
    if keeps is None or not cfg.fold_by_cost or not candidates:
        return None
    # Candidates lie before the protected results, so a fold takes them unless they are
    # before where folds start (the task statement, the conversation kept in view).
    if any(c.index < keeps.start for c in candidates):
        return None
    # The record keeps the last `_MAX_DECISIONS`: below that it reaches back to call 0.
    complete = len(state.decisions) < _MAX_DECISIONS
    return calls_until_fold(_fold_calls(state), complete=complete, now=state.calls)


def _fold_calls(state: PilotState) -> list[int]:
    """The calls at which the thread's recorded folds were taken, in order."""
    return [d.call for d in state.decisions if d.apply and d.reason in _FOLD_REASONS]


def _next_cost_fold(
    state: PilotState,
    rendered: PlanView,
    sizes: Sequence[int],
    keeps: FoldKeeps | None,
    *,
    cfg: MaintenanceConfig,
    price: Price,
    counter: TokenCounter,
    start: int,
    cut: int,
    limit: int,
) -> tuple[NextFold, int] | None:
    """The cost-model fold expected to take the view messages `[start, cut)` by itself (see
    `maintenance.next_fold`) and the view index its range starts at, or None: folds by cost
    off, no range to fold, a range that does not hold them all (kept conversation between:
    it would not take them), or no such fold within `limit` calls."""
    if keeps is None or not cfg.fold_by_cost:
        return None
    stretch = keeps.stretch(trigger=False)
    if stretch is None or stretch[0] > start or stretch[1] < cut:
        return None
    begin, end = stretch
    # The thread's growth a call: the view after the latest fold's summary over the calls
    # since that fold (before any fold: after the task statement, over every call).
    last_summary = max((i for i, f in enumerate(rendered.folds) if f is not None), default=None)
    folds = _fold_calls(state)
    if last_summary is not None and folds:
        tokens, calls = sum(sizes[last_summary + 1 :]), state.calls - folds[-1]
    else:
        tokens, calls = sum(sizes[keeps.start :]), state.calls
    fold = calls_until_cost_fold(
        sum(sizes[begin:end]),
        sum(sizes[end:]),
        growth=tokens / max(1, calls),
        call=state.calls,
        config=cfg,
        price=price,
        limit=limit,
        earlier=earlier_summary_tokens(rendered.messages[begin], counter),
    )
    return None if fold is None else (fold, begin)


def _expected_task_calls(registry: LifecycleRegistry, horizon: float) -> int:
    """Calls the current task is expected to run from now: as long as the finished tasks ran
    on average, and at least `horizon` × the calls it has run so far."""
    total, finished = registry.finished_task_calls()
    current = registry.segments.get(registry.current_task or "")
    elapsed = registry.calls - current.created_at_call if current is not None else 0
    mean = total / finished if finished else 0.0
    return max(round(mean - elapsed), round(elapsed * horizon))


def _stub_tokens(candidate: Candidate, keeps_chars: int = 0) -> int:
    # A stub is about 30 tokens whatever it names (its exact text needs the ref), plus the
    # values it keeps (about 4 characters a token); reduced arguments were counted when the
    # candidate was found.
    if candidate.kind == "args":
        return candidate.kept_tokens
    return candidate.kept_tokens + keeps_chars // 4

"""Preparation: the request of one model call, and its cache breakpoints."""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from cachepilot.artifacts import ArtifactStore
from cachepilot.fold.ahead import AheadNote, DeferredPuts, ahead_context, predicted_next
from cachepilot.lifecycle import RuleEstimator
from cachepilot.maintenance.view_cache import ViewCache
from cachepilot.messages import KeyTracker, Message, message_keys
from cachepilot.pilot.base import check_pilot_thread, check_request
from cachepilot.pilot.breakpoints import advance_anchors, plan_breakpoints
from cachepilot.pilot.maintain import Maintenance
from cachepilot.pilot.state import PilotState
from cachepilot.plan.epochs import PlanView
from cachepilot.sim import Request, get_profile, render_request
from cachepilot.support.foreground import background_work, foreground, yield_to_foreground
from cachepilot.support.log_labels import thread_label
from cachepilot.tokens import TokenCounter, get_counter

__all__ = ["Preparation"]

logger = logging.getLogger(__name__)

_MAX_QUEUED = 64
"""Precomputations waiting for the worker at most (more are not queued: a guess is optional)."""


class Preparation(Maintenance):
    """Once per model call: canonicalize, apply the plan (a maintenance point when the
    scheduler says so), add `recall`, check pairing; and the cache breakpoints."""

    def prepare(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        maintain: bool = True,
        recall: bool | None = None,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Build the request of one model call: (system, messages, tools).

        Deterministic: the same transcript, state and `now` give a byte-identical request
        (`now` matters only for the cold-cache rule; pass the framework's request time to
        replay exactly, else the wall clock is used). Inputs are never mutated; unchanged
        messages are returned as the same objects, and the returned tool dicts are shared
        between calls: treat them as read-only. With `maintain=False` the scheduler is not
        asked (a graph whose maintenance node already called `maintain` for this call).
        `recall` says whether the recall tool is offered (default: `Config.recall_tool`); a
        plugin keeps it the same for the whole thread, so the tool list never changes.
        """
        check_pilot_thread(thread)
        check_request(system, messages, tools)
        state = self.state(thread)
        if self._compressor is not None:
            self._compressor.note_history(thread, messages)  # context for later compressions
        with foreground(), self._lock:  # a precomputation steps aside meanwhile
            # The recall tool joins before canonicalization: it is ordered and key-sorted like
            # every other tool, and part of the tool set from the first call on.
            in_tools = self._with_recall(tools, recall)
            offer = self.config.recall_tool if recall is None else bool(recall)
            request = self._canonical(system, messages, in_tools, state.canonical)
            keys = self._trackers.setdefault(thread, KeyTracker()).keys(messages)
            cache = self._views.setdefault(thread, ViewCache())
            clock = time.time() if now is None else now
            rendered = None
            if maintain:
                refreshed, rendered = self._schedule(
                    thread=thread,
                    state=state,
                    raw_system=system,
                    messages=messages,
                    in_tools=in_tools,
                    request=request,
                    keys=keys,
                    clock=clock,
                    recall=offer,
                )
                request = refreshed or request
            system, canon_messages, out_tools = request
            if maintain and self._ahead_enabled():
                self._ahead_notes.note(
                    thread,
                    system=system,
                    messages=messages,
                    canonical=canon_messages,
                    tools=out_tools,
                    recall=offer,
                )
            if rendered is None:  # no scheduler, or an epoch was appended: render (again)
                rendered = cache.render(canon_messages, state.plan, keys)
            view = rendered.messages
            issues, missing = self._pairing_issues(cache, view, thread)
            if missing:
                view = _with_missing(cache, rendered, missing)
            fingerprint = self._fingerprint(out_tools)
            changed = state.tools_fingerprint is not None and fingerprint != state.tools_fingerprint
            if changed and not self.config.canonicalize:  # the canonicalizer logs it otherwise
                logger.info(
                    "thread %s: tool set changed (the cached prefix breaks here)",
                    thread_label(thread),
                )
            state.tools_fingerprint = fingerprint
            state.calls += 1
            state.revision += 1
            state.last_request_time = clock
            self._used(thread, cache)
        if issues:
            logger.warning(
                "thread %s: the history breaks tool-call pairing (%d found); calls without a "
                "result get a synthetic error result in the request, anything else is sent as is",
                thread_label(thread),
                len(issues),
            )
            logger.debug("the pairing issues: %s", "; ".join(str(i) for i in issues[:3]))
        return system, view, out_tools

    async def aprepare(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        now: float | None = None,
        maintain: bool = True,
        recall: bool | None = None,
    ) -> tuple[str | None, list[Message], list[dict[str, Any]]]:
        """Async twin of `prepare`, run in a worker thread.

        A maintenance point may fold with the configured summarizer, which can call a model:
        running it off the event loop keeps the loop free (summarizers are called through
        their sync `summarize`).
        """
        return await asyncio.to_thread(
            self.prepare, system, messages, tools, thread, now=now, maintain=maintain, recall=recall
        )

    def precompute(self, thread: str = "default") -> bool:
        """Compute ahead what the thread's next maintenance point will most likely need.

        Call it off the request path (a worker thread, a background task) once a model call
        was prepared. It runs the next request's maintenance on a prediction of it (the
        history so far and a copy of its last exchange, on a scratch copy of the thread's
        state; nothing is archived, nothing of the state changes), and keeps the summary
        stages of a fold it decides (`cachepilot.fold.ahead`); the next request finds them
        only when it folds the very same range. The requests are the same bytes either way.

        Returns:
            True when the prediction was run; False when folds are off or computed on the
            request path (`MaintenanceConfig.fold_ahead`, a model summarizer or lifecycle
            estimator, which would be billed), or the thread has no prepared request in this
            process, or a later one was prepared since (it has moved on).
        """
        check_pilot_thread(thread)
        note = self._ahead_notes.get(thread)
        return note is not None and self._precompute(thread, note)

    def precompute_soon(self, thread: str = "default") -> Future[bool] | None:
        """`precompute` in the pilot's background worker (one at a time), without waiting
        for it: plugins and the proxy call it once a model call was prepared. A request of
        the thread prepared before the worker gets to it makes it a no-op. None when there
        is nothing to compute, or the worker's queue is full. Never raises (a failure is
        logged at DEBUG)."""
        check_pilot_thread(thread)
        note = self._ahead_notes.get(thread)
        if note is None or not self._ahead_enabled():
            return None
        with self._ahead_lock:
            if self._ahead_queued >= _MAX_QUEUED:
                return None
            if self._ahead_worker is None:
                self._ahead_worker = ThreadPoolExecutor(1, thread_name_prefix="cachepilot-ahead")
            self._ahead_queued += 1
            worker = self._ahead_worker

        def run() -> bool:
            try:
                with background_work():  # it waits while a request is being prepared
                    return self._precompute(thread, note)
            except Exception:
                logger.debug("a fold could not be computed ahead", exc_info=True)
                return False
            finally:
                with self._ahead_lock:
                    self._ahead_queued -= 1

        try:
            return worker.submit(run)
        except RuntimeError:  # the interpreter is shutting down
            with self._ahead_lock:
                self._ahead_queued -= 1
            return None

    @property
    def precomputations_pending(self) -> int:
        """Precomputations queued or running in the background worker (`precompute_soon`)."""
        with self._ahead_lock:
            return self._ahead_queued

    def _ahead_enabled(self) -> bool:
        cfg = self.config.maintenance
        # A model summarizer or lifecycle estimator would be billed for a guess.
        return (
            cfg.enabled
            and cfg.fold
            and cfg.fold_ahead
            and self._summarizer is None
            and isinstance(self._estimator, RuleEstimator)
        )

    def _precompute(self, thread: str, note: AheadNote) -> bool:
        if not self._ahead_enabled() or not self._ahead_notes.current(thread, note):
            return False
        messages, canonical = predicted_next(note.messages), predicted_next(note.canonical)
        if messages is None or canonical is None or len(messages) != len(canonical):
            return False
        with self._lock:
            state = self._states.get(thread)
            if state is None:
                return False
            # The only work under the pilot's lock: the state as it is stored, read back below
            # (a copy that shares nothing, at a fraction of a deep copy's time).
            saved = state.model_dump_json()
        scratch = type(state).model_validate_json(saved)
        yield_to_foreground()
        with ahead_context():
            self._maintain(
                thread=thread,
                state=scratch,
                messages=messages,
                canon_messages=canonical,
                keys=message_keys(messages),
                system=note.system,
                tools=note.tools,
                idle=0.0,  # the next request is expected to follow soon (a warm cache)
                recall=note.recall,
                cache=ViewCache(),
                store=cast(ArtifactStore, DeferredPuts()),
            )
        return True

    def cache_breakpoints(
        self,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        thread: str = "default",
        *,
        client: Sequence[int] = (),
        profile: str | None = None,
        hidden_prefix_tokens: int = 0,
    ) -> list[int]:
        """Where to add explicit cache marks (Anthropic `cache_control`) to a prepared request.

        Call it once per model call with the request `prepare` just returned. The marks go on
        the last message, on a bridge to the previous call's end when a wide turn would put
        it out of the provider's lookback window, on the stable anchor (the last message
        before the first one a maintenance point could rewrite, so a later rewrite still
        reads the prefix before it) and on the end of tools + system; see
        `cachepilot.pilot.breakpoints`. Deterministic: the anchor is kept in the thread's state.

        Args:
            system, messages, tools: the request as `prepare` returned it.
            thread: the scope.
            client: the caller's own marks, one entry per mark (message indices, -1 for a
                mark in tools + system; two marked system blocks are two entries): kept,
                and each counted against the provider's limit.
            profile: the provider profile whose rules apply (default: `Config.provider` when
                it is an explicit-breakpoint profile, else `anthropic`).
            hidden_prefix_tokens: tokens the provider puts before the tools that are not in
                the request (they count towards the minimum cacheable length).

        Returns:
            Message indices to mark (-1: the end of tools + system), sorted, none of them in
            `client`.
        """
        check_pilot_thread(thread)
        check_request(system, messages, tools)
        chosen = get_profile(profile or self.config.provider)
        if chosen.match != "breakpoints":
            chosen = get_profile("anthropic")
        stable = self.stable_anchors(messages, thread)
        rendered = render_request(
            Request(system=system, messages=messages, tools=tools),
            get_counter(self.config.encoding),
            hidden_prefix_tokens=hidden_prefix_tokens,
        )
        return plan_breakpoints(rendered, client, None, chosen, stable=stable)

    def stable_anchors(self, messages: Sequence[Message], thread: str = "default") -> list[int]:
        """The stable cache anchors of the view `prepare` just returned for `thread`
        (message indices, most important first; empty for any other list): the messages
        before the first one a maintenance point could rewrite. For callers that place the
        marks themselves (the proxy) with `cachepilot.pilot.breakpoints.plan_breakpoints`."""
        check_pilot_thread(thread)
        counter = get_counter(self.config.encoding)
        state = self.state(thread)
        with self._lock:
            return self._anchors(state, self._views.get(thread), messages, counter)

    def _anchors(
        self,
        state: PilotState,
        cache: ViewCache | None,
        messages: Sequence[Message],
        counter: TokenCounter,
    ) -> list[int]:
        """This call's stable anchors (view indices): the one in force before the call, then
        the one for the calls to come (the same message between maintenance points)."""
        view = cache.view if cache is not None else None
        if (
            cache is None
            or view is None
            or len(view.messages) != len(messages)
            or not all(map(operator.is_, view.messages, messages))
        ):
            return []  # not the view `prepare` returned
        first = cache.first_rewritable(state.plan, counter, self.config.maintenance)
        anchors, out = advance_anchors(state.anchors, state.calls, view.keys, first)
        if anchors is not state.anchors:
            state.anchors = anchors
            state.revision += 1
        return out


def _with_missing(
    cache: ViewCache, rendered: PlanView, missing: Sequence[tuple[int, Message]]
) -> list[Message]:
    """The view with the synthetic results inserted (the view cache is told, so the cache
    anchors of `cache_breakpoints` address the request as sent)."""
    messages, keys = list(rendered.messages), list(rendered.keys)
    for offset, (position, message) in enumerate(missing):
        messages.insert(position + offset, message)
        keys.insert(position + offset, f"missing:{message.tool_call_id}")
    cache.view = PlanView(messages, keys, [(k, k) for k in keys], [None] * len(keys))
    cache.forget_rewritable()  # positions moved
    return messages

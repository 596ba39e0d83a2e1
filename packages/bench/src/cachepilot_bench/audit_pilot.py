"""A `CachePilot` that reports each maintenance action and can leave one out.

The audit (`cachepilot_bench.audit`) replays a session twice per action: once as cachepilot
runs it, once with that action left out from the call it was taken on. This pilot is the
same policy with two additions, neither of which changes what it does when no action is left
out: it records every action it takes (its kind, the call, the messages it edits and the
saving the cost model predicted for it), and it honours one `Veto`.

What leaving an action out means, per kind (the rest of the policy runs as it would):

* `stub` (pruning) and `args` (argument reduction): the results (arguments) it edited are
  never edited by that kind from that call on.
* `evict` (lifecycle eviction): the results it evicted are never marked evictable from that
  call on (pruning may still take them, as it would without a lifecycle).
* `fold` (a fold the cost model chose) and `task-fold` (a fold of finished tasks): no fold of
  that kind from that call on. Every later fold of the kind would cover the same messages (a
  fold summarizes from the first folded message on), so this is the fold and its extensions.
  Folds forced by the context size (`fold-trigger`) are not a choice and still happen.
* `refresh` (the frozen volatile values refreshed at a maintenance point): no refresh from
  that call on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cachepilot.artifacts import ArtifactStore, InMemoryArtifactStore
from cachepilot.maintenance.policy import Candidate, rates
from cachepilot.maintenance.view_cache import ViewCache
from cachepilot.messages import Message
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.pilot.state import PilotState
from cachepilot.plan.epochs import PlanView
from cachepilot.sim import get_profile
from cachepilot.tokens import TokenCounter

__all__ = ["ACTION_KINDS", "ActionKind", "AuditPilot", "TakenAction", "Veto"]

ActionKind = Literal["stub", "evict", "args", "fold", "task-fold", "refresh"]
ACTION_KINDS: tuple[ActionKind, ...] = ("stub", "evict", "args", "fold", "task-fold", "refresh")
"""Every maintenance action kind the audit tells apart, in report order."""

_FORCED = frozenset({"fold-trigger"})
"""Epoch reasons that are not a choice: the context had to shrink."""


@dataclass(frozen=True, slots=True)
class Veto:
    """The action a counterfactual replay leaves out."""

    kind: ActionKind
    call: int
    """Ordinal of the model call the action was taken on (the pilot's call counter)."""
    keys: frozenset[str] = frozenset()
    """`stub`, `evict`, `args`: the keys of the messages it edited."""

    def active(self, kind: ActionKind, call: int) -> bool:
        """The veto applies to `kind` at `call`."""
        return kind == self.kind and call >= self.call


@dataclass(slots=True)
class TakenAction:
    """One maintenance action as the pilot took it."""

    kind: ActionKind
    call: int
    reason: str
    """The epoch's reason (`cost-model`, `cold-cache`, `fold-trigger`, …)."""
    keys: frozenset[str] = frozenset()
    edits: int = 0
    removed_tokens: int = 0
    """Tokens the cost model expected the action to remove from every later request."""
    remiss_tokens: int = 0
    """Tokens it expected to be billed again at the miss price once."""
    predicted_usd: float | None = None
    """Net saving the cost model predicted (saving over the expected remaining calls minus
    the re-miss; the re-miss is free on a cold cache); None where no model judged it (a
    forced fold, a refresh)."""

    @property
    def forced(self) -> bool:
        """Taken because the context had to shrink, not because it was expected to pay."""
        return self.reason in _FORCED


@dataclass(slots=True)
class _Pending:
    removed: int = 0
    first: int | None = None
    keys: set[str] = field(default_factory=set)
    view: Sequence[Message] = ()


class AuditPilot(CachePilot):
    """`CachePilot` recording its maintenance actions (`actions`) and honouring `veto`."""

    def __init__(self, config: Config, *, veto: Veto | None = None) -> None:
        super().__init__(config, store=InMemoryArtifactStore())
        self.veto = veto
        self.actions: list[TakenAction] = []
        self._pending: dict[str, _Pending] = {}

    def _ahead_enabled(self) -> bool:
        # Every maintenance run is audited (and the config swapped for vetoes): no scratch
        # runs of predicted requests in a background worker.
        return False

    def _vetoed(self, kind: ActionKind, thread: str) -> bool:
        return self.veto is not None and self.veto.active(kind, self.state(thread).calls)

    def _maintain(self, *, thread: str, state: PilotState, **kwargs: Any) -> tuple[bool, Any]:
        epochs = len(state.plan.epochs)
        # The decision log is capped (old records drop off): compare the last record itself.
        last = state.decisions[-1] if state.decisions else None
        self._pending = {}
        original = self.config
        off: dict[str, bool] = {}
        if self._vetoed("fold", thread):
            off["fold_by_cost"] = False
        if self._vetoed("task-fold", thread):
            off["fold_finished_tasks"] = False
        if off:
            self.config = original.model_copy(
                update={"maintenance": original.maintenance.model_copy(update=off)}
            )
        try:
            appended, rendered = super()._maintain(thread=thread, state=state, **kwargs)
        finally:
            self.config = original
        if appended and len(state.plan.epochs) > epochs:
            decision = (
                state.decisions[-1] if state.decisions and state.decisions[-1] is not last else None
            )
            self._record(state, state.plan.epochs[-1].reason, decision)
        return appended, rendered

    def _record(self, state: PilotState, reason: str, decision: Any) -> None:
        """The actions of the epoch just appended, one per kind."""
        epoch = state.plan.epochs[-1]
        call = state.calls
        counts: dict[str, int] = {}
        for edit in epoch.edits:
            counts[edit.kind] = counts.get(edit.kind, 0) + 1
        cfg = self.config.maintenance
        rate = rates(cfg, get_profile(self.config.provider).price, call)
        counter = self._counter()
        edited: tuple[ActionKind, ...] = ("stub", "evict", "args")
        for kind in edited:
            pending = self._pending.get(kind)
            if not counts.get(kind) or pending is None or pending.first is None:
                continue
            remiss = sum(counter.count_message(m) for m in pending.view[pending.first :])
            cost = 0.0 if reason == "cold-cache" else remiss * rate.remiss_per_token
            self.actions.append(
                TakenAction(
                    kind=kind,
                    call=call,
                    reason=reason,
                    keys=frozenset(pending.keys),
                    edits=counts[kind],
                    removed_tokens=pending.removed,
                    remiss_tokens=remiss,
                    predicted_usd=None
                    if reason in _FORCED
                    else pending.removed * rate.saving_per_token - cost,
                )
            )
        if counts.get("fold"):
            fold: ActionKind = "task-fold" if reason == "finished-task-fold" else "fold"
            predicted = None
            removed = remiss = 0
            if decision is not None and reason not in _FORCED:
                removed, remiss = decision.removed_tokens, decision.remiss_tokens
                cost = 0.0 if reason == "cold-cache" else decision.cost_usd
                predicted = decision.saving_usd - cost
            self.actions.append(
                TakenAction(
                    kind=fold,
                    call=call,
                    reason=reason,
                    edits=counts["fold"],
                    removed_tokens=removed,
                    remiss_tokens=remiss,
                    predicted_usd=predicted,
                )
            )

    def _counter(self) -> TokenCounter:
        from cachepilot.tokens import get_counter

        return get_counter(self.config.encoding)

    def _stub_edits(
        self,
        thread: str,
        view: Sequence[Message],
        chosen: Sequence[Candidate],
        counter: TokenCounter,
        *,
        recall: bool = True,
        store: ArtifactStore | None = None,
    ) -> list[Any]:
        kept: list[Candidate] = []
        for cand in chosen:
            if cand.kind in ("stub", "args") and self._vetoed(cand.kind, thread):
                assert self.veto is not None
                if cand.key in self.veto.keys:
                    continue
            kept.append(cand)
        keeps_chars = self.config.maintenance.stub_keeps_chars if recall else 0
        for cand in kept:
            pending = self._pending.setdefault(cand.kind, _Pending(view=view))
            after = cand.kept_tokens if cand.kind == "args" else cand.kept_tokens + keeps_chars // 4
            pending.removed += max(0, cand.tokens - after)
            pending.keys.add(cand.key)
            pending.first = cand.index if pending.first is None else min(pending.first, cand.index)
        return super()._stub_edits(thread, view, kept, counter, recall=recall, store=store)

    def _evictable(
        self,
        state: PilotState,
        messages: Sequence[Message],
        keys: Sequence[str],
        cache: ViewCache,
        *,
        force: bool = False,
    ) -> dict[str, str]:
        found = super()._evictable(state, messages, keys, cache, force=force)
        if self.veto is None or not self.veto.active("evict", state.calls):
            return found
        return {k: v for k, v in found.items() if k not in self.veto.keys}

    def _schedule(
        self,
        *,
        thread: str,
        state: PilotState,
        request: tuple[str | None, list[Message], list[dict[str, Any]]],
        **kwargs: Any,
    ) -> tuple[tuple[str | None, list[Message], list[dict[str, Any]]] | None, PlanView | None]:
        before = state.canonical.model_copy(deep=True)
        refreshed, rendered = super()._schedule(
            thread=thread, state=state, request=request, **kwargs
        )
        if refreshed is None or _same_request(refreshed, request):
            return refreshed, rendered
        if self._vetoed("refresh", thread):
            # The epoch stays; the frozen values stay as they were before it.
            state.canonical = before
            return request, None
        self.actions.append(
            TakenAction(kind="refresh", call=state.calls, reason="maintenance point", edits=1)
        )
        return refreshed, rendered


def _same_request(
    a: tuple[str | None, Sequence[Message], Sequence[Mapping[str, Any]]],
    b: tuple[str | None, Sequence[Message], Sequence[Mapping[str, Any]]],
) -> bool:
    if a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    return all(x is y or x == y for x, y in zip(a[1], b[1], strict=True)) and list(a[2]) == list(
        b[2]
    )

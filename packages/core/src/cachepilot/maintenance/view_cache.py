"""`ViewCache`: one thread's memory of its last view, so that a model call costs O(new
messages). Never persisted: `PilotState` stays the truth."""

from __future__ import annotations

from collections.abc import Sequence

from cachepilot.lifecycle import LifecycleRegistry
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, PairingIssue, PairingScanner
from cachepilot.plan.epochs import Epoch, Plan, PlanRenderer, PlanView
from cachepilot.tokens import TokenCounter

__all__ = ["ViewCache"]


class ViewCache:
    """One thread's memory of its last view, so that a call costs O(new messages).

    Holds the incremental renderer, each view message's token count (with their sum), the
    pairing scan of the view so far, and the plan's edited keys and the lifecycle's
    evictable results as of their last change. Everything is rebuilt whenever the render was
    not an extension of the previous one. Never persisted: `PilotState` stays the truth.
    """

    def __init__(self) -> None:
        self.renderer = PlanRenderer()
        self._sized: list[Message] = []
        """The view messages `_sizes` counts (held, so their ids stay theirs)."""
        self._sizes: list[int] = []
        self._total = 0
        self._counter: TokenCounter | None = None
        self._stale: tuple[list[Message], list[int]] | None = None
        """The previous view's messages and sizes after a full render, for the messages the
        new view shares with it."""
        self._pairing = PairingScanner()
        self._edited_plan: Plan | None = None
        self._edited_epochs: list[Epoch] = []
        self._edited_counts: list[int] = []
        self._edited: set[str] = set()
        self._registry: LifecycleRegistry | None = None
        self._transitions = -1
        self._evictable: dict[str, str] = {}
        self.view: PlanView | None = None
        """The last rendered view."""
        self._rewritable: int | None = None
        self._rewritable_scanned = 0
        self._chars = 0
        self._count = 0

    @property
    def approx_bytes(self) -> int:
        """What the cache holds, roughly: the renderer's copies of the transcript and view
        (their text, counted as each message joins them), plus per-message overhead."""
        return self._chars + 256 * self._count

    def render(self, messages: Sequence[Message], plan: Plan, keys: Sequence[str]) -> PlanView:
        """`render_plan(messages, plan, keys)`, extending the previous view when it can."""
        view = self.renderer.render(messages, plan, keys)
        extended = self.renderer.extended_from
        # Each message is held twice (the transcript and the view); what the view shares
        # with the previous one is counted once, so the count stays O(new messages).
        fresh = view.messages if extended is None else view.messages[extended:]
        added = sum(_chars(m) for m in fresh)
        if extended is None:
            self._chars, self._count = 2 * added, 2 * len(fresh)
        else:
            self._chars += 2 * added
            self._count += 2 * len(fresh)
        if extended is None:
            if self._sizes:
                self._stale = (self._sized, self._sizes)
            self._sized, self._sizes, self._total = [], [], 0
            self._pairing = PairingScanner()
            self._rewritable, self._rewritable_scanned = None, 0
        self.view = view
        return view

    def forget_rewritable(self) -> None:
        """Scan for the first rewritable message again (positions in the view moved)."""
        self._rewritable, self._rewritable_scanned = None, 0

    def first_rewritable(
        self, plan: Plan, counter: TokenCounter, config: MaintenanceConfig
    ) -> int | None:
        """Index in the last view of the first message a maintenance point could rewrite: a
        tool result not edited yet and large enough to stub, or an assistant message with
        long arguments not reduced yet. Scans new messages only until one is found."""
        view = self.view
        if view is None:
            return None
        if self._rewritable is None:
            edited = self.edited_keys(plan)
            start = self._rewritable_scanned
            for index in range(start, len(view.messages)):
                message, key = view.messages[index], view.keys[index]
                if key in edited:
                    continue
                if message.role == "tool":
                    found = counter.count_message(message) >= config.min_result_tokens
                else:
                    found = config.reduce_arguments and any(
                        len(c.arguments) > config.argument_min_chars for c in message.tool_calls
                    )
                if found:
                    self._rewritable = index
                    break
            self._rewritable_scanned = len(view.messages)
        return self._rewritable

    def sizes(self, view: Sequence[Message], counter: TokenCounter) -> tuple[list[int], int]:
        """Tokens of each message of the last rendered `view`, and their sum (read-only)."""
        if counter is not self._counter:
            self._sized, self._sizes, self._total = [], [], 0
            self._stale, self._counter = None, counter
        known = len(self._sizes)
        if known < len(view):
            fresh = view[known:]
            stale, self._stale = self._stale, None
            if stale is not None:
                # After an epoch most of the view is the same objects: reuse their sizes
                # (`stale` holds those objects, so an id found here is still theirs).
                old = dict(zip(map(id, stale[0]), stale[1], strict=True))
                new = [old.get(id(m), -1) for m in fresh]
                for i, size in enumerate(new):
                    if size < 0:
                        new[i] = counter.count_message(fresh[i])
            else:
                new = [counter.count_message(m) for m in fresh]
            self._sized.extend(fresh)
            self._sizes.extend(new)
            self._total += sum(new)
        return self._sizes, self._total

    def pairing_issues(self, view: Sequence[Message]) -> list[PairingIssue]:
        """`pairing_issues(view)` of the last rendered `view`, scanning its new part only."""
        try:
            self._pairing.feed(view[self._pairing.fed :])
        except Exception:
            self._pairing = PairingScanner()  # half-fed: start over next time
            raise
        return self._pairing.issues(allow_pending_tail=True)

    def edited_keys(self, plan: Plan) -> set[str]:
        """`plan.edited_keys()` (read-only); appended epochs add their keys only."""
        known = len(self._edited_epochs)
        if (
            plan is not self._edited_plan
            or len(plan.epochs) < known
            or (known and plan.epochs[known - 1] is not self._edited_epochs[-1])
            or (known and len(plan.epochs[known - 1].edits) != self._edited_counts[-1])
        ):
            self._edited_plan, self._edited_epochs, self._edited_counts = plan, [], []
            self._edited = set()
        for epoch in plan.epochs[len(self._edited_epochs) :]:
            self._edited |= epoch.edited_keys()
            self._edited_epochs.append(epoch)
            self._edited_counts.append(len(epoch.edits))
        return self._edited

    def evictable(self, registry: LifecycleRegistry) -> dict[str, str]:
        """Keys of evictable tool results with why (read-only), kept until a transition."""
        if registry is not self._registry or registry.transitions != self._transitions:
            out: dict[str, str] = {}
            for unit in registry.evictable():
                why = (unit.reason or "finished work")[:60]
                for key in unit.keys:
                    out[key] = why
            self._evictable = out
            self._registry, self._transitions = registry, registry.transitions
        return self._evictable


def _chars(message: Message) -> int:
    """Characters of a message's text and tool-call arguments."""
    return len(message.text) + sum(len(c.arguments) for c in message.tool_calls)

"""Where the pilot's folds begin and end: the conversation they keep in view, the range
before the protected tail (see `cachepilot.fold.keep`)."""

from __future__ import annotations

from collections.abc import Sequence

from cachepilot.fold import fold_start, safe_cut
from cachepilot.fold.cut import straddled
from cachepilot.fold.keep import fold_begin, fold_stretches
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.plan.epochs import PlanView
from cachepilot.tokens import TokenCounter

__all__ = ["FoldKeeps", "keeps_start", "view_index"]


def keeps_start(rendered: PlanView) -> int:
    """Where a fold starts by default: after the leading system messages and the task
    statement (an earlier summary there starts a differential fold)."""
    return fold_start(rendered.messages, rendered.folds)


def view_index(rendered: PlanView, key: str) -> int | None:
    """The view index of the message with transcript key `key`, or None when no view
    message starts with it (e.g. it is inside a fold)."""
    return next((i for i, span in enumerate(rendered.spans) if span[0] == key), None)


class FoldKeeps:
    """Where folds begin to keep the conversation in view (see `cachepilot.fold.keep`)."""

    def __init__(
        self,
        rendered: PlanView,
        sizes: Sequence[int],
        cfg: MaintenanceConfig,
        counter: TokenCounter,
        *,
        recall: bool,
    ) -> None:
        self._rendered = rendered
        self._sizes = sizes
        self._cfg = cfg
        self._counter = counter
        self._recall = recall
        self.start = keeps_start(rendered)
        self._cut: int | None = -1  # not computed yet

    def _natural(self) -> int | None:
        """The cut before the protected tail (None: nothing to fold)."""
        if self._cut == -1:
            view = self._rendered
            start = self.start
            if start < len(view.messages) and (
                view.messages[start].role == "tool" or straddled(view.messages)[start]
            ):
                self._cut = None  # unpaired history at the start: no fold (plan_fold says so)
                return None
            self._cut = safe_cut(
                view.messages,
                view.keys,
                protect_tail_tokens=self._cfg.fold_protect_tokens,
                counter=self._counter,
                start=self.start,
            )
        return self._cut

    def _takes_all(self, trigger: bool) -> bool:
        # The fold past the trigger takes conversation too where the model can recall it.
        return self._recall and (trigger or self._cfg.fold_conversation)

    def begin(self, *, trigger: bool, end: int) -> int:
        """The view index a fold ending at `end` begins at (after the last message it keeps
        in view)."""
        if self._takes_all(trigger):
            return self.start
        view = self._rendered
        return fold_begin(
            view.messages,
            self.start,
            end,
            sizes=self._sizes,
            strict=not self._recall,
            message_tokens=self._cfg.conversation_tokens,
            folds=view.folds,
        )

    def stretch(self, *, trigger: bool) -> tuple[int, int] | None:
        """The range a fold before the protected tail takes: the largest stretch (in tokens;
        the latest of equals) between the messages it keeps in view, or None."""
        natural = self._natural()
        if natural is None:
            return None
        if self._takes_all(trigger):
            return self.start, natural
        view = self._rendered
        stretches = fold_stretches(
            view.messages,
            self.start,
            natural,
            sizes=self._sizes,
            strict=not self._recall,
            message_tokens=self._cfg.conversation_tokens,
            folds=view.folds,
        )
        if not stretches:
            return None
        return max(reversed(stretches), key=lambda r: sum(self._sizes[r[0] : r[1]]))

    def keys(self, stretch: tuple[int, int]) -> tuple[str | None, str | None]:
        """(`start_key`, `keep_from`) of a fold of `stretch` (None: the default start, the
        cut before the protected tail)."""
        begin, end = stretch
        spans = self._rendered.spans
        start_key = spans[begin][0] if begin > self.start else None
        keep_from = spans[end][0] if end != self._natural() and end < len(spans) else None
        return start_key, keep_from

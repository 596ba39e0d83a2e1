"""`PilotInputFilter`: the `call_model_input_filter` that shows the model the pilot's view.

The SDK hands the filter the model input it built from the run's items (plain: tool outputs as
the tools returned them, as guardrails let them through). The filter returns the view: each
tool result as its reduced view, the plan's stubs and folds, volatile values out of the
instructions. It never mutates its input and changes nothing the run keeps. The user's own
filter runs first; what it returns is checked the way the SDK checks a filter's result.

The thread of a call is, first match: the run config's pinned thread or session; the
`CachePilotSession` this run reads; the run config's `group_id`; the plugin's `default_thread`
when one was given; else a scope of the run's own, dropped when the run ends.

A session that compacts its own history (`OpenAIResponsesCompactionSession`) checks that the
model read exactly its history before it compacts; its calls pass through unchanged.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agents import Agent, RunConfig
from agents.exceptions import UserError
from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData

from cachepilot_agents._context import PREPARED, SESSION_BINDING, next_stamp
from cachepilot_agents.runs import current_run
from cachepilot_agents.session import compacts_itself, session_thread

if TYPE_CHECKING:
    from agents.memory import Session

__all__ = ["FilterOwner", "PilotInputFilter", "Scope"]

logger = logging.getLogger(__name__)


class FilterOwner(Protocol):
    """What the filter asks of the plugin it belongs to (`CachePilotAgents` is one)."""

    @property
    def fixed_default_thread(self) -> str | None:
        """The thread given for runs without one, or None."""
        ...

    def run_scope(self, run: object) -> str:
        """The scope of a run with no thread of its own."""
        ...

    async def attach_session(self, thread: str, session: Session) -> None:
        """Keep `thread`'s state beside `session`."""
        ...

    async def filter_input(
        self, model_data: ModelInputData, agent: Agent[Any], thread: str, source: Any
    ) -> ModelInputData:
        """The pilot's view of one call's input (`source`: the filter asking)."""
        ...


class PilotInputFilter:
    """The `call_model_input_filter` of a `CachePilotAgents` run config (see the module doc).

    Args:
        owner: the plugin.
        user_filter: the user's own filter (runs first), or None.
        thread: a pinned thread, or None.
        session: a session whose id is the thread (read at call time: ids may be created
            lazily), or None.
    """

    def __init__(
        self,
        owner: FilterOwner,
        user_filter: CallModelInputFilter | None,
        thread: str | None,
        session: Session | None = None,
    ) -> None:
        self.owner = owner
        self.user_filter = user_filter
        self.pinned_thread = thread
        self.session = session
        self.run_config: RunConfig | None = None
        self._stamp = next_stamp()
        self._own_scope: str | None = None

    def __copy__(self) -> PilotInputFilter:
        return self  # bound to its plugin and run config: copies of a config share it

    def __deepcopy__(self, memo: dict[int, Any]) -> PilotInputFilter:
        return self

    def thread(self) -> Scope:
        """The thread of the current call (see the module docstring for the rule)."""
        if self.pinned_thread is not None:
            return Scope(self.pinned_thread)
        if self.session is not None:
            found = session_thread(self.session)
            if found is not None:
                return Scope(found, session=True, compacting=compacts_itself(self.session))
        run = current_run()
        binding = SESSION_BINDING.get()
        if binding is not None and binding.owner == id(self.owner):
            same_run = (
                binding.run == id(run)
                if run is not None and binding.run is not None
                else binding.stamp > self._stamp
            )
            if same_run:
                return Scope(binding.thread, session=True, compacting=binding.compacting)
        group = self.run_config.group_id if self.run_config is not None else None
        if isinstance(group, str) and group.strip():
            return Scope(group.strip())
        if self.owner.fixed_default_thread is not None:
            return Scope(self.owner.fixed_default_thread)
        if run is not None:
            return Scope(self.owner.run_scope(run))
        if self._own_scope is None:  # the SDK gives no run object: one scope per run config
            self._own_scope = f"run-{uuid.uuid4().hex[:16]}"
            logger.warning(
                "this Agents SDK version does not say which run is executing: runs without a "
                "session, group_id or thread share the scope of their run config"
            )
        return Scope(self._own_scope)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Filter one model call's input."""
        if self.user_filter is not None:
            result = self.user_filter(data)
            updated = await result if inspect.isawaitable(result) else result
            if not isinstance(updated, ModelInputData):
                # The SDK's own check and message, as without cachepilot.
                raise UserError("call_model_input_filter must return a ModelInputData instance")
            data = CallModelData(model_data=updated, agent=data.agent, context=data.context)
        scope = self.thread()
        if scope.compacting:
            # The session compacts its own history and checks that the model read exactly
            # that history: its calls are the SDK's own.
            PREPARED.set(None)
            return ModelInputData(
                input=list(data.model_data.input), instructions=data.model_data.instructions
            )
        if scope.session and self.session is not None:
            await self.owner.attach_session(scope.thread, self.session)
        return await self.owner.filter_input(data.model_data, data.agent, scope.thread, self)


@dataclass(frozen=True, slots=True)
class Scope:
    """The thread of a call and what kind of thread it is."""

    thread: str
    session: bool = False
    """The thread is a session's (its state is persisted beside it)."""
    compacting: bool = False
    """The session compacts its own history."""

"""`CachePilotSession`: any Agents SDK `Session`, plus the thread's `PilotState`.

The history stays in the wrapped session exactly as the SDK writes it (tool outputs already
reduced at ingestion); the pilot's state (maintenance plan, frozen volatile values, counters,
time of the last call) is kept beside it in a companion `StateStore`, never as items. A new
process that opens the same session rebuilds the same view; when the provider cache went cold
in between (idle longer than its TTL), the first call of the resumed session is a free
maintenance point and prunes once.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings

from cachepilot_agents._context import SESSION_BINDING, SessionBinding, next_stamp

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

    from cachepilot_agents.plugin import CachePilotAgents
    from cachepilot_agents.state import StateStore

__all__ = ["CachePilotSession"]

logger = logging.getLogger(__name__)


def _accepts_wrapper(method: Any) -> bool:
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "wrapper" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params
    )


class CachePilotSession:
    """A `Session` that delegates history to `inner` and keeps the pilot state beside it.

    Made by `CachePilotAgents.session(inner)`. Its `session_id` is the inner one and is the
    pilot's thread id. Attributes it does not define (e.g. `close`, `run_compaction`) are the
    inner session's.
    """

    def __init__(self, owner: CachePilotAgents, inner: Session, store: StateStore) -> None:
        session_id = getattr(inner, "session_id", None)
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValueError("the wrapped session needs a non-empty string session_id")
        self._owner = owner
        self.inner = inner
        self.store = store
        self.session_id: str = session_id

    @property
    def session_settings(self) -> SessionSettings | None:
        """The inner session's settings."""
        return getattr(self.inner, "session_settings", None)

    @session_settings.setter
    def session_settings(self, value: SessionSettings | None) -> None:
        self.inner.session_settings = value

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class does not define.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _bind(self) -> None:
        SESSION_BINDING.set(SessionBinding(id(self._owner), self.session_id, next_stamp()))

    async def _call(self, method_name: str, *args: Any, wrapper: Any = None, **kw: Any) -> Any:
        method = getattr(self.inner, method_name)
        if wrapper is not None and _accepts_wrapper(method):
            kw["wrapper"] = wrapper
        result = method(*args, **kw)
        if inspect.isawaitable(result):
            return await result
        return result

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The inner history; binds this run to the session's thread and loads its state."""
        self._bind()
        await self._owner.attach(self.session_id, self.store)
        items: list[TResponseInputItem] = await self._call("get_items", limit, wrapper=wrapper)
        return items

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append to the inner history, then save the pilot state."""
        self._bind()
        await self._owner.attach(self.session_id, self.store)
        await self._call("add_items", items, wrapper=wrapper)
        await self._owner.save_state(self.session_id)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Pop from the inner history (plan edits of a popped item simply stop applying)."""
        item: TResponseInputItem | None = await self._call("pop_item", wrapper=wrapper)
        return item

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Clear the inner history and forget the thread's pilot state."""
        await self._call("clear_session", wrapper=wrapper)
        await self._owner.forget(self.session_id, self.store)

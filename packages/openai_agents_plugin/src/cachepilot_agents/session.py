"""`CachePilotSession`: any Agents SDK `Session`, plus the thread's `PilotState` beside it.

Items pass through untouched in both directions: the history is exactly what the plain SDK
writes and reads. The proxy only notes, whenever the SDK reads or writes the session, that the
current run belongs to the session's thread, loads that thread's state once per process, and
saves it after writes. The pilot's state (maintenance plan, frozen volatile values, counters,
time of the last call) lives in a companion `StateStore`, never as items.

The SDK treats some sessions by their class (an `OpenAIConversationsSession` keeps server item
ids, for one); the proxy reports the inner session's class, so `isinstance` checks see the
session the user built and the SDK behaves as without cachepilot. A session whose id is
created lazily (a new OpenAI conversation) is read only after the SDK initialized it.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any, Protocol

from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings

from cachepilot_agents._context import SESSION_BINDING, SessionBinding, next_stamp
from cachepilot_agents.runs import current_run

if TYPE_CHECKING:
    from agents.run_context import RunContextWrapper

    from cachepilot_agents.state import StateStore

__all__ = [
    "CachePilotSession",
    "ContextAwareSession",
    "SessionOwner",
    "compacts_itself",
    "session_proxy",
    "session_thread",
]

logger = logging.getLogger(__name__)


class SessionOwner(Protocol):
    """What a session proxy asks of the plugin it belongs to (`CachePilotAgents` is one)."""

    async def attach(self, thread: str, store: StateStore) -> None:
        """Keep `thread`'s state in `store`; load it once."""
        ...

    async def save_state(self, thread: str) -> None:
        """Save `thread`'s state to its store."""
        ...

    async def forget(self, thread: str, store: StateStore) -> None:
        """Drop `thread`'s state (live and saved)."""
        ...


def _context_aware(session: object) -> bool:
    """Whether the SDK hands `session` its run context: every history method takes `wrapper`
    by keyword (the opt-in the SDK's `Session` protocol documents)."""
    for name in ("get_items", "add_items", "pop_item", "clear_session"):
        try:
            params = inspect.signature(getattr(session, name)).parameters.values()
        except Exception:
            return False
        if not any(
            p.name == "wrapper" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            for p in params
        ):
            return False
    return True


def compacts_itself(session: object) -> bool:
    """Whether `session` compacts its own history (`run_compaction`, e.g.
    `OpenAIResponsesCompactionSession`): it checks that the model read exactly its history,
    so the plugin leaves such a session's calls alone."""
    try:
        return callable(getattr(session, "run_compaction", None))
    except Exception:
        return False


def session_thread(session: object) -> str | None:
    """The thread of a session: its non-empty string `session_id`, None when not (yet) known."""
    try:
        session_id = getattr(session, "session_id", None)
    except ValueError:  # created lazily: not initialized yet
        return None
    if isinstance(session_id, str) and session_id.strip():
        return session_id
    return None


class CachePilotSession:
    """A `Session` that delegates everything to `inner` and keeps the pilot state beside it.

    Made by `CachePilotAgents.session(inner)`. Attributes it does not define (e.g. `close`,
    `run_compaction`) are the inner session's, and it reports the inner session's class.
    """

    def __init__(self, owner: SessionOwner, inner: Session, store: StateStore) -> None:
        self._owner = owner
        self.inner = inner
        self.store = store

    # The SDK adapts its behaviour to some session classes: report the inner one.
    @property  # type: ignore[misc]
    def __class__(self) -> type[Any]:
        return type(self.inner)

    @property
    def session_id(self) -> str:
        """The inner session's id (the pilot thread)."""
        session_id: str = self.inner.session_id
        return session_id

    @session_id.setter
    def session_id(self, value: str) -> None:
        self.inner.session_id = value

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

    async def _bind(self) -> None:
        thread = session_thread(self.inner)
        if thread is None:
            return
        run = current_run()
        SESSION_BINDING.set(
            SessionBinding(
                id(self._owner),
                thread,
                next_stamp(),
                None if run is None else id(run),
                compacting=compacts_itself(self.inner),
            )
        )
        await self._owner.attach(thread, self.store)

    async def _call(self, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Exactly the call the SDK made: the same arguments, in the same shape.
        result = getattr(self.inner, method_name)(*args, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    async def get_items(self, *args: Any, **kwargs: Any) -> list[TResponseInputItem]:
        """The inner history, unchanged; binds this run to the session's thread."""
        items: list[TResponseInputItem] = await self._call("get_items", args, kwargs)
        await self._bind()
        return items

    async def add_items(self, *args: Any, **kwargs: Any) -> None:
        """Append to the inner history (items unchanged), then save the pilot state."""
        await self._call("add_items", args, kwargs)
        await self._bind()
        thread = session_thread(self.inner)
        if thread is not None:
            await self._owner.save_state(thread)

    async def pop_item(self, *args: Any, **kwargs: Any) -> TResponseInputItem | None:
        """Pop from the inner history (plan edits of a popped item simply stop applying)."""
        item: TResponseInputItem | None = await self._call("pop_item", args, kwargs)
        return item

    async def clear_session(self, *args: Any, **kwargs: Any) -> None:
        """Clear the inner history and forget the thread's pilot state."""
        thread = session_thread(self.inner)
        await self._call("clear_session", args, kwargs)
        if thread is not None:
            await self._owner.forget(thread, self.store)


class ContextAwareSession(CachePilotSession):
    """The proxy of a session that takes the run context (`wrapper`) in its history methods.

    The SDK passes `wrapper` only to sessions whose every history method names it, so the
    proxy names it exactly when the inner session does.
    """

    async def get_items(
        self, *args: Any, wrapper: RunContextWrapper[Any] | None = None, **kwargs: Any
    ) -> list[TResponseInputItem]:
        """See `CachePilotSession.get_items`."""
        return await super().get_items(*args, wrapper=wrapper, **kwargs)

    async def add_items(
        self, *args: Any, wrapper: RunContextWrapper[Any] | None = None, **kwargs: Any
    ) -> None:
        """See `CachePilotSession.add_items`."""
        await super().add_items(*args, wrapper=wrapper, **kwargs)

    async def pop_item(
        self, *args: Any, wrapper: RunContextWrapper[Any] | None = None, **kwargs: Any
    ) -> TResponseInputItem | None:
        """See `CachePilotSession.pop_item`."""
        return await super().pop_item(*args, wrapper=wrapper, **kwargs)

    async def clear_session(
        self, *args: Any, wrapper: RunContextWrapper[Any] | None = None, **kwargs: Any
    ) -> None:
        """See `CachePilotSession.clear_session`."""
        await super().clear_session(*args, wrapper=wrapper, **kwargs)


def session_proxy(owner: SessionOwner, inner: Session, store: StateStore) -> CachePilotSession:
    """The proxy of `inner`, taking the run context exactly when `inner` does."""
    cls = ContextAwareSession if _context_aware(inner) else CachePilotSession
    return cls(owner, inner, store)

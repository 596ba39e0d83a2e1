"""What the proxy remembers per thread, and where that is kept between processes.

Per thread, in memory: the last request's messages (so an unchanged history is the very same
objects again and `reduce_results`/`prepare` cost O(new messages)), the splices (see
`cachepilot.proxy.recall`), the tool calls its replies made (see `cachepilot.proxy.calls`),
the messages it marked (`cachepilot.proxy.forms`), the last request as sent (for Anthropic
breakpoints) and a lock. The pilot state, the splices, the seen calls and the marked forms
are saved after every request to a `StateStore` (one JSON document per
thread, `cachepilot inspect` reads it) and loaded the first time a thread is seen, so a
restarted proxy sends the same bytes.

A call counts when it is answered. A request's preparation is saved before it is sent (so
processes sharing the store agree on its plan), together with the state it was prepared
over (as a reverse delta from the stored one, `cachepilot.proxy.state_delta`) and a digest
of the request (`ThreadMemory.unanswered`); the answer clears that mark.
When the same request comes again while the mark stands (the client lost the first one: a
dropped connection, a killed process, an upstream error), it is prepared over that earlier
state, in whichever process it reaches: what one process that never saw the lost request
would send.

While the store cannot read or save a thread, its requests are refused
(`StoreUnavailableError`, a 503 the client retries) rather than served from a copy that only
this process has: after the store is back every process prepares from the stored state, as
one process that never saw the refused requests would. A save that fails after the upstream
answered is kept in memory and stored with the thread's next save.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from cachepilot.messages import Message
from cachepilot.pilot.facade import CachePilot
from cachepilot.proxy.calls import SeenCalls
from cachepilot.proxy.family_docs import forget_member
from cachepilot.proxy.forms import BlockForms
from cachepilot.proxy.recall import Splices
from cachepilot.proxy.state_delta import rebuild, reverse_delta
from cachepilot.sim import RenderedRequest
from cachepilot.state.base import StateStore, VersionedStateStore

__all__ = ["StoreUnavailableError", "ThreadMemory", "Threads", "family_of"]

logger = logging.getLogger(__name__)

_PROXY_KEY = "proxy"
"""Key of the proxy's own part in a stored thread document (a `PilotState` ignores it)."""


def _unnamed(_: str) -> str:
    return "(unnamed)"


class StoreUnavailableError(RuntimeError):
    """The state store could not read or save a thread: its request is not sent (the proxy
    answers 503), so no process goes on with a state the store does not have."""


def family_of(saved: str | None) -> str | None:
    """The family a stored thread document names (None: none, or not a thread document)."""
    try:
        data = json.loads(saved) if saved else None
    except ValueError:
        return None
    proxy = data.get(_PROXY_KEY) if isinstance(data, dict) else None
    family = proxy.get("family") if isinstance(proxy, dict) else None
    return family if isinstance(family, str) else None


class _Unanswered:
    """A preparation sent upstream and not answered yet (stored with the thread).

    The document the preparation was made over (`before`) is stored as a reverse delta from
    the document it is stored in (`cachepilot.proxy.state_delta`), not whole: a save stays
    about the size of the thread's state, not twice it.
    """

    __slots__ = ("_parsed", "before", "digest", "token")

    def __init__(self, token: str, digest: str, before: str) -> None:
        self.token = token
        """Names this preparation (a resend of the same request gets a new one)."""
        self.digest = digest
        """Digest of the client's request body."""
        self.before = before
        """The thread's document as it was before this preparation."""
        self._parsed: Any = None

    def to_json(self, document: dict[str, Any]) -> dict[str, Any]:
        """What is stored inside `document` (the thread's document without this mark): the
        earlier document as a delta from it, or whole when a delta would not give it back
        byte for byte."""
        if self._parsed is None:
            self._parsed = json.loads(self.before)
        delta = reverse_delta(self._parsed, document)
        try:
            exact = json.dumps(rebuild(document, delta), ensure_ascii=False) == self.before
        except (ValueError, TypeError):
            exact = False
        if not exact:
            return {"token": self.token, "digest": self.digest, "before": self.before}
        return {"token": self.token, "digest": self.digest, "delta": delta}

    @classmethod
    def from_json(cls, data: Any, document: dict[str, Any]) -> _Unanswered | None:
        """The mark stored in `document` (the thread's document, this mark taken out)."""
        if not isinstance(data, dict):
            return None
        token, digest, before = (data.get(k) for k in ("token", "digest", "before"))
        if not (isinstance(token, str) and isinstance(digest, str)):
            return None
        if not isinstance(before, str):
            if "delta" not in data:
                return None
            try:
                before = json.dumps(rebuild(document, data["delta"]), ensure_ascii=False)
            except (ValueError, TypeError, KeyError, IndexError):
                return None
        return cls(token, digest, before)


class ThreadMemory:
    """One thread's proxy-side memory (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = asyncio.Lock()
        self.previous: list[Message] = []
        self.splices = Splices()
        self.calls = SeenCalls()
        """The tool calls seen in the thread's relayed replies, by id."""
        self.blocks = BlockForms()
        """String messages the proxy marked: written as a text block from then on."""
        self.sent: RenderedRequest | None = None
        self.requests = 0
        self.marks_refused = False
        """The upstream refused a request for its cache marks: add none from now on."""
        self.epochs_seen: int | None = None
        """The plan's epoch count at the thread's last recorded call in this process."""
        self.recalls_seen: int | None = None
        """The state's recall count at the thread's last recorded call in this process (a
        stored state brings recalls served before: they are not this process's)."""
        self.version = 0
        """The stored version this process's copy of the thread stands for."""
        self.pending: list[Callable[[], None]] = []
        """Changes since the last save (usage, splices), re-applied over a newer stored
        state when another process saved the thread first."""
        self.unanswered: _Unanswered | None = None
        """The last preparation whose answer has not come yet (see the module docstring)."""
        self.clean: str | None = None
        """The thread's document as last stored or loaded, while nothing changed since (and
        no preparation was unanswered): what `Threads.begin` keeps without exporting again."""
        self.stale = False
        """This process's copy may differ from the stored state (a read or save failed, or
        a preparation was not stored): loaded again before the next preparation."""
        self.family: str | None = None
        """The stored family the thread is a member of (`cachepilot.proxy.families`): kept in
        its document so that forgetting the thread removes it from the family too."""

    def reset(self) -> None:
        """Drop everything this process holds for the thread (it was forgotten elsewhere);
        its lock, name and family stay."""
        self.previous = []
        self.splices = Splices()
        self.calls = SeenCalls()
        self.blocks = BlockForms()
        self.sent = None
        self.requests = 0
        self.marks_refused = False
        self.epochs_seen = None
        self.recalls_seen = None
        self.version = 0
        self.pending = []
        self.unanswered = None
        self.clean = None
        self.stale = False

    def apply(self, change: Callable[[], None]) -> None:
        """Make a change to the thread now, and again over a newer stored state if needed."""
        change()
        self.pending.append(change)
        self.clean = None

    def intern(self, messages: Sequence[Message]) -> list[Message]:
        """`messages` with the leading ones equal to the last request's replaced by those."""
        out: list[Message] = []
        previous = self.previous
        for index, message in enumerate(messages):
            if index < len(previous) and (previous[index] is message or previous[index] == message):
                out.append(previous[index])
                continue
            out.extend(messages[index:])
            break
        self.previous = out
        return out


class Threads:
    """The threads the proxy serves: memory (LRU), persistence, response ids.

    Args:
        pilot: the pilot holding the threads' states.
        store: where states are kept between processes (None: memory only).
        max_threads: threads held in memory (their states stay in the store).
    """

    def __init__(
        self, pilot: CachePilot, store: StateStore | None = None, max_threads: int = 1024
    ) -> None:
        self.pilot = pilot
        self.store = store
        self._max = max_threads
        self._threads: OrderedDict[str, ThreadMemory] = OrderedDict()
        self._responses: OrderedDict[str, str] = OrderedDict()
        self._aliases: OrderedDict[str, str] = OrderedDict()
        self._lock = asyncio.Lock()
        self.label: Callable[[str], str] = _unnamed
        """What logs show for a thread name (the engine sets the store secret's label)."""

    async def get(self, name: str) -> ThreadMemory:
        """The memory of thread `name`, its stored state loaded on first use."""
        async with self._lock:
            found = self._threads.get(name)
            if found is not None:
                self._threads.move_to_end(name)
                if self.store is None or self.pilot.holds(name):
                    return found
                # The pilot let the state go (idle, over its memory bounds): load it again.
                found.previous = []
            else:
                found = ThreadMemory(name)
            self._threads[name] = found
            while len(self._threads) > self._max:
                evicted, _ = self._threads.popitem(last=False)
                # Its state stays in the store; the pilot's live copy and caches go.
                self.pilot.drop_thread(evicted, artifacts=False)
        if self.store is not None:
            self.pilot.mark_persisted(name)
            await self._load(found)
        return found

    def _unavailable(self, memory: ThreadMemory, what: str, exc: Exception) -> NoReturn:
        memory.stale = True
        logger.warning(
            "thread %s: %s failed (%s); its requests are refused until the store answers",
            self.label(memory.name),
            what,
            type(exc).__name__,
        )
        logger.debug("the state store's error", exc_info=True)
        raise StoreUnavailableError(f"the state store failed: {what} failed") from exc

    async def _load(self, memory: ThreadMemory) -> bool:
        """Load the thread's stored state (and its version) into the pilot and `memory`
        (`StoreUnavailableError` when the store fails). True when the thread was forgotten
        since this process stored or read it (`cachepilot forget`, another process): its
        copy here is dropped (`_forgotten`)."""
        assert self.store is not None
        try:
            if isinstance(self.store, VersionedStateStore):
                saved, version = await self.store.load_versioned(memory.name)
            else:
                saved, version = await self.store.load(memory.name), 0
        except Exception as exc:
            self._unavailable(memory, "reading its stored state", exc)
        forgotten = saved is None and memory.version != 0
        if forgotten:
            self._forgotten(memory)
        memory.version = version
        memory.stale = False
        memory.previous = []
        if saved:
            self._restore(memory, saved)
        else:
            self.pilot.load_state(memory.name, {})
            memory.splices = Splices()
            memory.calls = SeenCalls()
            memory.blocks = BlockForms()
            memory.unanswered = None
        memory.clean = saved if saved and memory.unanswered is None else None
        return forgotten

    def _forgotten(self, memory: ThreadMemory) -> None:
        """The thread this process held was deleted from the store: nothing of it is used
        again here (memory, the pilot's state and caches, response ids); a later request of
        the same name starts a thread of its own, as in a process that never saw it."""
        logger.info(
            "thread %s was forgotten in the store; this process drops its copy",
            self.label(memory.name),
        )
        memory.reset()
        self.pilot.drop_thread(memory.name, artifacts=False)
        self.pilot.mark_persisted(memory.name)
        for key in [k for k, v in self._responses.items() if v == memory.name]:
            del self._responses[key]

    async def refresh(self, memory: ThreadMemory) -> bool:
        """Load the thread again when another process saved it since this one read or saved
        it, or when this process's copy may differ from the stored one (one version read when
        nothing changed); True when it was loaded (`StoreUnavailableError` when the store
        fails)."""
        if self.store is None:
            return False
        if memory.stale:
            await self._load(memory)
            return True
        if not isinstance(self.store, VersionedStateStore):
            return False
        try:
            current = await self.store.version(memory.name)
        except Exception as exc:
            self._unavailable(memory, "reading its stored version", exc)
        if current == memory.version:
            return False
        await self._load(memory)
        return True

    def _restore(self, memory: ThreadMemory, saved: str) -> None:
        try:
            data = json.loads(saved)
            proxy = data.get(_PROXY_KEY) if isinstance(data, dict) else None
            mark = proxy.pop("unanswered", None) if isinstance(proxy, dict) else None
            unanswered = None if mark is None else _Unanswered.from_json(mark, data)
            data.pop(_PROXY_KEY, None)
            self.pilot.load_state(memory.name, data)
            memory.splices = Splices.from_json((proxy or {}).get("splices"))
            memory.calls = SeenCalls.from_json((proxy or {}).get("calls"))
            memory.blocks = BlockForms.from_json((proxy or {}).get("blocks"))
            memory.unanswered = unanswered
            family = (proxy or {}).get("family")
            memory.family = family if isinstance(family, str) else memory.family
        except Exception:
            logger.warning(
                "thread %s: ignoring an unreadable stored state", self.label(memory.name)
            )

    def _document(self, memory: ThreadMemory, *, unanswered: bool = True) -> str:
        doc: dict[str, Any] = self.pilot.export_state(memory.name)
        proxy: dict[str, Any] = {
            "splices": memory.splices.to_json(),
            "calls": memory.calls.to_json(),
            "blocks": memory.blocks.to_json(),
        }
        if memory.family is not None:
            proxy["family"] = memory.family
        doc[_PROXY_KEY] = proxy
        if unanswered and memory.unanswered is not None:
            mark = memory.unanswered.to_json(doc)  # over the document without the mark
            proxy["unanswered"] = mark
        return json.dumps(doc, ensure_ascii=False)

    def begin(self, memory: ThreadMemory, digest: str) -> str:
        """Mark the preparation about to be made for a request whose body has `digest`; returns
        its token (for `answered`). When the thread's last preparation was of the same request
        and never answered, the thread goes back to the state that one was prepared over
        first, so the resend is the same call (call under the thread's lock)."""
        last = memory.unanswered
        if last is not None and last.digest == digest:
            logger.debug("thread %s: a resend of an unanswered request", self.label(memory.name))
            # The pilot's caches derive from the state being replaced: rebuilt from `before`.
            self.pilot.drop_thread(memory.name, artifacts=False)
            if self.store is not None:
                self.pilot.mark_persisted(memory.name)
            memory.previous = []
            memory.epochs_seen = None
            self._restore(memory, last.before)
            memory.clean = last.before
        before = memory.clean if memory.unanswered is None else None
        memory.unanswered = None
        memory.clean = None  # the preparation changes the thread
        token = secrets.token_hex(8)
        if before is None:
            before = self._document(memory, unanswered=False)
        memory.unanswered = _Unanswered(token, digest, before)
        return token

    def answered(self, memory: ThreadMemory, token: str) -> None:
        """The preparation `token` was answered: it counts (also over a newer stored state)."""

        def clear() -> None:
            if memory.unanswered is not None and memory.unanswered.token == token:
                memory.unanswered = None

        memory.apply(clear)

    async def commit(self, memory: ThreadMemory) -> bool:
        """Save the thread only if no other process saved it since this one read it (no
        re-applying); False on such a conflict. Stores without versions always save.
        `StoreUnavailableError` when the store fails."""
        if self.store is None:
            return True
        document = self._document(memory)
        try:
            if not isinstance(self.store, VersionedStateStore):
                await self.store.save(memory.name, document)
                version: int | None = memory.version
            else:
                version = await self.store.save_if(memory.name, document, memory.version)
        except Exception as exc:
            self._unavailable(memory, "storing its state", exc)
        if version is None:
            return False
        memory.version = version
        memory.pending.clear()
        memory.clean = document if memory.unanswered is None else None
        return True

    async def save(self, memory: ThreadMemory, attempts: int = 8) -> None:
        """Store the thread's pilot state and splices (failures are logged, never raised).

        When another process saved the thread first, its state is loaded and this request's
        changes (`ThreadMemory.apply`) are made again over it, so no recorded call is lost.
        """
        async with memory.lock:
            try:
                for _ in range(attempts):
                    if await self.commit(memory):
                        return
                    pending = list(memory.pending)
                    if await self._load(memory):
                        return  # forgotten meanwhile: nothing of it is stored again
                    for change in pending:
                        change()
                    memory.pending = pending
            except StoreUnavailableError:
                # Kept here (answered calls are not lost): stored with the next save.
                memory.stale = False
                return
            logger.warning(
                "thread %s: its state was not stored after %d conflicting saves",
                self.label(memory.name),
                attempts,
            )

    async def forget(self, name: str) -> None:
        """Forget thread `name`: memory, the pilot's state, views and archive, the stored
        document, its entry in its family's stored document, and the response ids that
        pointed at it (store failures raise)."""
        async with self._lock:
            held = self._threads.pop(name, None)
            for key in [k for k, v in self._responses.items() if v == name]:
                del self._responses[key]
        await self.pilot.aforget(name)
        if self.store is not None:
            family = held.family if held is not None else None
            family = family or family_of(await self.store.load(name))
            if family is not None:
                await forget_member(self.store, family, name)
            await self.store.delete(name)

    def remember_response(self, response_id: str, thread: str) -> None:
        """Note which thread a Responses id belongs to (for `previous_response_id`)."""
        self._responses[response_id] = thread
        while len(self._responses) > 16 * self._max:
            self._responses.popitem(last=False)

    def alias(self, shown: str, actual: str) -> None:
        """A streamed reply shown under id `shown` ended in upstream response `actual`."""
        self._aliases[shown] = actual
        while len(self._aliases) > 16 * self._max:
            self._aliases.popitem(last=False)

    def actual(self, response_id: str) -> str:
        """The upstream response an id shown to a client stands for."""
        return self._aliases.get(response_id, response_id)

    @property
    def responses(self) -> OrderedDict[str, str]:
        """Thread by response id."""
        return self._responses

    def names(self) -> list[str]:
        """Threads held in memory, least recently used first."""
        return list(self._threads)

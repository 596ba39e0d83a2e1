"""What the proxy remembers per thread, and where that is kept between processes.

Per thread, in memory: the last request's messages (so an unchanged history is the very same
objects again and `reduce_results`/`prepare` cost O(new messages)), the splices (see
`cachepilot.proxy.recall`), the tool calls its replies made (see `cachepilot.proxy.calls`),
the messages it marked (`cachepilot.proxy.forms`), the last request as sent (for Anthropic
breakpoints) and a lock. The pilot state, the splices, the seen calls and the marked forms
are saved after every request to a `StateStore` (one JSON document per
thread, `cachepilot inspect` reads it) and loaded the first time a thread is seen, so a
restarted proxy sends the same bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from cachepilot.messages import Message
from cachepilot.pilot import CachePilot
from cachepilot.proxy.calls import SeenCalls
from cachepilot.proxy.forms import BlockForms
from cachepilot.proxy.recall import Splices
from cachepilot.sim import RenderedRequest
from cachepilot.state_store import StateStore, VersionedStateStore

__all__ = ["ThreadMemory", "Threads"]

logger = logging.getLogger(__name__)

_PROXY_KEY = "proxy"
"""Key of the proxy's own part in a stored thread document (a `PilotState` ignores it)."""


def _unnamed(_: str) -> str:
    return "(unnamed)"


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

    def apply(self, change: Callable[[], None]) -> None:
        """Make a change to the thread now, and again over a newer stored state if needed."""
        change()
        self.pending.append(change)

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

    async def _load(self, memory: ThreadMemory) -> None:
        """Load the thread's stored state (and its version) into the pilot and `memory`."""
        assert self.store is not None
        try:
            if isinstance(self.store, VersionedStateStore):
                saved, memory.version = await self.store.load_versioned(memory.name)
            else:
                saved = await self.store.load(memory.name)
        except Exception:
            logger.warning(
                "thread %s: its stored state could not be read",
                self.label(memory.name),
                exc_info=True,
            )
            return
        memory.previous = []
        if saved:
            self._restore(memory, saved)
        else:
            self.pilot.load_state(memory.name, {})
            memory.splices = Splices()
            memory.calls = SeenCalls()
            memory.blocks = BlockForms()

    async def refresh(self, memory: ThreadMemory) -> bool:
        """Load the thread again when another process saved it since this one read or saved
        it (one version read when nothing changed); True when it was loaded."""
        if not isinstance(self.store, VersionedStateStore):
            return False
        try:
            current = await self.store.version(memory.name)
        except Exception:
            logger.warning(
                "thread %s: its stored version could not be read",
                self.label(memory.name),
                exc_info=True,
            )
            return False
        if current == memory.version:
            return False
        await self._load(memory)
        return True

    def _restore(self, memory: ThreadMemory, saved: str) -> None:
        try:
            data = json.loads(saved)
            proxy = data.pop(_PROXY_KEY, None) if isinstance(data, dict) else None
            self.pilot.load_state(memory.name, data)
            memory.splices = Splices.from_json((proxy or {}).get("splices"))
            memory.calls = SeenCalls.from_json((proxy or {}).get("calls"))
            memory.blocks = BlockForms.from_json((proxy or {}).get("blocks"))
        except Exception:
            logger.warning(
                "thread %s: ignoring an unreadable stored state", self.label(memory.name)
            )

    def _document(self, memory: ThreadMemory) -> str:
        doc: dict[str, Any] = self.pilot.export_state(memory.name)
        doc[_PROXY_KEY] = {
            "splices": memory.splices.to_json(),
            "calls": memory.calls.to_json(),
            "blocks": memory.blocks.to_json(),
        }
        return json.dumps(doc, ensure_ascii=False)

    async def commit(self, memory: ThreadMemory) -> bool:
        """Save the thread only if no other process saved it since this one read it (no
        re-applying); False on such a conflict. Stores without versions always save."""
        if self.store is None:
            return True
        try:
            if not isinstance(self.store, VersionedStateStore):
                await self.store.save(memory.name, self._document(memory))
                return True
            version = await self.store.save_if(memory.name, self._document(memory), memory.version)
        except Exception:
            logger.warning(
                "thread %s: its state could not be stored", self.label(memory.name), exc_info=True
            )
            return True  # nothing to retry against: the store is failing
        if version is None:
            return False
        memory.version = version
        memory.pending.clear()
        return True

    async def save(self, memory: ThreadMemory, attempts: int = 8) -> None:
        """Store the thread's pilot state and splices (failures are logged, never raised).

        When another process saved the thread first, its state is loaded and this request's
        changes (`ThreadMemory.apply`) are made again over it, so no recorded call is lost.
        """
        async with memory.lock:
            for _ in range(attempts):
                if await self.commit(memory):
                    return
                pending = list(memory.pending)
                await self._load(memory)
                for change in pending:
                    change()
                memory.pending = pending
            logger.warning(
                "thread %s: its state was not stored after %d conflicting saves",
                self.label(memory.name),
                attempts,
            )

    async def forget(self, name: str) -> None:
        """Forget thread `name`: memory, the pilot's state, views and archive, the stored
        document, and the response ids that pointed at it (store failures raise)."""
        async with self._lock:
            self._threads.pop(name, None)
            for key in [k for k, v in self._responses.items() if v == name]:
                del self._responses[key]
        await self.pilot.aforget(name)
        if self.store is not None:
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

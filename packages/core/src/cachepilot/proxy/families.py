"""Threads whose system prompt carries a per-call value: one thread, not one per call.

`identify` names a thread found by key (or by hash) after its system prompt in placeholder
form, so a system prompt carrying a value no built-in pattern knows (``Session 9f0c2e41-77aa``,
then ``9f1c…``) would start a new thread on every call. The threads of one key (or of one
first user message) form a family; `Families.resolve` maps a request to the member whose
system prompt it continues:

* equal after the member's learned spans are taken out (the thread key computed without
  them: ``cachepilot.canonical.volatility.replace_learned``), or
* differing from the member's last system prompt only in volatile spans, by the same rule the
  canonicalizer learns by (`cachepilot.canonical.volatility.learn`); that request's
  preparation then learns the spans in the thread's state.

A system prompt that differs otherwise (a side request with its own prompt, a genuine
instruction change) starts a member of its own, as before. The learned spans live in each
thread's pilot state; the family (its members and their last system prompts) is kept in the
state store next to the threads, so a restarted proxy maps the next call to the same thread.
Forgetting a thread (`forget_member`) removes it, and its system prompt, from its family.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass

from cachepilot.canonical.text import LEARNED_KIND
from cachepilot.canonical.volatility import Baseline, learn, replace_learned, text_digest
from cachepilot.log_labels import thread_label
from cachepilot.proxy.memory import StoreUnavailableError, Threads
from cachepilot.proxy.threads import ThreadId
from cachepilot.state_store import StateStore

__all__ = ["FAMILY_DOC_KEY", "Families", "forget_member"]

logger = logging.getLogger(__name__)

FAMILY_DOC_KEY = "cachepilot_family"
"""Marks a family document in the state store (it is not a thread's state)."""
_MAX_MEMBERS = 16
_MAX_FAMILIES = 4096


@dataclass(slots=True)
class _Member:
    thread: str
    system: str  # the last system prompt in placeholder form


class Families:
    """Families of threads (see the module docstring).

    Args:
        threads: the proxy's threads (their states hold the learned spans; their store
            keeps the families too).
    """

    def __init__(self, threads: Threads) -> None:
        self.threads = threads
        self.pilot = threads.pilot
        self.store = threads.store
        self._families: OrderedDict[str, list[_Member]] = OrderedDict()
        self._lock = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        """Whether the pilot learns volatile spans (else families are not consulted)."""
        config = self.pilot.config
        return config.canonicalize and config.canonical.learn_volatile

    async def resolve(self, thread: ThreadId) -> str:
        """The thread a request continues: a member of its family, or `thread` itself."""
        if thread.family is None or not self.enabled:
            return thread.name
        async with self._lock:
            members = await self._members(thread.family)
            for member in members:  # their states (learned spans) loaded
                await self.threads.get(member.thread)
            chosen = self._match(members, thread)
            if chosen is None:
                chosen = _Member(thread.name, thread.system)
                members.insert(0, chosen)
                del members[_MAX_MEMBERS:]
                changed = True
            else:
                members.remove(chosen)
                members.insert(0, chosen)
                changed = chosen.system != thread.system
                chosen.system = thread.system
            if changed:
                await self._save(thread.family, members)
        if chosen.thread != thread.name:
            logger.debug("request continues thread %s (volatile system prompt)", chosen.thread)
        return chosen.thread

    def _match(self, members: list[_Member], thread: ThreadId) -> _Member | None:
        exact = next((m for m in members if m.thread == thread.name), None)
        if exact is not None and exact.system == thread.system:
            return exact
        config = self.pilot.config.canonical
        placeholder = config.placeholder(LEARNED_KIND)
        for member in members:
            spans = [s for s in self.pilot.state(member.thread).canonical.learned
                     if s.group == "system"]  # fmt: skip
            mine = replace_learned(member.system, spans, placeholder)
            theirs = replace_learned(thread.system, spans, placeholder)
            if text_digest(mine) == text_digest(theirs):
                return member
            found = learn(
                mine,
                theirs,
                "system",
                max_chars=config.learn_max_chars,
                placeholder=(config.placeholder_open, config.placeholder_close),
            )
            if found is not None:
                return member
        return exact

    async def _members(self, family: str) -> list[_Member]:
        members = self._families.get(family)
        if members is not None:
            self._families.move_to_end(family)
            return members
        members = await self._load(family)
        self._families[family] = members
        while len(self._families) > _MAX_FAMILIES:
            self._families.popitem(last=False)
        return members

    async def _load(self, family: str) -> list[_Member]:
        if self.store is None:
            return []
        try:
            saved = await self.store.load(family)
        except Exception as exc:  # not a new family: the store is failing
            raise StoreUnavailableError(
                "the state store failed: a family could not be read"
            ) from exc
        try:
            data = json.loads(saved) if saved else {}
            out = [
                _Member(str(m["thread"]), Baseline.model_validate(m["system"]).text())
                for m in data.get("members", ())
            ]
        except Exception:
            logger.warning("family %s: ignoring an unreadable stored family", thread_label(family))
            return []
        return out[:_MAX_MEMBERS]

    async def _save(self, family: str, members: list[_Member]) -> None:
        if self.store is None:
            return
        doc = {
            FAMILY_DOC_KEY: 1,
            "members": [
                {"thread": m.thread, "system": Baseline.of(m.system).model_dump()} for m in members
            ],
        }
        try:
            await self.store.save(family, json.dumps(doc, ensure_ascii=False))
        except Exception:
            logger.warning("family %s: it could not be stored", thread_label(family), exc_info=True)


async def forget_member(store: StateStore, family: str, thread: str) -> None:
    """Remove `thread` (and the system prompt kept for it) from the stored family `family`;
    the family's document goes with its last member (store failures raise)."""
    saved = await store.load(family)
    data = json.loads(saved) if saved else {}
    if not isinstance(data, dict) or FAMILY_DOC_KEY not in data:
        return
    members = [m for m in data.get("members", ()) if m.get("thread") != thread]
    if not members:
        await store.delete(family)
        return
    data["members"] = members
    await store.save(family, json.dumps(data, ensure_ascii=False))

"""Which earlier conversation a request continues: conversations never merge.

`identify` names a thread after the request's key (or first user message) and its system
prompt, but a name alone cannot tell two conversations apart: two users of one API key send
the same `prompt_cache_key` or the same first message, and a system prompt carrying a value
no built-in pattern knows (``Session 9f0c2e41-77aa``, then ``9f1c…``) would start a new
thread on every call. The threads of one key (or of one first user message) form a family;
`Families.resolve` maps a request to the member it continues:

* **its history continues the member's**: the member's last request's messages (trailing
  system messages aside) are the first messages of this one, the last of them allowed to
  have gained or lost a suffix (a reminder a client appends only to what it sends). A
  request that starts another history (another user, another session of the same tool a
  day later) is another conversation, whatever its key, header-less name or first message;
  only an explicit conversation key (`x-cachepilot-thread`, `metadata.session_id` and the
  other conversation keys, `conversation`, `previous_response_id`) joins requests without
  it; and
* **its system prompt is the member's**, equal after the member's learned spans are taken
  out, or differing from the member's last system prompt only in volatile spans, by the
  same rule the canonicalizer learns by (`cachepilot.canonical.volatility.learn`); that
  request's preparation then learns the spans in the thread's state.

Anything else starts a member of its own (its name made unique by the digest of its
history). The learned spans live in each thread's pilot state; the family (its members,
their last system prompts and history marks) is kept in the state store next to the
threads, so a restarted proxy maps the next call to the same thread.
Forgetting a thread (`forget_member`) removes it, and its system prompt, from its family.
A process holds families in memory only while the store's version of each is the one it read
or wrote (one version read per request): a family another process changed, or a thread
`cachepilot forget` removed, is read again before it is matched.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from cachepilot.canonical.notes import message_digest
from cachepilot.canonical.text import LEARNED_KIND
from cachepilot.canonical.volatility import Baseline, learn, replace_learned, text_digest
from cachepilot.messages import Message
from cachepilot.proxy.family_docs import FAMILY_DOC_KEY, forget_member
from cachepilot.proxy.memory import StoreUnavailableError, Threads
from cachepilot.proxy.threads import ThreadId
from cachepilot.state.base import VersionedStateStore
from cachepilot.support.log_labels import thread_label
from cachepilot.wire.body import STRONG_KEYS

__all__ = ["FAMILY_DOC_KEY", "Families", "forget_member"]

logger = logging.getLogger(__name__)

_MAX_MEMBERS = 64
_MAX_FAMILIES = 4096
_LAST_CHARS = 4096
"""Characters of a history's last message kept to recognise it with a suffix added or cut."""


@dataclass(frozen=True, slots=True)
class _Mark:
    """A request's history: its messages up to the last non-system one."""

    length: int
    chain: str  # chained digest of the messages before the last
    role: str  # the last message's role
    last: str  # the head of the last message's text
    reply: str | None = None  # `_signature` of the reply the client was given, when known
    served: bool = False  # the history holds a reply the proxy served in this thread


@dataclass(slots=True)
class _Member:
    thread: str
    system: str  # the last system prompt in placeholder form
    mark: _Mark | None = None  # the last request's history (None: stored by an older version)


def _signature(message: Message) -> str:
    """What identifies a reply when the client sends it back: its role and tool-call ids, or
    the head of its text (whitespace aside)."""
    if message.tool_calls:
        return f"{message.role}:calls:" + ",".join(c.id for c in message.tool_calls)
    return f"{message.role}:text:" + " ".join(message.text.split())[:120]


class _History:
    """A request's messages as chained digests (computed once, linear in the messages)."""

    def __init__(self, messages: Sequence[Message]) -> None:
        end = len(messages)
        while end and messages[end - 1].role == "system":
            end -= 1  # a trailing reminder is not history
        self.messages = messages[:end]
        self.chains = [""]
        for message in self.messages:
            step = f"{self.chains[-1]}:{message_digest(message)}".encode()
            self.chains.append(hashlib.sha256(step).hexdigest()[:32])

    def mark(self) -> _Mark | None:
        if not self.messages:
            return None
        last = self.messages[-1]
        n = len(self.messages)
        return _Mark(n, self.chains[n - 1], last.role, last.text[:_LAST_CHARS])

    def continues(self, mark: _Mark | None, *, grows: bool = False) -> bool:
        """Whether this history starts with the one `mark` records (and, when the reply the
        client was given is known, goes on with it). `grows`: it must add messages (a
        request as long as the mark is a retry, told apart from another conversation that
        starts alike only by an equal system prompt), unless the mark's history holds a
        reply the proxy served in that thread (seeded messages, however alike, do not): a
        retry whose system prompt moved meanwhile stays in its conversation."""
        if mark is not None and mark.served:
            grows = False
        if mark is None or mark.length > len(self.messages) - grows:
            return False
        if self.chains[mark.length - 1] != mark.chain:
            return False
        message = self.messages[mark.length - 1]
        text = message.text[:_LAST_CHARS]
        if message.role != mark.role or not (
            text.startswith(mark.last) or mark.last.startswith(text)
        ):
            return False
        if mark.reply is None or len(self.messages) == mark.length:
            return True
        return _signature(self.messages[mark.length]) == mark.reply

    def served(self, mark: _Mark | None) -> bool:
        """Whether this history (which continues `mark`) holds a reply the proxy served:
        the one recorded on `mark`, or one its own history held."""
        if mark is None:
            return False
        if mark.served:
            return True
        return (
            mark.reply is not None
            and len(self.messages) > mark.length
            and _signature(self.messages[mark.length]) == mark.reply
        )

    def name(self, base: str) -> str:
        """A member name of its own for a new conversation under `base`."""
        return f"{base}~{self.chains[-1][:16]}"


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
        self._of: OrderedDict[str, str] = OrderedDict()  # thread -> family, recent ones
        self._versions: dict[str, int | None] = {}
        """The stored version each family held here stands for (None: unknown)."""
        self._lock = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        """Whether the pilot learns volatile spans (else families are not consulted)."""
        config = self.pilot.config
        return config.canonicalize and config.canonical.learn_volatile

    async def resolve(self, thread: ThreadId, messages: Sequence[Message] = ()) -> str:
        """The thread a request continues: a member of its family, or a new member."""
        if thread.family is None:
            return thread.name
        explicit = thread.source.startswith("key:") and thread.source[4:] in STRONG_KEYS
        if explicit and not self.enabled:
            return thread.name
        history = _History(messages)
        async with self._lock:
            members = await self._members(thread.family)
            chosen = await self._match(members, thread, history, explicit=explicit)
            if chosen is None and self.store is not None:
                # Another process sharing the store may have served this conversation's
                # last request: match again over the stored family before starting a thread.
                members = self._families[thread.family] = await self._load(thread.family)
                chosen = await self._match(members, thread, history, explicit=explicit)
            if chosen is None:
                taken = {m.thread for m in members}
                name = thread.name
                if name in taken:  # another conversation holds the name: one of its own
                    name = history.name(thread.name)
                chosen = next((m for m in members if m.thread == name), None)
                if chosen is None:
                    chosen = _Member(name, thread.system)
                    members.insert(0, chosen)
                    del members[_MAX_MEMBERS:]
            else:
                members.remove(chosen)
                members.insert(0, chosen)
            mark = history.mark()
            if mark is not None and history.served(chosen.mark):
                mark = dataclasses.replace(mark, served=True)
            changed = chosen.system != thread.system or chosen.mark != mark
            chosen.system, chosen.mark = thread.system, mark
            if changed:
                await self._save(thread.family, members)
            self._of[chosen.thread] = thread.family
            self._of.move_to_end(chosen.thread)
            while len(self._of) > _MAX_FAMILIES:
                self._of.popitem(last=False)
        if chosen.thread != thread.name:
            logger.debug("request continues thread %s", chosen.thread)
        return chosen.thread

    async def replied(self, thread: str, reply: Message) -> None:
        """Record the reply the client was given in `thread` (its next request resends it:
        a request that goes on with another reply is another conversation). Kept in memory
        only: a family read back from the store (a restart, another process) matches the
        next request without it."""
        family = self._of.get(thread)
        if family is None:
            return
        async with self._lock:
            members = self._families.get(family, [])  # as held here (no store read)
            member = next((m for m in members if m.thread == thread), None)
            if member is None or member.mark is None:
                return
            signature = _signature(reply)
            if member.mark.reply != signature:
                member.mark = dataclasses.replace(member.mark, reply=signature)

    async def _match(
        self, members: list[_Member], thread: ThreadId, history: _History, *, explicit: bool
    ) -> _Member | None:
        """The member this request continues (see the module docstring), None for none."""
        config = self.pilot.config.canonical
        placeholder = config.placeholder(LEARNED_KIND)
        for member in members:
            exact = member.system == thread.system
            if not explicit and not history.continues(member.mark, grows=not exact):
                continue
            if exact:
                return member
            if not self.enabled:
                continue
            await self.threads.get(member.thread)  # its state (learned spans) loaded
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
        return None

    async def _members(self, family: str) -> list[_Member]:
        """The family's members: the copy held here while the store's version is the one it
        stands for, else read again (another process changed the family, or forgot one of
        its threads: a forgotten member is never matched again)."""
        members = self._families.get(family)
        if members is not None and await self._current(family):
            self._families.move_to_end(family)
            return members
        loaded = await self._load(family)
        if members is not None:
            _keep_replies(loaded, members)
        self._families[family] = loaded
        while len(self._families) > _MAX_FAMILIES:
            evicted, _ = self._families.popitem(last=False)
            self._versions.pop(evicted, None)
        return loaded

    async def _current(self, family: str) -> bool:
        """Whether the family held here is the stored one (one version read)."""
        if not isinstance(self.store, VersionedStateStore):
            return True
        known = self._versions.get(family)
        try:
            return known is not None and await self.store.version(family) == known
        except Exception as exc:
            raise StoreUnavailableError(
                "the state store failed: a family's version could not be read"
            ) from exc

    async def _load(self, family: str) -> list[_Member]:
        if self.store is None:
            return []
        try:
            if isinstance(self.store, VersionedStateStore):
                saved, version = await self.store.load_versioned(family)
                self._versions[family] = version
            else:
                saved = await self.store.load(family)
        except Exception as exc:  # not a new family: the store is failing
            raise StoreUnavailableError(
                "the state store failed: a family could not be read"
            ) from exc
        try:
            data = json.loads(saved) if saved else {}
            out = [
                _Member(
                    str(m["thread"]),
                    Baseline.model_validate(m["system"]).text(),
                    _Mark(**m["mark"]) if isinstance(m.get("mark"), dict) else None,
                )
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
                {
                    "thread": m.thread,
                    "system": Baseline.of(m.system).model_dump(),
                    "mark": None if m.mark is None else dataclasses.asdict(m.mark),
                }
                for m in members
            ],
        }
        text = json.dumps(doc, ensure_ascii=False)
        try:
            if isinstance(self.store, VersionedStateStore):
                known = self._versions.get(family)
                saved = None if known is None else await self.store.save_if(family, text, known)
                if saved is None:  # another process changed it: ours wins, read back next time
                    await self.store.save(family, text)
                self._versions[family] = saved
            else:
                await self.store.save(family, text)
        except Exception:
            self._versions[family] = None
            logger.warning("family %s: it could not be stored", thread_label(family), exc_info=True)


def _keep_replies(loaded: list[_Member], held: list[_Member]) -> None:
    """Keep the replies recorded here (in memory only, `Families.replied`) on the members read
    again whose history mark is unchanged."""
    replies = {m.thread: m.mark for m in held if m.mark is not None and m.mark.reply}
    for member in loaded:
        mark = replies.get(member.thread)
        if (
            member.mark is not None
            and mark is not None
            and dataclasses.replace(member.mark, reply=mark.reply) == mark
        ):
            member.mark = mark

"""Group logged calls into threads (conversations).

Rules, in order:

1. `previous_response_id` chains: a call joins the thread of the response it continues.
2. Strong keys (`metadata.thread_id` / `session_id` / `conversation_id`…, the Responses
   `conversation`): one thread per value.
3. Otherwise prefix continuity, within the group of calls to the same API sharing the same
   weak key (`prompt_cache_key`, `user`, `metadata.user_id`; one may serve many threads):
   a call joins the thread whose last request shares the longest run of leading messages
   with it, at least one; or, when none shares a message, the thread whose first message is
   the same up to volatile values (a date in the first user message changed) and whose system
   prompt is the same up to volatile values. Else it starts a new thread. "Up to volatile
   values" also sees through cachepilot's own context block: a request whose values moved
   into the block (placeholders in the prompt, the block in the first user message or at
   the system tail) starts like the same request with the values written in place.

Calls that carry only new input (`previous_response_id`, `conversation`) get their full
context rebuilt: the previous call's full request plus its recorded output plus the new input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cachepilot.audit.sources import LoggedCall
from cachepilot.canonical import canonicalize_text
from cachepilot.diagnose.breaks import message_text
from cachepilot.messages import Message, content_hash
from cachepilot.sim.render import Request
from cachepilot.wire import STRONG_KEYS

__all__ = ["Thread", "group_threads"]


@dataclass(slots=True)
class Thread:
    """The calls of one conversation, in order.

    Attributes:
        id: the key value that named it, or `thread-<n>`.
        key: how it was grouped: `previous_response_id`, a key name, or `prefix`.
        calls: its calls (requests rebuilt to their full context where needed).
    """

    id: str
    key: str
    calls: list[LoggedCall] = field(default_factory=list)
    _hashes: list[str] = field(default_factory=list)


def _hashes(messages: Sequence[Message]) -> list[str]:
    return [content_hash(m) for m in messages]


def _shared(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# cachepilot's context block as `canonical` writes it (default tag and header): every line
# a `{{label}} = value` of a label `canonical` makes (`<kind>_<n>`).
_BLOCK = re.compile(
    r"\n*<context>\n(?:Placeholders in the system prompt stand for these values:\n)?"
    r"((?:\{\{[a-z]+(?:_[a-z]+)*_[0-9]{1,4}\}\} = [^\n]*\n){1,64})</context>\n*"
)
_LABEL = re.compile(r"\{\{([a-z]+(?:_[a-z]+)*_[0-9]{1,4})\}\} = ")
_PLACEHOLDER = re.compile(r"\{\{([A-Za-z][A-Za-z0-9_]{0,63})\}\}")


def _block_labels(texts: Sequence[str | None]) -> tuple[list[str | None], frozenset[str]]:
    """`texts` with cachepilot's context block left out, and the labels it declared."""
    labels: set[str] = set()
    out: list[str | None] = []
    for text in texts:
        found = _BLOCK.search(text) if text is not None and "<context>" in text else None
        if text is None or found is None:
            out.append(text)
            continue
        labels.update(_LABEL.findall(found.group(1)))
        out.append(text[: found.start()] + text[found.end() :])
    return out, frozenset(labels)


def _canonical(text: str | None, declared: frozenset[str]) -> str | None:
    """`text` up to volatile values: a value `canonical` finds and a placeholder of a
    declared label alike read `{{}}` (a template's own `{{name}}` stays as written)."""
    if text is None:
        return None
    found = canonicalize_text(text)
    generated = declared | found.values.keys()
    return _PLACEHOLDER.sub(lambda m: "{{}}" if m.group(1) in generated else m.group(0), found.text)


def _similar_start(a: Request, b: Request) -> bool:
    """Same system prompt and first message, up to volatile values (and cachepilot's own
    context block: the placeholders it declares stand for the values written in place)."""
    if not a.messages or not b.messages:
        return False
    first_a, first_b = a.messages[0], b.messages[0]
    if first_a.role != first_b.role:
        return False
    (sys_a, msg_a), declared_a = _block_labels([a.system, message_text(first_a)])
    (sys_b, msg_b), declared_b = _block_labels([b.system, message_text(first_b)])
    if _canonical(sys_a, declared_a) != _canonical(sys_b, declared_b):
        return False
    return _canonical(msg_a, declared_a) == _canonical(msg_b, declared_b)


def _rebuild(previous: LoggedCall, call: LoggedCall) -> LoggedCall:
    """The full context of a call that sent only new input."""
    prev = previous.request
    messages = (*prev.messages, *previous.output, *call.request.messages)
    req = call.request
    request = Request(
        system=req.system if req.system is not None else prev.system,
        messages=messages,
        tools=req.tools or prev.tools,
        timestamp=req.timestamp,
        model=req.model,
        cache_breakpoints=None,
    )
    return call.with_request(request)


def group_threads(calls: Sequence[LoggedCall]) -> list[Thread]:
    """Group calls into threads (see the module docstring); threads in order of first call."""
    threads: list[Thread] = []
    by_response: dict[str, Thread] = {}
    by_key: dict[tuple[str, str], Thread] = {}
    groups: dict[tuple[str, tuple[str, str] | None], list[Thread]] = {}

    def new(thread_id: str, key: str) -> Thread:
        thread = Thread(thread_id, key)
        threads.append(thread)
        return thread

    for logged in calls:
        call = logged
        thread: Thread | None = None
        if call.previous_response_id is not None:
            thread = by_response.get(call.previous_response_id)
            if thread is None:
                thread = new(call.previous_response_id, "previous_response_id")
        if thread is None:
            strong = next(((k, v) for k, v in call.keys.items() if k in STRONG_KEYS), None)
            if strong is not None:
                thread = by_key.get(strong)
                if thread is None:
                    thread = new(strong[1], strong[0])
                    by_key[strong] = thread
        if thread is None:
            weak = next(((k, v) for k, v in call.keys.items() if k not in STRONG_KEYS), None)
            # Calls of different APIs are different conversations even when their text matches.
            members = groups.setdefault((call.api, weak), [])
            hashes = _hashes(call.request.messages)
            best, best_shared = None, 0
            for candidate in members:
                shared = _shared(candidate._hashes, hashes)
                if shared > best_shared or (shared == best_shared and shared and best is not None):
                    best, best_shared = candidate, shared
            if best is None:
                best = next(
                    (
                        t
                        for t in reversed(members)
                        if _similar_start(t.calls[-1].request, call.request)
                    ),
                    None,
                )
            if best is None:
                label = f"{weak[1]}#{len(members) + 1}" if weak else f"thread-{len(threads) + 1}"
                best = new(label, weak[0] if weak else "prefix")
                members.append(best)
            thread = best
        if call.server_state and thread.calls:
            call = _rebuild(thread.calls[-1], call)
        thread.calls.append(call)
        thread._hashes = _hashes(call.request.messages)
        if call.response_id is not None:
            by_response[call.response_id] = thread
    return threads

"""Which thread a request belongs to.

The rule, first match wins:

1. the explicit header (`x-cachepilot-thread: <name>`, 1 to 200 printable characters);
2. a thread key in the body (`metadata.session_id` and the other conversation keys, then
   `prompt_cache_key`, `metadata.user_id`, `user`, `safety_identifier`), together with the
   system prompt in placeholder form, so side requests that reuse the key with another
   system prompt (title generation, sub-agents) get threads of their own;
3. a Responses request continuing a response this proxy served (`previous_response_id`):
   that response's thread;
4. a digest of the exact system prompt and first user message.

A name from rule 2 or 4 is not yet a conversation (`cachepilot.proxy.families`): a request
joins an earlier thread of the same key (or first user message) only when its history
continues that thread's last request (an explicit conversation key, `metadata.session_id`,
`conversation` and the like, joins without it) and its system prompt is that thread's, or
differs from it only in volatile spans (a per-call session id or build number does not start
a new thread). Two users of one key, or two sessions of one tool a day apart, are two
threads, whatever key, first message or system prompt they share.

With key scoping (the default) every thread name starts with a digest of the request's API
key (`Authorization: Bearer <key>`, `x-api-key`, `api-key` or Gemini's `x-goog-api-key`: the
same key gives the same scope whichever header carries it), salted with the store's secret
(`cachepilot.proxy.secret`) so a name cannot confirm a guessed key, and requests under two
keys never share a thread, nor its archive. The key itself is never stored or logged; names
from the body are digests too, so no body value leaks into logs or the state store. Header
names starting with `cachepilot:` are reserved (the proxy's own documents) and ignored.

"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from cachepilot.canonical import canonicalize_text
from cachepilot.proxy.secret import RESERVED_PREFIX, Secret
from cachepilot.wire import BodyView, thread_keys

__all__ = ["AUTH_HEADERS", "ThreadId", "api_key", "identify", "key_scope"]

AUTH_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
_MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class ThreadId:
    """A request's thread and how it was found (`header`, `key:<name>`, `previous`, `hash`).

    A thread found by key or hash also names its family (the threads of one key, or of one
    first user message, under one API key) and carries its system prompt in placeholder form:
    `cachepilot.proxy.families` maps a request whose system prompt differs from a member's
    only in volatile spans to that member.
    """

    name: str
    source: str
    family: str | None = None
    system: str = ""


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:24]


def api_key(headers: Mapping[str, str]) -> str | None:
    """The request's API key, as the provider reads it (the `Bearer` scheme dropped)."""
    for name in AUTH_HEADERS:
        value = headers.get(name, "").strip()
        if name == "authorization" and value[:7].lower() == "bearer ":
            value = value[7:].strip()
        if value:
            return value
    return None


def key_scope(headers: Mapping[str, str], secret: Secret) -> str | None:
    """A salted digest naming the request's API key (None when the request carries none)."""
    key = api_key(headers)
    return None if key is None else "a" + secret.digest("key-scope", key)


def _valid_name(value: str) -> bool:
    return (
        0 < len(value) <= _MAX_NAME
        and value.isprintable()
        and value.strip() == value
        and not value.startswith(RESERVED_PREFIX)
    )


def identify(
    headers: Mapping[str, str],
    view: BodyView,
    *,
    header: str,
    scoped: bool,
    secret: Secret,
    previous: Mapping[str, str] | None = None,
) -> ThreadId:
    """The thread of one request (see the module docstring for the rule).

    Args:
        headers: the request headers, lower-case names.
        view: the body as read.
        header: the name of the explicit thread header.
        scoped: prefix the name with the API key's digest.
        secret: the store's secret, which the key's digest is salted with.
        previous: thread by response id, for Responses `previous_response_id`.
    """
    found: ThreadId | None = None
    explicit = headers.get(header)
    if explicit is not None and _valid_name(explicit):
        found = ThreadId(explicit, "header")
    if found is None:
        keys = thread_keys(view.body)
        if keys:
            name, value = next(iter(keys.items()))
            system = canonicalize_text(view.system).text if view.system else ""
            found = ThreadId(
                "k-" + _digest(name, value, system),
                f"key:{name}",
                "f-" + _digest("key", name, value),
                system,
            )
    if found is None and previous is not None:
        earlier = view.body.get("previous_response_id")
        if isinstance(earlier, str) and earlier in previous:
            return ThreadId(previous[earlier], "previous")  # already scoped
    if found is None:
        first = next((m.text for m in view.messages if m.role == "user"), "")
        system = canonicalize_text(view.system).text if view.system else ""
        found = ThreadId(
            "h-" + _digest(view.system or "", first), "hash", "f-" + _digest("hash", first), system
        )
    if scoped:
        scope = key_scope(headers, secret)
        if scope is not None:
            family = f"{scope}/{found.family}" if found.family else None
            return ThreadId(f"{scope}/{found.name}", found.source, family, found.system)
    return found

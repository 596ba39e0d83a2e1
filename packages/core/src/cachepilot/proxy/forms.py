"""Messages the proxy sends as blocks because it once marked them, per thread.

An Anthropic `cache_control` mark needs a content block: a message (or a system prompt) the
client sends as a string becomes one text block when the proxy marks it. When the mark moves
on, it would go back to a string: the same tokens, but a different body from there on.
`BlockForms` remembers (bounded, kept with the thread's state) the strings the proxy marked,
and writes them as one text block on every later request, so the body the upstream gets only
ever grows at its end.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BlockForms"]

logger = logging.getLogger(__name__)

MAX_FORMS = 512
"""Messages remembered per thread (the least recently written go first)."""


def _key(role: str, text: str) -> str:
    digest = hashlib.sha256(role.encode() + b"\x00" + text.encode("utf-8", "surrogatepass"))
    return f"{len(text)}:{digest.hexdigest()[:24]}"


class BlockForms:
    """One thread's string messages written as a text block (see the module docstring)."""

    def __init__(self) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._lengths: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, entries: Iterable[Any]) -> None:
        """Remember the string messages among Messages `entries` (as the proxy marks them; a
        string system prompt is the entry `{"role": "system", "content": ...}`)."""
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            content = entry.get("content")
            if isinstance(content, str) and content:
                self._touch(_key(str(entry.get("role")), content))
        while len(self._keys) > MAX_FORMS:
            key, _ = self._keys.popitem(last=False)
            self._forget_length(key)

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with every remembered string message written as one text block (`body`
        itself when there is none; never mutated)."""
        if not self._keys:
            return body
        system = body.get("system")
        if isinstance(system, str) and self._holds("system", system):
            body = {**body, "system": [{"type": "text", "text": system}]}
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        out: list[Any] | None = None
        for index, entry in enumerate(messages):
            content = entry.get("content") if isinstance(entry, Mapping) else None
            if not isinstance(content, str) or not self._holds(str(entry.get("role")), content):
                continue
            if out is None:
                out = list(messages)
            out[index] = {**entry, "content": [{"type": "text", "text": content}]}
        return body if out is None else {**body, "messages": out}

    def to_json(self) -> list[str]:
        """JSON-ready form (kept with the thread's state), least recently used first."""
        return list(self._keys)

    @classmethod
    def from_json(cls, data: Any) -> BlockForms:
        """Read `to_json` output back (entries that do not parse are dropped)."""
        out = cls()
        for key in data if isinstance(data, list) else ():
            length, _, digest = key.partition(":") if isinstance(key, str) else ("", "", "")
            if length.isdigit() and digest:
                out._touch(key)
            else:
                logger.info("dropping an unreadable block form from a stored thread state")
        while len(out._keys) > MAX_FORMS:
            key, _ = out._keys.popitem(last=False)
            out._forget_length(key)
        return out

    def _holds(self, role: str, text: str) -> bool:
        """`text` of `role` is remembered (touched when it is); only a text of a remembered
        length is hashed."""
        if len(text) not in self._lengths:
            return False
        key = _key(role, text)
        if key not in self._keys:
            return False
        self._keys.move_to_end(key)
        return True

    def _touch(self, key: str) -> None:
        if key in self._keys:
            self._keys.move_to_end(key)
            return
        self._keys[key] = None
        length = int(key.partition(":")[0])
        self._lengths[length] = self._lengths.get(length, 0) + 1

    def _forget_length(self, key: str) -> None:
        length = int(key.partition(":")[0])
        left = self._lengths.get(length, 0) - 1
        if left > 0:
            self._lengths[length] = left
        else:
            self._lengths.pop(length, None)

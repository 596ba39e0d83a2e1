"""Token counting: tiktoken when an encoding loads, an approximate counter otherwise.

Counts and encodings are memoised by content digest, so recounting a long history after one
new message costs O(new content). The fallback says so once (one WARNING per process).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart
from cachepilot.support.identity_memo import IdentityMemo

__all__ = [
    "DEFAULT_ENCODING",
    "MESSAGE_OVERHEAD_TOKENS",
    "ApproximateEncoding",
    "Encoding",
    "TokenCounter",
    "get_counter",
    "load_encoding",
]

logger = logging.getLogger(__name__)

DEFAULT_ENCODING = "o200k_base"
MESSAGE_OVERHEAD_TOKENS = 4
"""Role and separator tokens a chat template adds around each message."""
_MAX_MEMO_ENTRIES = 200_000
IMAGE_TOKENS = 765
"""Flat charge for one image part (OpenAI's 'high' detail for a 1024x1024 image)."""

_WARNED: set[str] = set()
_WARN_LOCK = threading.Lock()


class Encoding(Protocol):
    """What `TokenCounter` needs of an encoding."""

    name: str

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of `text`, special-token strings treated as plain text."""
        ...


_APPROX_SPLIT = re.compile(r"\s+|[A-Za-z]{1,4}|\d{1,3}|[^\sA-Za-z\d]", re.ASCII)


class ApproximateEncoding:
    """Deterministic stand-in for a BPE encoding (about 4 characters of English a token).

    Ids are stable hashes of the pieces, so equal text gives equal ids and a shared prefix of
    text gives a shared prefix of ids, which is all the cache simulator needs.
    """

    def __init__(self, name: str = "approximate") -> None:
        self.name = name

    def encode_ordinary(self, text: str) -> list[int]:
        pieces = _APPROX_SPLIT.findall(text)
        out: list[int] = []
        for piece in pieces:
            digest = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=4)
            out.append(int.from_bytes(digest.digest(), "little") & 0x7FFFFFFF)
        return out


def _warn_once(key: str, message: str) -> None:
    with _WARN_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    logger.warning(message)


_CACHE_ENV = ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")
"""Variables by which a user points tiktoken at its own encoding files (they take precedence
over the files shipped with cachepilot)."""


def load_encoding(name: str = DEFAULT_ENCODING) -> Encoding:
    """Load a tiktoken encoding, or the approximate one (with one warning) when it cannot load.

    `o200k_base` and `cl100k_base` are shipped with the package (`cachepilot._encodings`), so
    they load without a network. When `TIKTOKEN_CACHE_DIR` (or `DATA_GYM_CACHE_DIR`) is set,
    tiktoken's own loader is asked first and the shipped copy is the fallback; other
    encodings always go through tiktoken (which may download them).

    Raises:
        ValueError: when `name` is empty.
    """
    if not name:
        raise ValueError("encoding name must be a non-empty string, e.g. 'o200k_base'")
    if name == "approximate":
        return ApproximateEncoding()
    from cachepilot._encodings import BUNDLED, load_bundled

    configured = next((var for var in _CACHE_ENV if os.environ.get(var)), None)
    if configured is None:
        bundled = load_bundled(name)
        if bundled is not None:
            return _TiktokenEncoding(bundled)
    try:
        import tiktoken

        enc = tiktoken.get_encoding(name)
    except Exception as exc:  # any load failure (no file, no network, unknown name)
        bundled = load_bundled(name) if configured is not None else None
        if bundled is not None:
            _warn_once(
                f"encoding-env:{name}",
                f"tiktoken encoding {name!r} could not be loaded from {configured} "
                f"({type(exc).__name__}); using the copy shipped with cachepilot",
            )
            return _TiktokenEncoding(bundled)
        hint = "the copy shipped with cachepilot is missing; " if name in BUNDLED else ""
        _warn_once(
            f"encoding:{name}",
            f"tiktoken encoding {name!r} could not be loaded ({type(exc).__name__}); token counts "
            f"are approximate ({hint}set TIKTOKEN_CACHE_DIR to a folder holding its file)",
        )
        return ApproximateEncoding(f"approximate({name})")
    return _TiktokenEncoding(enc)


class _TiktokenEncoding:
    def __init__(self, enc: object) -> None:
        self._enc = enc
        self.name: str = str(getattr(enc, "name", "tiktoken"))
        self._encode: Callable[[str], list[int]] = enc.encode_ordinary  # type: ignore[attr-defined]

    def encode_ordinary(self, text: str) -> list[int]:
        return self._encode(text)


class TokenCounter:
    """Counts and encodes text and messages, memoising by content digest.

    Thread-safe. `max_cached_tokens` bounds the memory of the encode cache (ids kept as 32-bit
    arrays, 4 bytes a token; only for texts asked to `encode`, i.e. rendered): the renderer
    keeps its own bounded memo of rendered messages, so this cache serves texts that recur in
    other messages and need not hold a whole process's history. Counts are kept separately
    (bounded by entries) and are tiny.
    """

    def __init__(
        self,
        encoding: str | Encoding = DEFAULT_ENCODING,
        *,
        max_cached_tokens: int = 8_000_000,
    ) -> None:
        if max_cached_tokens < 0:
            raise ValueError("max_cached_tokens must be >= 0")
        self.encoding: Encoding = load_encoding(encoding) if isinstance(encoding, str) else encoding
        self.max_cached_tokens = max_cached_tokens
        self._ids: OrderedDict[bytes, array[int]] = OrderedDict()
        self._ids_size = 0
        # Counts of texts seen (bounded); token ids are kept only for texts asked to `encode`:
        # keeping them for every text counted would pin 4 bytes a token of everything served.
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        # Identity memo: the same Message object passed again costs one lookup. The memo holds
        # the message weakly, so it does not keep transcripts alive.
        self._by_object: IdentityMemo[Message, int] = IdentityMemo(_MAX_MEMO_ENTRIES)
        # Key memo: a message rebuilt from the framework each call keeps its key. The entry
        # holds a content signature too, because one key can carry other content (a view's
        # edited copy of a message, or the same framework id in another thread).
        self._by_key: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def approximate(self) -> bool:
        """True when counts come from the approximate fallback."""
        return isinstance(self.encoding, ApproximateEncoding)

    @staticmethod
    def _digest(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def encode(self, text: str) -> array[int]:
        """Token ids of `text` (memoised; do not mutate the returned array)."""
        if not text:
            return array("I")
        key = self._digest(text)
        with self._lock:
            hit = self._ids.get(key)
            if hit is not None:
                self._ids.move_to_end(key)
                return hit
        ids = array("I", self.encoding.encode_ordinary(_scrub(text)))
        with self._lock:
            self._remember_count(key, len(ids))
            if self.max_cached_tokens and len(ids) <= self.max_cached_tokens:
                self._ids[key] = ids
                self._ids_size += len(ids)
                while self._ids_size > self.max_cached_tokens and self._ids:
                    _, dropped = self._ids.popitem(last=False)
                    self._ids_size -= len(dropped)
        return ids

    def count(self, text: str) -> int:
        """Number of tokens in `text` (memoised)."""
        if not text:
            return 0
        key = self._digest(text)
        with self._lock:
            known = self._counts.get(key)
            if known is not None:
                return known
            ids = self._ids.get(key)
        # A text not asked to `encode` is counted without keeping its ids.
        total = len(ids) if ids is not None else len(self.encoding.encode_ordinary(_scrub(text)))
        with self._lock:
            self._remember_count(key, total)
        return total

    def _remember_count(self, key: bytes, total: int) -> None:
        # Under the lock.
        self._counts[key] = total
        if len(self._counts) > _MAX_MEMO_ENTRIES:
            self._counts.popitem(last=False)

    def count_message(self, message: Message, key: str | None = None) -> int:
        """Tokens one message adds to a chat request (content, tool calls, overhead).

        Args:
            message: the message.
            key: its stable key (`messages.message_keys`), when the caller has it: a known key
                is answered without touching the content.
        """
        signature = _signature(message) if key is not None else 0
        with self._lock:
            if key is not None:
                known = self._by_key.get(key)
                if known is not None and known[0] == signature:
                    return known[1]
        hit = self._by_object.get(message)
        if hit is not None:
            return hit
        total = self._by_object.put(message, self._count_message_uncached(message))
        with self._lock:
            if key is not None:
                self._by_key[key] = (signature, total)
                self._by_key.move_to_end(key)
                if len(self._by_key) > _MAX_MEMO_ENTRIES:
                    self._by_key.popitem(last=False)
        return total

    def _count_message_uncached(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD_TOKENS
        for part in message.parts:
            if isinstance(part, TextPart | ReasoningPart):
                total += self.count(part.text)
            elif isinstance(part, ImagePart):
                total += IMAGE_TOKENS
        for call in message.tool_calls:
            total += self.count(call.name) + self.count(call.arguments) + 3
        if message.name:
            total += self.count(message.name)
        return total

    def count_messages(self, messages: Sequence[Message], keys: Sequence[str] | None = None) -> int:
        """Tokens of a whole message list (O(new messages) when called again on a longer one)."""
        if keys is not None:
            if len(keys) != len(messages):
                raise ValueError("keys must align with messages")
            return sum(self.count_message(m, k) for m, k in zip(messages, keys, strict=True))
        return sum(self.count_message(m) for m in messages)


def _signature(message: Message) -> int:
    # str hashes are cached on the string object, so a message rebuilt around the same
    # strings is signed without rereading its text.
    parts = tuple(
        part.text if isinstance(part, TextPart | ReasoningPart) else type(part).__name__
        for part in message.parts
    )
    calls = tuple((call.name, call.arguments) for call in message.tool_calls)
    return hash((message.role, parts, calls, message.name))


def _scrub(text: str) -> str:
    # Lone surrogates (from undecodable bytes) cannot be encoded by tiktoken.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


_COUNTERS: dict[str, TokenCounter] = {}
_COUNTERS_LOCK = threading.Lock()


def get_counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    """The process-wide shared counter for an encoding (created on first use)."""
    with _COUNTERS_LOCK:
        counter = _COUNTERS.get(encoding)
        if counter is None:
            counter = TokenCounter(encoding)
            _COUNTERS[encoding] = counter
        return counter

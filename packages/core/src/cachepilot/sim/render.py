"""Deterministic request rendering: tools, system and messages to token segments.

A request renders to a sequence of **segments** (hidden prefix, one per tool schema, the
system prompt, one per message). Each segment holds its token ids and a 64-bit content key;
the request keeps the keys and cumulative token ends as arrays, so two requests are compared
segment by segment first (C-level array comparisons) and token by token only inside the first
segment that differs.

The template is ours, not a provider's: template markers are single ids outside every real
vocabulary, and a message renders to exactly `TokenCounter.count_message(message)` tokens
(role header and separators: 4 tokens; tool call: name + arguments + 3; images: a flat
765 tokens; reasoning parts included as plain tokens). Segments are memoised per counter, so
re-rendering a long history costs one dictionary lookup per message.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, count
from operator import attrgetter, is_, is_not
from typing import Any, Literal, TypeAlias

from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart, content_hash
from cachepilot.support.identity_memo import IdentityMemo
from cachepilot.tokens import IMAGE_TOKENS, TokenCounter

__all__ = [
    "RenderedRequest",
    "Request",
    "Segment",
    "SegmentKind",
    "canonical_tool",
    "common_prefix",
    "render_request",
]

SegmentKind: TypeAlias = Literal["hidden", "tool", "system", "message"]

# Template marker ids: above every real vocabulary (o200k has ~200k ids), below 2**32.
_MARK = 0xFFFF_FF00
_START, _SEP, _END, _CALL, _ARGS, _CALL_END, _TOOL_DEF = (_MARK + i for i in range(7))
_ROLE_IDS = {"system": _MARK + 16, "user": _MARK + 17, "assistant": _MARK + 18, "tool": _MARK + 19}
_IMAGE_BASE = 0xF000_0000
"""Image placeholder ids: `_IMAGE_BASE + (digest + i) mod 2**24`, distinct per image."""
_HIDDEN_BASE = 0xE000_0000
"""Hidden-prefix ids: `_HIDDEN_BASE + i`; identical across requests, so they cache."""
_KEY = attrgetter("key")
_N_TOKENS = attrgetter("n_tokens")
_MAX_MEMO = 200_000
_MAX_MEMO_BYTES = 64 * 2**20
"""Approximate bytes each content-keyed render memo (messages, texts) may hold."""
_MAX_HIDDEN = 64


@dataclass(frozen=True, slots=True)
class Request:
    """One model request as the simulator sees it.

    Attributes:
        system: the system prompt (rendered after the tools), or None.
        messages: the conversation, in order.
        tools: tool JSON schemas, rendered as canonical JSON in the given order.
        timestamp: Unix time the request is sent; None lets the simulator use its logical clock.
        model: model name, informational.
        cache_breakpoints: message indices after which an explicit cache mark sits (Anthropic
            style `cache_control`); -1 marks the end of tools + system. None = the profile's
            default policy.
    """

    system: str | None
    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]] = ()
    timestamp: float | None = None
    model: str | None = None
    cache_breakpoints: Sequence[int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        if not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))
        if self.cache_breakpoints is not None and not isinstance(self.cache_breakpoints, tuple):
            object.__setattr__(self, "cache_breakpoints", tuple(self.cache_breakpoints))


@dataclass(frozen=True, slots=True, eq=False)
class Segment:
    """One rendered unit of a request: hidden prefix, a tool schema, the system, a message."""

    kind: SegmentKind
    key: int
    """64-bit digest of the token ids (equal keys ⇔ equal tokens, up to hash collisions)."""
    tokens: array[int]
    """Token ids (shared with the memo: do not mutate)."""
    n_tokens: int
    blocks: int
    """Content blocks as Anthropic counts them (text, image, tool_use, tool_result…), ≥ 1."""
    role: str | None = None
    has_reasoning: bool = False
    """The segment renders at least one non-empty reasoning part."""
    block_ends: tuple[int, ...] = ()
    """Messages: tokens of the segment through the end of each content block (its closing
    marker excluded); empty for the header segments."""
    block_keys: tuple[int, ...] = ()
    """Messages: the content key of the segment's tokens through each of `block_ends`. A
    message that gained blocks at its end still starts with the one it was: a provider that
    checks every block boundary finds the shorter one's cache entry inside it."""


@dataclass(frozen=True, slots=True, eq=False)
class RenderedRequest:
    """A request rendered to segments, with their keys and cumulative token ends.

    Two prefixes through segment k are equal when `keys[: k + 1]` are (one C-level array
    comparison); token-level comparison is only needed inside a differing segment.

    Attributes:
        segments: hidden prefix (when any), tools, system, then one segment per message.
        keys: `segments[i].key` as a signed 64-bit array (fast slice comparisons).
        ends: `ends[i]` = tokens through segment i.
        first_message: index of the first message segment (= number of header segments).
        hidden_tokens: size of the hidden prefix segment (0 when absent).
    """

    segments: tuple[Segment, ...]
    keys: array[int]
    ends: array[int]
    first_message: int
    hidden_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """All prompt tokens of the request."""
        return self.ends[-1] if self.ends else 0

    @property
    def n_messages(self) -> int:
        """Number of message segments."""
        return len(self.segments) - self.first_message

    def end_of(self, segment: int) -> int:
        """Tokens through segment `segment` (0 for -1)."""
        return self.ends[segment] if segment >= 0 else 0

    def message_segment(self, message_index: int) -> int:
        """Segment index of message `message_index` (-1 means the end of the header)."""
        return self.first_message + message_index

    def label(self, segment: int) -> str:
        """Human-readable name of a segment: `hidden`, `tool 2`, `system`, `message 14`."""
        seg = self.segments[segment]
        if seg.kind == "message":
            return f"message {segment - self.first_message}"
        if seg.kind == "tool":
            first_tool = next(i for i, s in enumerate(self.segments) if s.kind == "tool")
            return f"tool {segment - first_tool}"
        return seg.kind


def _key_of(tokens: array[int]) -> int:
    digest = hashlib.blake2b(tokens.tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _image_tokens(part: ImagePart) -> array[int]:
    seed = int.from_bytes(
        hashlib.blake2b(part.url.encode("utf-8", "surrogatepass"), digest_size=4).digest(),
        "little",
    )
    return array("I", (_IMAGE_BASE + ((seed + i) & 0xFF_FFFF) for i in range(IMAGE_TOKENS)))


@dataclass(frozen=True, slots=True)
class _Last:
    """The previous rendering of a memo (reused for identical leading messages)."""

    messages: Sequence[Message]
    header_keys: tuple[int, ...]
    segments: tuple[Segment, ...]
    keys: array[int]
    ends: array[int]


class _Memo:
    """Per-counter memo of rendered segments (bounded LRU)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        # Content-keyed memos (messages by their content hash, texts by themselves) hold token
        # ids: bounded by an approximate size in bytes as well as by entries. Keying messages
        # by digest keeps the memo from pinning the messages themselves.
        self.messages: OrderedDict[str, Segment] = OrderedDict()
        self.by_id: IdentityMemo[Message, Segment] = IdentityMemo(_MAX_MEMO)
        self.last: _Last | None = None
        self.last_tools: tuple[Sequence[Mapping[str, Any]], list[Segment]] = ((), [])
        self.texts: OrderedDict[tuple[str, str], Segment] = OrderedDict()
        self.sizes: dict[int, int] = {id(self.messages): 0, id(self.texts): 0}
        self.hidden: dict[int, Segment] = {}
        self.lock = threading.Lock()

    def _remember(self, table: OrderedDict[Any, Segment], key: Any, seg: Segment) -> Segment:
        with self.lock:
            known = table.get(key)
            if known is not None:
                return known
            table[key] = seg
            size = self.sizes[id(table)] + _entry_bytes(key, seg)
            while len(table) > 1 and (len(table) > _MAX_MEMO or size > _MAX_MEMO_BYTES):
                dropped, dropped_seg = table.popitem(last=False)
                size -= _entry_bytes(dropped, dropped_seg)
            self.sizes[id(table)] = size
        return seg

    def message(self, message: Message) -> Segment:
        # Fast path by identity (held weakly: the memo does not keep the message alive).
        known = self.by_id.get(message)
        if known is not None:
            return known
        digest = content_hash(message)
        seg = self.messages.get(digest)
        if seg is None:
            seg = self._remember(self.messages, digest, self._render(message))
        return self.by_id.put(message, seg)

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> list[Segment]:
        """Segments of the tool schemas (reused when the same objects come again)."""
        last_tools, last_segments = self.last_tools
        if len(last_tools) == len(tools) and all(map(is_, last_tools, tools)):
            return last_segments
        out = [self.text("tool", canonical_tool(tool)) for tool in tools]
        self.last_tools = (tools, out)
        return out

    def _render(self, message: Message) -> Segment:
        enc = self.counter.encode
        out = array("I", (_START, _ROLE_IDS[message.role]))
        if message.name:
            out.extend(enc(message.name))
        out.append(_SEP)
        # One running digest: the key through each block end, then the segment's own key
        # (the same digest `_key_of` takes of the whole segment).
        digest = hashlib.blake2b(digest_size=8)
        hashed = 0
        ends: list[int] = []
        keys: list[int] = []

        def block_end() -> None:
            nonlocal hashed
            digest.update(out[hashed:].tobytes())
            hashed = len(out)
            ends.append(hashed)
            keys.append(int.from_bytes(digest.copy().digest(), "little", signed=True))

        reasoning = False
        for part in message.parts:
            if isinstance(part, TextPart | ReasoningPart):
                out.extend(enc(part.text))
                reasoning = reasoning or (isinstance(part, ReasoningPart) and bool(part.text))
            elif isinstance(part, ImagePart):
                out.extend(_image_tokens(part))
            block_end()
        for call in message.tool_calls:
            out.append(_CALL)
            out.extend(enc(call.name))
            out.append(_ARGS)
            out.extend(enc(call.arguments))
            out.append(_CALL_END)
            block_end()
        out.append(_END)
        digest.update(out[hashed:].tobytes())
        key = int.from_bytes(digest.digest(), "little", signed=True)
        return Segment(
            "message",
            key,
            out,
            len(out),
            max(1, len(ends)),
            message.role,
            reasoning,
            tuple(ends),
            tuple(keys),
        )

    def text(self, kind: Literal["system", "tool"], text: str) -> Segment:
        hit = self.texts.get((kind, text))
        if hit is not None:
            return hit
        if kind == "system":
            out = array("I", (_START, _ROLE_IDS["system"], _SEP))
            out.extend(self.counter.encode(text))
            out.append(_END)
        else:
            out = array("I", (_TOOL_DEF,))
            out.extend(self.counter.encode(text))
            out.append(_END)
        seg = Segment(kind, _key_of(out), out, len(out), 1, "system" if kind == "system" else None)
        return self._remember(self.texts, (kind, text), seg)

    def hidden_prefix(self, n: int) -> Segment:
        seg = self.hidden.get(n)
        if seg is None:
            tokens = array("I", range(_HIDDEN_BASE, _HIDDEN_BASE + n))
            seg = Segment("hidden", _key_of(tokens), tokens, n, 1)
            with self.lock:
                if len(self.hidden) >= _MAX_HIDDEN:
                    self.hidden.clear()
                self.hidden[n] = seg
        return seg


def _entry_bytes(key: str | tuple[str, str], seg: Segment) -> int:
    """Approximate bytes one content-keyed memo entry holds (its key and its token ids)."""
    size = 200 + seg.tokens.itemsize * len(seg.tokens)
    return size + (len(key) if isinstance(key, str) else len(key[1]))


_MEMOS: weakref.WeakKeyDictionary[TokenCounter, _Memo] = weakref.WeakKeyDictionary()
_MEMOS_LOCK = threading.Lock()


def _memo_for(counter: TokenCounter) -> _Memo:
    memo = _MEMOS.get(counter)
    if memo is None:
        with _MEMOS_LOCK:
            memo = _MEMOS.get(counter)
            if memo is None:
                memo = _Memo(counter)
                _MEMOS[counter] = memo
    return memo


def canonical_tool(tool: Mapping[str, Any]) -> str:
    """Canonical JSON of one tool schema (sorted keys, compact separators)."""
    return json.dumps(tool, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def render_request(
    request: Request,
    counter: TokenCounter,
    *,
    hidden_prefix_tokens: int = 0,
) -> RenderedRequest:
    """Render a request to token segments (deterministic, memoised per message).

    Order: hidden prefix (when `hidden_prefix_tokens` > 0), tool schemas in the given order,
    the system prompt, then one segment per message.

    Raises:
        ValueError: when `hidden_prefix_tokens` is negative.
    """
    if hidden_prefix_tokens < 0:
        raise ValueError("hidden_prefix_tokens must be >= 0")
    memo = _memo_for(counter)
    header: list[Segment] = []
    if hidden_prefix_tokens:
        header.append(memo.hidden_prefix(hidden_prefix_tokens))
    header.extend(memo.tools(request.tools))
    if request.system is not None:
        header.append(memo.text("system", request.system))
    header_keys = tuple(map(_KEY, header))
    messages = request.messages
    last = memo.last
    if last is not None and last.header_keys == header_keys:
        # Consecutive requests usually share their leading Message objects: reuse the last
        # rendering up to the first object that is not the same one (a C-level scan).
        same = next(compress(count(), map(is_not, last.messages, messages)), None)
        if same is None:
            same = min(len(last.messages), len(messages))
        cut = len(header) + same
        segments = list(last.segments[:cut])
        keys = last.keys[:cut]
        ends = last.ends[:cut]
    else:
        same = 0
        segments = list(header)
        keys = array("q", header_keys)
        ends = array("q", accumulate(map(_N_TOKENS, header)))
    fresh = list(map(memo.message, messages[same:]))
    segments.extend(fresh)
    keys.extend(map(_KEY, fresh))
    running = accumulate(map(_N_TOKENS, fresh), initial=ends[-1] if ends else 0)
    next(running)
    ends.extend(running)
    frozen = tuple(segments)
    memo.last = _Last(messages, header_keys, frozen, keys, ends)
    return RenderedRequest(
        segments=frozen,
        keys=keys,
        ends=ends,
        first_message=len(header),
        hidden_tokens=hidden_prefix_tokens,
    )


def _equal_prefix_len(a: array[int], b: array[int], limit: int) -> int:
    """Length of the common prefix of two arrays, at most `limit` (binary search on slices)."""
    if a[:limit] == b[:limit]:
        return limit
    lo, hi = 0, limit  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def common_prefix(a: RenderedRequest, b: RenderedRequest) -> tuple[int, int]:
    """Common prefix of two rendered requests.

    Returns:
        `(tokens, segments)`: the number of leading tokens both share, and the number of
        leading segments that are identical (the index of the first differing segment).
    """
    limit = min(len(a.keys), len(b.keys))
    same = _equal_prefix_len(a.keys, b.keys, limit)
    tokens = a.ends[same - 1] if same else 0
    if same < limit:
        x, y = a.segments[same].tokens, b.segments[same].tokens
        tokens += _equal_prefix_len(x, y, min(len(x), len(y)))
    return tokens, same

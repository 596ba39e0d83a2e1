"""Neutral transcript model: messages, content parts, tool calls, stable keys and pairing checks.

Every framework adapter and trace loader converts into these types; every other core module
works on them only. Instances are immutable so a view can share messages with the transcript.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from cachepilot.support.identity_memo import IdentityMemo

__all__ = [
    "MISSING_RESULT",
    "ROLES",
    "ContentPart",
    "ImagePart",
    "KeyTracker",
    "Message",
    "PairingError",
    "PairingIssue",
    "PairingScanner",
    "ReasoningPart",
    "Role",
    "TextPart",
    "ToolCall",
    "check_pairing",
    "content_hash",
    "message_keys",
    "missing_results",
    "pairing_issues",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class TextPart:
    """A run of text."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image, by URL or as a data URL / base64 payload."""

    url: str
    """`https://…` or `data:<media type>;base64,…`."""
    media_type: str | None = None
    detail: str | None = None
    type: Literal["image"] = "image"


@dataclass(frozen=True, slots=True)
class ReasoningPart:
    """A reasoning / thinking item that belongs to the message that carries it."""

    text: str
    signature: str | None = None
    """Opaque provider token (Anthropic thinking signature, OpenAI encrypted content)."""
    type: Literal["reasoning"] = "reasoning"


ContentPart: TypeAlias = TextPart | ImagePart | ReasoningPart


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call requested by an assistant message."""

    id: str
    name: str
    arguments: str = "{}"
    """Arguments as the JSON text the model produced (kept verbatim: it is part of the prefix)."""

    def parsed_arguments(self) -> dict[str, Any]:
        """Arguments as a dict; `{}` when they are not a JSON object."""
        try:
            value = json.loads(self.arguments)
        except (ValueError, TypeError):
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Message:
    """One message of a transcript.

    Attributes:
        role: `system`, `user`, `assistant` or `tool`.
        content: plain text, or a tuple of parts (text, image, reasoning).
        tool_calls: calls requested by an assistant message.
        tool_call_id: for a tool message, the id of the call it answers.
        name: for a tool message, the tool's name.
        id: the framework's own id, when it has one (used as the stable key).
    """

    role: Role
    content: str | tuple[ContentPart, ...] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    id: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown message role {self.role!r}; expected one of {ROLES}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs a tool_call_id")
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role!r}")
        if isinstance(self.content, list):
            object.__setattr__(self, "content", tuple(self.content))
        if isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if not isinstance(self.content, str):
            if not isinstance(self.content, tuple):
                raise ValueError(
                    f"message content must be a str or a list of parts, not "
                    f"{type(self.content).__name__}"
                )
            for part in self.content:
                if not isinstance(part, TextPart | ImagePart | ReasoningPart):
                    raise ValueError(
                        f"message content parts must be TextPart, ImagePart or ReasoningPart, "
                        f"not {type(part).__name__}"
                    )
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise ValueError(f"tool_calls must hold ToolCall, not {type(call).__name__}")

    @property
    def text(self) -> str:
        """The message's visible text: text parts joined, reasoning and images left out."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def parts(self) -> tuple[ContentPart, ...]:
        """Content as parts (a plain string becomes one text part)."""
        if isinstance(self.content, str):
            return (TextPart(self.content),) if self.content else ()
        return self.content

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; `Message.from_dict` reverses it exactly."""
        out: dict[str, Any] = {"role": self.role}
        if isinstance(self.content, str):
            out["content"] = self.content
        else:
            out["content"] = [_part_to_dict(p) for p in self.content]
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.id is not None:
            out["id"] = self.id
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Build a message from `to_dict` output.

        Raises:
            ValueError: on an unknown role or part type, or a malformed tool call.
        """
        raw = data.get("content", "")
        content: str | tuple[ContentPart, ...]
        if raw is None:
            content = ""
        elif isinstance(raw, str):
            content = raw
        elif isinstance(raw, list):
            content = tuple(_part_from_dict(p) for p in raw)
        else:
            raise ValueError(f"message content must be a string or a list, not {type(raw)}")
        calls = tuple(
            ToolCall(id=str(c["id"]), name=str(c["name"]), arguments=str(c.get("arguments", "{}")))
            for c in data.get("tool_calls") or ()
        )
        return cls(
            role=data["role"],
            content=content,
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            id=data.get("id"),
        )


def _part_to_dict(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        out: dict[str, Any] = {"type": "image", "url": part.url}
        if part.media_type is not None:
            out["media_type"] = part.media_type
        if part.detail is not None:
            out["detail"] = part.detail
        return out
    out = {"type": "reasoning", "text": part.text}
    if part.signature is not None:
        out["signature"] = part.signature
    return out


def _part_from_dict(data: Mapping[str, Any]) -> ContentPart:
    kind = data.get("type")
    if kind == "text":
        return TextPart(str(data.get("text", "")))
    if kind == "image":
        return ImagePart(
            url=str(data["url"]), media_type=data.get("media_type"), detail=data.get("detail")
        )
    if kind == "reasoning":
        return ReasoningPart(text=str(data.get("text", "")), signature=data.get("signature"))
    raise ValueError(f"unknown content part type {kind!r}")


_HASH_MEMO: IdentityMemo[Message, str] = IdentityMemo(100_000)


def content_hash(message: Message) -> str:
    """sha256 (hex, 16 chars) of the message's canonical JSON, ignoring its framework id.

    Memoised by object identity (messages are immutable), so rehashing a long transcript
    on every call costs a lookup per message; the memo does not keep the message alive.
    """
    hit = _HASH_MEMO.get(message)
    if hit is not None:
        return hit
    return _HASH_MEMO.put(message, _content_hash(message))


def _content_hash(message: Message) -> str:
    body = message.to_dict()
    body.pop("id", None)
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def message_keys(messages: Sequence[Message]) -> list[str]:
    """Stable keys for a transcript (DESIGN §4).

    The framework's id when a message has one (`id:<id>`), else the content hash plus the
    ordinal among earlier messages with the same hash (`h:<hash>:<n>`). An id seen before in
    the transcript (some frameworks reuse one id for an action and its observation) gets an
    ordinal too (`id:<id>#<n>`), so keys stay unique. Appending messages never changes the
    keys of earlier ones.
    """
    return KeyTracker().keys(messages)


class KeyTracker:
    """`message_keys` for a transcript that grows between calls, in O(new messages).

    When the transcript starts with the very message objects of the previous call, only the
    new tail is hashed; anything else falls back to a full computation. Not thread-safe: keep
    one per thread of conversation.
    """

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._keys: list[str] = []
        self._seen: dict[str, int] = {}
        self._taken: set[str] = set()

    def keys(self, messages: Sequence[Message]) -> list[str]:
        """Stable keys of `messages` (equal to `message_keys(messages)`)."""
        known = len(self._messages)
        extends = len(messages) >= known and all(map(operator.is_, self._messages, messages))
        if not extends:
            self._messages, self._keys, self._seen, self._taken = [], [], {}, set()
            known = 0
        for message in messages[known:]:
            if message.id:
                key = f"id:{message.id}"
                ordinal = self._seen.get("\x00" + message.id, 0)
                while key in self._taken:  # an id reused, or one that looks like a reuse
                    ordinal += 1
                    key = f"id:{message.id}#{ordinal}"
                self._seen["\x00" + message.id] = ordinal
                self._taken.add(key)
                self._keys.append(key)
            else:
                digest = content_hash(message)
                ordinal = self._seen.get(digest, 0)
                self._seen[digest] = ordinal + 1
                self._keys.append(f"h:{digest}:{ordinal}")
            self._messages.append(message)
        return list(self._keys)


@dataclass(frozen=True, slots=True)
class PairingIssue:
    """One violation of the tool-call pairing rule."""

    index: int
    """Index of the offending message."""
    kind: Literal[
        "orphan_result", "unanswered_call", "duplicate_result", "duplicate_call", "interleaved"
    ]
    call_id: str
    detail: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"message {self.index}: {self.kind} (call {self.call_id}) {self.detail}".rstrip()


class PairingError(ValueError):
    """A transcript breaks tool-call pairing."""

    def __init__(self, issues: Sequence[PairingIssue]) -> None:
        self.issues = list(issues)
        shown = "; ".join(str(i) for i in self.issues[:5])
        more = f" (+{len(self.issues) - 5} more)" if len(self.issues) > 5 else ""
        super().__init__(f"tool-call pairing broken: {shown}{more}")


def pairing_issues(
    messages: Iterable[Message], *, allow_pending_tail: bool = True
) -> list[PairingIssue]:
    """List every pairing violation.

    The rule providers enforce: each assistant tool call is answered by exactly one tool
    message, and those answers directly follow the assistant message (only other answers of
    the same turn between them). A tool message must answer a call of the assistant turn it
    follows.

    Args:
        messages: the transcript.
        allow_pending_tail: calls of the last assistant turn may still be unanswered (the tool
            is running); set False to require every call answered.
    """
    scanner = PairingScanner()
    scanner.feed(messages)
    return scanner.issues(allow_pending_tail=allow_pending_tail)


class PairingScanner:
    """`pairing_issues` for a transcript that grows: feed it the new messages only.

    The issues found in a transcript are a prefix of those found in any longer one (only the
    pending calls of the last turn depend on what follows), so a scanner fed `messages[:n]`
    and then `messages[n:]` reports exactly `pairing_issues(messages)`.
    """

    def __init__(self) -> None:
        self.fed = 0
        """Messages fed so far."""
        self._issues: list[PairingIssue] = []
        self._pending: dict[str, int] = {}  # call id -> index of the assistant message
        self._answered: set[str] = set()
        self._in_tool_block = False

    def feed(self, messages: Iterable[Message]) -> None:
        """Scan the next messages of the transcript."""
        issues, pending, answered = self._issues, self._pending, self._answered
        in_tool_block = self._in_tool_block
        index = self.fed - 1
        for index, message in enumerate(messages, self.fed):
            if message.role == "tool":
                call_id = message.tool_call_id or ""
                if call_id in pending and in_tool_block:
                    del pending[call_id]
                    answered.add(call_id)
                elif call_id in answered:
                    issues.append(PairingIssue(index, "duplicate_result", call_id))
                elif call_id in pending:
                    issues.append(
                        PairingIssue(
                            index, "interleaved", call_id, "result does not follow its call"
                        )
                    )
                    del pending[call_id]
                else:
                    issues.append(PairingIssue(index, "orphan_result", call_id))
                continue
            # Any non-tool message closes the previous assistant turn's answer block.
            for call_id, at in pending.items():
                issues.append(PairingIssue(at, "unanswered_call", call_id))
            pending.clear()
            in_tool_block = False
            if message.role == "assistant" and message.tool_calls:
                for call in message.tool_calls:
                    if call.id in pending or call.id in answered:
                        issues.append(
                            PairingIssue(index, "duplicate_call", call.id, "call id reused")
                        )
                    pending[call.id] = index
                in_tool_block = True
        self._in_tool_block = in_tool_block
        self.fed = index + 1

    def issues(self, *, allow_pending_tail: bool = True) -> list[PairingIssue]:
        """The violations in the messages fed so far (see `pairing_issues`)."""
        out = list(self._issues)
        if self._pending and not allow_pending_tail:
            out.extend(
                PairingIssue(at, "unanswered_call", cid) for cid, at in self._pending.items()
            )
        return out


MISSING_RESULT = (
    "[error: this tool call produced no result (the run was interrupted or the result was "
    "lost); run it again if it is still needed]"
)
"""The content of the synthetic result `missing_results` gives a call that has none."""


def missing_results(
    messages: Sequence[Message], issues: Iterable[PairingIssue]
) -> list[tuple[int, Message]]:
    """Synthetic error results for the `unanswered_call` issues of `messages`.

    Providers reject a history whose tool call has no result. Each unanswered call gets a
    tool message with `MISSING_RESULT`, placed after the answers its assistant message has
    (before the next non-tool message), in call order. Deterministic: no time, no ids.

    Returns:
        (position, message) pairs in ascending position: insert each at its position in
        the original list (earlier insertions do not shift later positions).
    """
    wanted: dict[int, set[str]] = {}
    for issue in issues:
        if issue.kind == "unanswered_call" and 0 <= issue.index < len(messages):
            wanted.setdefault(issue.index, set()).add(issue.call_id)
    out: list[tuple[int, Message]] = []
    for index in sorted(wanted):
        end = index + 1
        while end < len(messages) and messages[end].role == "tool":
            end += 1
        for call in messages[index].tool_calls:
            if call.id in wanted[index]:
                out.append(
                    (
                        end,
                        Message(
                            role="tool",
                            content=MISSING_RESULT,
                            tool_call_id=call.id,
                            name=call.name,
                        ),
                    )
                )
    return out


def check_pairing(messages: Iterable[Message], *, allow_pending_tail: bool = True) -> None:
    """Raise `PairingError` when `pairing_issues` finds anything."""
    issues = pairing_issues(messages, allow_pending_tail=allow_pending_tail)
    if issues:
        raise PairingError(issues)

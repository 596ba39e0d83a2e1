"""What the wire readers and writers share: the error, the reading mode, content helpers."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from cachepilot.messages import ContentPart, TextPart

__all__ = [
    "SYSTEM_ROLES",
    "Api",
    "Reader",
    "WireError",
    "as_parts",
    "canonical",
    "simplify",
    "text_of",
]

Api: TypeAlias = Literal["chat", "responses", "anthropic", "gemini"]

SYSTEM_ROLES = ("system", "developer")


class WireError(ValueError):
    """A request body that is not what its API accepts.

    Attributes:
        param: the offending request parameter, when one can be named.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def canonical(value: Any) -> str:
    """Compact JSON with sorted keys (how unknown parts and items are counted)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def simplify(parts: Sequence[ContentPart]) -> str | tuple[ContentPart, ...]:
    """A lone text part becomes a plain string (both render the same tokens)."""
    if not parts:
        return ""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


def as_parts(content: str | tuple[ContentPart, ...]) -> tuple[ContentPart, ...]:
    """Content as a tuple of parts (an empty string has none)."""
    if isinstance(content, str):
        return (TextPart(content),) if content else ()
    return content


def text_of(content: str | tuple[ContentPart, ...]) -> str:
    """The text parts of `content`, one per line."""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if isinstance(p, TextPart))


class Reader:
    """Type checks of a body's fields in one of two modes.

    Strict (the replay provider, the proxy's validation): what the API would reject raises
    `WireError`. Lenient (the audit of logs and cassettes, which may hold bodies a real
    endpoint accepted anyway): a malformed value is read as well as it can be and never raises.
    """

    __slots__ = ("strict",)

    def __init__(self, strict: bool) -> None:
        self.strict = strict

    @property
    def default(self) -> str | None:
        """The stand-in for a missing required string: none when strict, "" when lenient."""
        return None if self.strict else ""

    def fail(self, message: str, where: str) -> None:
        """Raise in strict mode; do nothing in lenient mode."""
        if self.strict:
            raise WireError(message, where)

    def obj(self, value: Any, where: str) -> Mapping[str, Any] | None:
        """`value` as a JSON object (lenient: None when it is not one)."""
        if isinstance(value, Mapping):
            return value
        self.fail(f"{where} must be a JSON object, not {type(value).__name__}", where)
        return None

    def string(self, value: Any, where: str, *, default: str | None = None) -> str:
        """`value` as a string (lenient: `default`, else its `str`)."""
        if value is None and default is not None:
            return default
        if isinstance(value, str):
            return value
        self.fail(f"{where} must be a string, not {type(value).__name__}", where)
        if value is None:
            return default or ""
        return value if isinstance(value, str) else canonical(value)

    def tools(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
        """The body's tool schemas, as received (lenient: non-objects dropped)."""
        raw = body.get("tools")
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.fail("tools must be a list", "tools")
            return ()
        out = []
        for i, tool in enumerate(raw):
            found = self.obj(tool, f"tools[{i}]")
            if found is not None:
                out.append(found)
        return tuple(out)


def model_of(body: Mapping[str, Any]) -> str | None:
    """The body's `model`, when it is a string."""
    model = body.get("model")
    return model if isinstance(model, str) else None

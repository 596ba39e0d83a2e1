"""Provider context-length errors, recognised across SDKs (codes, phrases, class names)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["is_context_length_error"]


_CONTEXT_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "model_context_window_exceeded"}
)

_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context length exceeded",
    "context window exceeded",
    "exceeds the context window",
    "exceed context limit",
    "prompt is too long",
    "input is too long",
    "reduce the length of the messages",
    "too many tokens in the prompt",
    "input token count",
    "exceeds the maximum number of tokens",
    "maximum prompt length",
)

_CONTEXT_CLASS_HINTS = ("contextlength", "contextwindow", "contextoverflow")


def _codes(exc: BaseException) -> list[str]:
    out: list[str] = []
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        out.append(code)
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            for field_name in ("code", "type"):
                value = error.get(field_name)
                if isinstance(value, str):
                    out.append(value)
    return out


def is_context_length_error(exc: BaseException) -> bool:
    """True when `exc` (or an exception it was raised from) says the prompt is too long.

    Recognises OpenAI (`context_length_exceeded`, "maximum context length"), Anthropic
    ("prompt is too long"), Gemini / Bedrock / vLLM phrasings, and exception classes named
    like `ContextLengthError` / `ContextWindowExceeded` / `ContextOverflowError`.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            codes, text = _codes(current), str(current).lower()
        except Exception:  # an error that cannot describe itself names no context limit
            codes, text = [], ""
        if any(code in _CONTEXT_CODES for code in codes):
            return True
        name = type(current).__name__.lower()
        if any(hint in name for hint in _CONTEXT_CLASS_HINTS):
            return True
        if any(phrase in text for phrase in _CONTEXT_PHRASES):
            return True
        current = current.__cause__ or current.__context__
    return False

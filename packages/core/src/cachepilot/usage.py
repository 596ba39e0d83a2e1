"""Normalized usage records from every provider and framework shape we meet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Usage"]


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model call, normalized.

    `input_tokens` counts every prompt token: cache reads, cache writes and plain misses.
    """

    input_tokens: int = 0
    """All prompt tokens of the request."""
    cached_tokens: int = 0
    """Prompt tokens read from the provider cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the cache (billed at a premium by some providers)."""
    output_tokens: int = 0
    """Completion tokens, reasoning included."""
    reasoning_tokens: int = 0
    """Part of `output_tokens` spent on reasoning, when reported."""

    def __post_init__(self) -> None:
        for name in ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.cached_tokens + self.cache_write_tokens > self.input_tokens:
            raise ValueError(
                "cached_tokens + cache_write_tokens cannot exceed input_tokens "
                f"({self.cached_tokens} + {self.cache_write_tokens} > {self.input_tokens})"
            )

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens billed at the plain (miss) price."""
        return self.input_tokens - self.cached_tokens - self.cache_write_tokens

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens read from cache."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """JSON-ready dict."""
        return {
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        """Inverse of `to_dict`."""
        return cls(**{k: _int(data.get(k)) for k in cls.__slots__})

    # --- provider shapes -------------------------------------------------------------------

    @classmethod
    def from_openai_chat(cls, usage: Any) -> Usage:
        """OpenAI Chat Completions `usage` (also DeepSeek's, which adds hit/miss counts)."""
        prompt = _int(_get(usage, "prompt_tokens"))
        details = _get(usage, "prompt_tokens_details")
        cached = _int(_get(details, "cached_tokens")) if details is not None else 0
        hit = _get(usage, "prompt_cache_hit_tokens")
        if hit is not None:  # DeepSeek reports hits and misses separately
            cached = _int(hit)
            miss = _get(usage, "prompt_cache_miss_tokens")
            if miss is not None:
                prompt = max(prompt, cached + _int(miss))
        out_details = _get(usage, "completion_tokens_details")
        reasoning = _int(_get(out_details, "reasoning_tokens")) if out_details is not None else 0
        write = _int(_get(details, "cache_write_tokens")) if details is not None else 0
        return cls(
            input_tokens=prompt,
            cached_tokens=min(cached, prompt),
            cache_write_tokens=min(write, max(0, prompt - cached)),
            output_tokens=_int(_get(usage, "completion_tokens")),
            reasoning_tokens=reasoning,
        )

    @classmethod
    def from_openai_responses(cls, usage: Any) -> Usage:
        """OpenAI Responses API `usage`."""
        prompt = _int(_get(usage, "input_tokens"))
        details = _get(usage, "input_tokens_details")
        cached = _int(_get(details, "cached_tokens")) if details is not None else 0
        write = _int(_get(details, "cache_write_tokens")) if details is not None else 0
        out_details = _get(usage, "output_tokens_details")
        reasoning = _int(_get(out_details, "reasoning_tokens")) if out_details is not None else 0
        return cls(
            input_tokens=prompt,
            cached_tokens=min(cached, prompt),
            cache_write_tokens=min(write, max(0, prompt - cached)),
            output_tokens=_int(_get(usage, "output_tokens")),
            reasoning_tokens=reasoning,
        )

    @classmethod
    def from_anthropic(cls, usage: Any) -> Usage:
        """Anthropic Messages `usage` (its `input_tokens` excludes cache reads and writes)."""
        plain = _int(_get(usage, "input_tokens"))
        read = _int(_get(usage, "cache_read_input_tokens"))
        write = _int(_get(usage, "cache_creation_input_tokens"))
        return cls(
            input_tokens=plain + read + write,
            cached_tokens=read,
            cache_write_tokens=write,
            output_tokens=_int(_get(usage, "output_tokens")),
        )

    @classmethod
    def from_gemini(cls, usage: Any) -> Usage:
        """Gemini `usageMetadata` (camelCase, or the SDK's snake_case objects).

        `promptTokenCount` counts every prompt token, `cachedContentTokenCount` among them
        (implicit hits and an explicit `cachedContent` alike) and `toolUsePromptTokenCount`
        beside them (built-in tool results, billed as input); `candidatesTokenCount` excludes
        the thoughts, which are billed as output (`thoughtsTokenCount`).
        """

        def field(camel: str, snake: str) -> int:
            value = _get(usage, camel)
            return _int(value if value is not None else _get(usage, snake))

        prompt = field("promptTokenCount", "prompt_token_count")
        prompt += field("toolUsePromptTokenCount", "tool_use_prompt_token_count")
        cached = field("cachedContentTokenCount", "cached_content_token_count")
        thoughts = field("thoughtsTokenCount", "thoughts_token_count")
        return cls(
            input_tokens=max(prompt, cached),
            cached_tokens=cached,
            output_tokens=field("candidatesTokenCount", "candidates_token_count") + thoughts,
            reasoning_tokens=thoughts,
        )

    @classmethod
    def from_langchain(cls, usage_metadata: Any) -> Usage:
        """LangChain `AIMessage.usage_metadata` (`input_token_details.cache_read` etc.)."""
        prompt = _int(_get(usage_metadata, "input_tokens"))
        details = _get(usage_metadata, "input_token_details") or {}
        read = _int(_get(details, "cache_read"))
        write = _int(_get(details, "cache_creation"))
        out_details = _get(usage_metadata, "output_token_details") or {}
        return cls(
            input_tokens=max(prompt, read + write),
            cached_tokens=read,
            cache_write_tokens=write,
            output_tokens=_int(_get(usage_metadata, "output_tokens")),
            reasoning_tokens=_int(_get(out_details, "reasoning")),
        )

    @classmethod
    def from_agents_sdk(cls, usage: Any) -> Usage:
        """Agents SDK `Usage` / `RequestUsage` (Responses-style token details)."""
        return cls.from_openai_responses(usage)

"""Summarizers: the protocol, and summaries from any chat model (a LangChain chat model or
an OpenAI client, duck-typed, never imported)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from cachepilot.fold.request import (
    DEFAULT_GUIDELINE,
    FoldMode,
    FoldRequest,
    build_summary_prompt,
    chat_messages,
)
from cachepilot.messages import Message

__all__ = ["ChatModelSummarizer", "Converter", "Summarizer", "content_text"]


@runtime_checkable
class Summarizer(Protocol):
    """Turns a `FoldRequest` into summary text (no header: the fold adds it)."""

    def summarize(self, request: FoldRequest) -> str:
        """The summary of `request`."""
        ...

    async def asummarize(self, request: FoldRequest) -> str:
        """Async `summarize`."""
        ...


def content_text(content: Any) -> str:
    """The text of a chat answer's content (a string or a list of content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        pieces: list[str] = []
        for block in content:
            if isinstance(block, str):
                pieces.append(block)
            elif isinstance(block, Mapping) and block.get("type") in ("text", "output_text"):
                pieces.append(str(block.get("text", "")))
        return "".join(pieces)
    return "" if content is None else str(content)


Converter: TypeAlias = Callable[[str | None, list[Message]], Any]


class ChatModelSummarizer:
    """Summaries from any chat model: a LangChain chat model or an OpenAI client.

    Duck-typed: an object with `.chat.completions.create` is an OpenAI client (sync or
    async; `model_name` required); anything with `.invoke` / `.ainvoke` is a LangChain chat
    model (it receives OpenAI-style message dicts, or whatever `converter` makes).

    Args:
        model: the chat model or client.
        guideline: what the summary must contain: text, or a history
            `cachepilot.compress.Guideline` (e.g. `load_guideline("swe.json")`, one file per
            environment, as written by `cachepilot optimize-guideline`).
        max_tokens: output limit (`max_completion_tokens` for a client; `.bind(max_tokens=)`
            for a LangChain model); None leaves the model's default.
        mode: `suffix` when `model` is the agent's own model (bound with the agent's tools),
            so the summary request extends the cached prefix; else `standalone`.
        model_name: the `model=` argument for an OpenAI client.
        tools: suffix mode with an OpenAI client: the agent's tool schemas, sent (with
            `tool_choice="none"`) so the prefix matches the agent's requests.
        converter: builds the LangChain input from `(system, messages)`; default OpenAI dicts.

    Raises:
        ValueError: when `model` is neither kind, or a client comes without `model_name`.
    """

    def __init__(
        self,
        model: Any,
        *,
        guideline: str | Any = DEFAULT_GUIDELINE,
        max_tokens: int | None = 2_000,
        mode: FoldMode = "standalone",
        model_name: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        converter: Converter | None = None,
    ) -> None:
        completions = getattr(getattr(model, "chat", None), "completions", None)
        if completions is not None and hasattr(completions, "create"):
            self._kind: Literal["openai", "langchain"] = "openai"
            if not model_name:
                raise ValueError("an OpenAI client needs model_name (the model= argument)")
        elif hasattr(model, "invoke") or hasattr(model, "ainvoke"):
            self._kind = "langchain"
        else:
            raise ValueError(
                f"{type(model).__name__} is neither a LangChain chat model (.invoke) nor an "
                "OpenAI client (.chat.completions.create)"
            )
        if mode not in ("suffix", "standalone"):
            raise ValueError(f"mode must be 'suffix' or 'standalone', not {mode!r}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.model = model
        self.guideline: str = _guideline_text(guideline)
        self.max_tokens = max_tokens
        self.mode: FoldMode = mode
        self.model_name = model_name
        self.tools = [dict(t) for t in tools] if tools else None
        self.converter = converter

    def _openai_kwargs(self, request: FoldRequest) -> dict[str, Any]:
        system, messages = build_summary_prompt(request)
        kwargs: dict[str, Any] = {
            "model": self.model_name,
            "messages": chat_messages(system, messages),
        }
        if self.max_tokens is not None:
            kwargs["max_completion_tokens"] = self.max_tokens
        if self.tools and request.mode == "suffix":
            kwargs["tools"] = self.tools
            kwargs["tool_choice"] = "none"
        return kwargs

    def _langchain_call(self, request: FoldRequest) -> tuple[Any, Any]:
        system, messages = build_summary_prompt(request)
        payload = (
            self.converter(system, messages)
            if self.converter is not None
            else chat_messages(system, messages)
        )
        runnable = self.model
        if self.max_tokens is not None and hasattr(runnable, "bind"):
            runnable = runnable.bind(max_tokens=self.max_tokens)
        return runnable, payload

    @staticmethod
    def _openai_text(response: Any) -> str:
        return content_text(response.choices[0].message.content).strip()

    def summarize(self, request: FoldRequest) -> str:
        """Call the model synchronously.

        Raises:
            TypeError: for an async-only model or client (use `asummarize`).
        """
        if self._kind == "openai":
            response = self.model.chat.completions.create(**self._openai_kwargs(request))
            if inspect.isawaitable(response):
                _close(response)
                raise TypeError("an async OpenAI client needs asummarize / aplan_fold")
            return self._openai_text(response)
        runnable, payload = self._langchain_call(request)
        if not hasattr(runnable, "invoke"):
            raise TypeError("this model has no .invoke; use asummarize / aplan_fold")
        return content_text(getattr(runnable.invoke(payload), "content", None)).strip()

    async def asummarize(self, request: FoldRequest) -> str:
        """Call the model asynchronously (a sync model runs in a worker thread)."""
        if self._kind == "openai":
            response = self.model.chat.completions.create(**self._openai_kwargs(request))
            if inspect.isawaitable(response):
                response = await response
            return self._openai_text(response)
        runnable, payload = self._langchain_call(request)
        if hasattr(runnable, "ainvoke"):
            result = await runnable.ainvoke(payload)
        else:
            result = await asyncio.to_thread(runnable.invoke, payload)
        return content_text(getattr(result, "content", None)).strip()


def _guideline_text(guideline: object) -> str:
    """The text of a guideline given as text or as a `compress.Guideline` (duck-typed)."""
    text: object = guideline
    if not isinstance(guideline, str):
        target = getattr(guideline, "target", None)
        text = getattr(guideline, "text", None)
        if target not in (None, "history"):
            raise ValueError(f"a {target} guideline cannot guide history summaries")
    if not isinstance(text, str):
        raise ValueError(f"guideline must be a str or a Guideline, not {type(guideline).__name__}")
    if not text.strip():
        raise ValueError("guideline must not be empty")
    return text.strip()


def _close(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()

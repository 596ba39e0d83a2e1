"""One chat call to any chat model: a LangChain chat model or an OpenAI client (duck-typed).

`ChatModel` wraps the object and exposes `complete(system, prompt)` / `acomplete`, with an
output limit and a per-call timeout. The same detection rules as `fold.ChatModelSummarizer`:
an object with `.chat.completions.create` is an OpenAI client (sync or async; a model name is
required); anything with `.invoke` / `.ainvoke` is a LangChain chat model (it receives OpenAI
style message dicts). Frameworks are never imported.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable
from typing import Any, Literal

from cachepilot.fold import chat_messages, content_text
from cachepilot.messages import Message

__all__ = ["ChatModel", "CompressorTimeoutError", "content_text"]


class CompressorTimeoutError(TimeoutError):
    """A model call took longer than its timeout."""


class ChatModel:
    """A chat model or client behind one `complete` call.

    Args:
        model: a LangChain chat model (`.invoke` / `.ainvoke`) or an OpenAI client
            (`openai.OpenAI` / `openai.AsyncOpenAI`).
        model_name: the `model=` argument for an OpenAI client (required for one).
        max_tokens: output limit (`max_completion_tokens` for a client, `.bind(max_tokens=)`
            for a LangChain model); None leaves the model's default.
        timeout: seconds one call may take (None: no limit). The sync path waits in a worker
            thread, so a hung call never blocks the caller past the timeout.

    Raises:
        ValueError: when `model` is neither kind, a client comes without `model_name`, or a
            limit is not positive.
    """

    model: Any
    """The wrapped chat model or client."""

    def __init__(
        self,
        model: Any,
        *,
        model_name: str | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> None:
        if isinstance(model, ChatModel):
            model = model.model
        completions = getattr(getattr(model, "chat", None), "completions", None)
        if completions is not None and hasattr(completions, "create"):
            self.kind: Literal["openai", "langchain"] = "openai"
            if not model_name:
                raise ValueError("an OpenAI client needs model_name (the model= argument)")
        elif hasattr(model, "invoke") or hasattr(model, "ainvoke"):
            self.kind = "langchain"
        else:
            raise ValueError(
                f"{type(model).__name__} is neither a LangChain chat model (.invoke) nor an "
                "OpenAI client (.chat.completions.create)"
            )
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.model = model
        self.model_name = model_name
        self.max_tokens = max_tokens
        self.timeout = timeout

    def _payload(self, system: str | None, prompt: str) -> list[dict[str, Any]]:
        return chat_messages(system, [Message(role="user", content=prompt)])

    def _openai_kwargs(self, system: str | None, prompt: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model_name,
            "messages": self._payload(system, prompt),
        }
        if self.max_tokens is not None:
            kwargs["max_completion_tokens"] = self.max_tokens
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout  # the client's own per-request timeout
        return kwargs

    def _runnable(self) -> Any:
        runnable = self.model
        if self.max_tokens is not None and hasattr(runnable, "bind"):
            runnable = runnable.bind(max_tokens=self.max_tokens)
        return runnable

    def _call_sync(self, system: str | None, prompt: str) -> str:
        """The call itself, in the current thread (async-only models get their own loop)."""
        if self.kind == "openai":
            response = self.model.chat.completions.create(**self._openai_kwargs(system, prompt))
            if inspect.isawaitable(response):
                response = asyncio.run(_awaited(response))
            return content_text(response.choices[0].message.content).strip()
        runnable = self._runnable()
        payload = self._payload(system, prompt)
        if hasattr(runnable, "invoke"):
            result = runnable.invoke(payload)
        else:
            result = asyncio.run(_awaited(runnable.ainvoke(payload)))
        return content_text(getattr(result, "content", None)).strip()

    def complete(self, system: str | None, prompt: str) -> str:
        """Send `system` + one user message; the answer's text.

        Raises:
            CompressorTimeoutError: when the call takes longer than `timeout` (it is abandoned).
            Exception: whatever the model raises.
        """
        if self.timeout is None:
            return self._call_sync(system, prompt)
        # A daemon thread per call: an abandoned hung call never blocks the agent, nor the
        # interpreter's exit (pool workers would be joined at exit).
        box: list[tuple[bool, Any]] = []
        done = threading.Event()

        def run() -> None:
            try:
                box.append((True, self._call_sync(system, prompt)))
            except BaseException as exc:  # handed to the caller below
                box.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=run, name="cachepilot-compress", daemon=True).start()
        if not done.wait(self.timeout):
            raise CompressorTimeoutError(f"no answer within {self.timeout:g} s")
        ok, value = box[0]
        if not ok:
            raise value
        return str(value)

    async def acomplete(self, system: str | None, prompt: str) -> str:
        """Async `complete` (a sync-only model runs in a worker thread)."""
        return await asyncio.wait_for(self._acall(system, prompt), timeout=self.timeout)

    async def _acall(self, system: str | None, prompt: str) -> str:
        if self.kind == "openai":
            response = self.model.chat.completions.create(**self._openai_kwargs(system, prompt))
            if inspect.isawaitable(response):
                response = await response
            return content_text(response.choices[0].message.content).strip()
        runnable = self._runnable()
        payload = self._payload(system, prompt)
        if hasattr(runnable, "ainvoke"):
            result = await runnable.ainvoke(payload)
        else:
            result = await asyncio.to_thread(runnable.invoke, payload)
        return content_text(getattr(result, "content", None)).strip()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable

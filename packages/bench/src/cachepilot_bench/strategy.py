"""What a benchmark strategy is: something that turns a growing transcript into model requests.

Strategies are stateful per session, like the middlewares they stand for: the harness feeds
each strategy the messages that arrived since its previous call (`CallContext.new_messages`)
and asks for the request of this call. A strategy that persists edits (a summarizer that
replaces state) keeps its own message list; one that edits per call recomputes from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from cachepilot.messages import Message
from cachepilot.sim import DEFAULT_PROFILE, get_profile
from cachepilot.tokens import TokenCounter

__all__ = [
    "CallContext",
    "ClientMarks",
    "ExtraCall",
    "PreparedCall",
    "SessionContext",
    "StatefulStrategy",
    "Strategy",
    "StrategyFactory",
]

ClientMarks: TypeAlias = Literal["default", "none"]
"""`default`: the agent marks like the profile's default (Anthropic: tools + system and the
last message, as Claude Code does); `none`: the agent sets no cache marks."""


@dataclass(frozen=True, slots=True)
class SessionContext:
    """What a strategy learns when a session starts."""

    session_id: str
    system: str | None
    """The session's system prompt (None when the trace has none)."""
    tools: Sequence[Mapping[str, Any]]
    """Tool schemas (OpenAI function format) when known."""
    context_window: int
    """Usable input window of the simulated model, in tokens."""
    counter: TokenCounter
    """Shared token counter (use it; it is memoised)."""
    trace_peak_tokens: int = 0
    """Tokens of the largest full-history request (system, tools, messages; no hidden prefix)."""
    provider: str = DEFAULT_PROFILE
    """The simulated provider profile."""
    hidden_prefix_tokens: int = 0
    """Tokens the provider sees before the tools that the trace did not record."""
    client_marks: ClientMarks = "default"
    """What the agent marks itself on an explicit-breakpoint provider (see
    `BenchConfig.client_marks`)."""

    def client_breakpoints(self, messages: int) -> tuple[int, ...]:
        """The agent's own cache marks on a request of `messages` messages (message indices,
        -1 for tools + system): the profile's default, or none."""
        profile = get_profile(self.provider)
        if self.client_marks == "none" or profile.match != "breakpoints" or not messages:
            return ()
        if profile.default_breakpoints == "end":
            return (messages - 1,)
        return (-1, messages - 1)


@dataclass(frozen=True, slots=True)
class CallContext:
    """One model call of the replay."""

    call_number: int
    """0-based ordinal of the call in the session."""
    new_messages: Sequence[Message]
    """Transcript messages that arrived since the previous call (for call 0: all before it)."""
    history: Sequence[Message]
    """The full recorded transcript before this call (read-only; for reference)."""
    timestamp: float | None
    """Request time (seconds), when known."""
    system: str | None = None
    """The system prompt as the agent rendered it for this call, when it differs per call
    (e.g. a prompt with the current time); None means `SessionContext.system`."""


@dataclass(frozen=True, slots=True)
class ExtraCall:
    """A model call a strategy makes on its own (e.g. a summarizer call), billed like any call."""

    system: str | None
    messages: Sequence[Message]
    output_tokens: int
    purpose: str = "summarize"


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """The request a strategy sends for one call, and what it can recover later."""

    system: str | None
    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]] = ()
    extra_calls: Sequence[ExtraCall] = ()
    """Calls made before this one (billed before it, through the same cache)."""
    archived: Sequence[str] = field(default_factory=tuple)
    """Originals the strategy archived since its previous call (recallable later)."""
    maintenance: bool = False
    """True when the strategy deliberately rewrote already-sent history at this call."""
    cache_breakpoints: Sequence[int] | None = None
    """Explicit cache marks of the request (message indices, -1 for tools + system), the
    agent's own included, on an explicit-breakpoint provider; None: the agent's own only
    (`SessionContext.client_breakpoints`)."""


class Strategy(ABC):
    """A context-management strategy under test."""

    name: str = "strategy"
    can_recall: bool = False
    """True when the agent could fetch archived originals through a recall tool."""

    @abstractmethod
    def start(self, session: SessionContext) -> None:
        """Reset for a new session."""

    @abstractmethod
    def prepare(self, call: CallContext) -> PreparedCall:
        """Build the request of one call."""

    def stats(self) -> dict[str, float]:
        """Counters of the session so far (e.g. tokens each reduction pass removed)."""
        return {}


class StatefulStrategy(Strategy):
    """Base for strategies that keep their own copy of the conversation state."""

    def __init__(self) -> None:
        self.session: SessionContext | None = None
        self.state: list[Message] = []

    def start(self, session: SessionContext) -> None:
        self.session = session
        self.state = []

    @property
    def ctx(self) -> SessionContext:
        """The current session (raises before `start`)."""
        if self.session is None:
            raise RuntimeError(f"strategy {self.name!r} used before start()")
        return self.session

    def prepare(self, call: CallContext) -> PreparedCall:
        self.state.extend(call.new_messages)
        return self.view(call)

    def system_for(self, call: CallContext) -> str | None:
        """The system prompt the agent sends at this call."""
        return call.system if call.system is not None else self.ctx.system

    @abstractmethod
    def view(self, call: CallContext) -> PreparedCall:
        """The request built from `self.state` (after the new messages were appended)."""


StrategyFactory = Callable[[], Strategy]
"""Builds a fresh strategy instance (one per session and worker)."""

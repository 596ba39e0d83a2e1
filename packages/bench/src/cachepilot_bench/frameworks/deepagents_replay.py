"""Run a recorded session end to end through a real `deepagents.create_deep_agent` agent.

As `langgraph_replay` does for `create_agent`: the model is `ChatOpenAI` talking real HTTP to
the replay provider, which serves the recorded assistant turns and prices each request body
it receives; tools carry the recorded names and schemas and answer with the recorded outputs
(from a middleware inside deepagents' `FilesystemMiddleware` and inside cachepilot's, so both
see them as they would see a real tool's). Three ways to run a deep agent:

* `alone`: deepagents with its defaults (large-output eviction, summarization, its tools);
* `plain`: the same plus `CachePilotMiddleware` in `middleware=`, as a new user adds it;
* `recipe`: `cachepilot_langgraph.deepagents.create_cachepilot_deep_agent`.

deepagents' summarization calls the model for its summary; a replay has no model for that, so
the summarizer is deepagents' own hook (`summarizer=`) answering with the head of the history
it was given (8,000 characters) and billing what a model call would have read (the history as
text, uncached, at the provider's input price) under `summary_input_usd`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from deepagents import create_deep_agent
from deepagents.backends import StateBackend
from deepagents.middleware.summarization import (
    DEEPAGENTS_DEFAULT_SUMMARY_PROMPT,
    create_summarization_middleware,
)
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage, HumanMessage, get_buffer_string
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.sim import get_profile
from cachepilot.tokens import get_counter
from cachepilot.usage import Usage
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.frameworks.langgraph_replay import (
    AgentReplay,
    PerCallSystemPrompt,
    RecordedResults,
    invocations,
    prompt_due,
    replay_tools,
)
from cachepilot_bench.replay import ReplayProvider, ReplayScript
from cachepilot_bench.traces import Session
from cachepilot_langgraph.deepagents import (
    DeepAgentCachePilotMiddleware,
    create_cachepilot_deep_agent,
)
from cachepilot_langgraph.middleware import CachePilotMiddleware

__all__ = ["VARIANTS", "DeepAgentReplay", "Variant", "outcome_digest", "replay_deep_session"]

logger = logging.getLogger(__name__)

Variant = Literal["alone", "plain", "recipe"]
VARIANTS: tuple[Variant, ...] = ("alone", "plain", "recipe")

_SUMMARY_CHARS = 8_000


@dataclass(slots=True)
class DeepAgentReplay(AgentReplay):
    """What one session cost through a deep agent."""

    request_chars: int = 0
    """Characters of the request bodies the framework sent (billed calls)."""
    summaries: int = 0
    """deepagents summarization calls."""
    summary_input_tokens: int = 0
    summary_input_usd: float = 0.0
    final_messages: int = 0
    files: int = 0
    outcome: str = ""
    """`outcome_digest` of the final state: equal digests mean the run returned the same
    messages, files and todos."""


class _Summarizer:
    """deepagents' `summarizer=` hook: bills the read, answers with the history's head."""

    def __init__(self, provider_profile: str) -> None:
        self.calls = 0
        self.tokens = 0
        self._counter = get_counter()
        self._profile = provider_profile

    def __call__(self, messages: Sequence[BaseMessage]) -> str:
        text = get_buffer_string(list(messages))
        self.calls += 1
        self.tokens += self._counter.count(DEEPAGENTS_DEFAULT_SUMMARY_PROMPT + text)
        return text[:_SUMMARY_CHARS]

    @property
    def usd(self) -> float:
        usage = Usage(input_tokens=self.tokens, cached_tokens=0, output_tokens=0)
        return get_profile(self._profile).cost(usage).input_usd


def replay_deep_session(
    session: Session,
    variant: Variant,
    *,
    provider_profile: str = "openai-gpt-5.4-mini",
    config: Config | None = None,
) -> DeepAgentReplay:
    """Run `session` through `create_deep_agent` (`variant`) against the replay provider.

    Never raises for a session the agent cannot follow: the error is in the result.
    """
    result = DeepAgentReplay(session.id, session.source, variant)
    script = ReplayScript.from_session(session)
    if not script.prompts or script.prompts[0][0] != 0:
        result.error = "the session does not start with a user message"
        return result
    hidden = estimate_hidden_prefix(session, get_counter())
    per_call = session.meta.get("system_per_call")
    prompts = [str(p) for p in per_call] if isinstance(per_call, list) and per_call else None
    summarizer = _Summarizer(provider_profile)
    pilot: CachePilot | None = None
    with ReplayProvider(script, profile=provider_profile, hidden_prefix_tokens=hidden) as provider:
        llm = ChatOpenAI(
            model=session.model or "gpt-5.4-mini",
            base_url=provider.base_url,
            api_key=provider.api_key,  # type: ignore[arg-type]
            max_retries=0,
        )
        backend = StateBackend()
        middleware: list[AgentMiddleware[Any, Any]] = []
        if prompts:
            middleware.append(PerCallSystemPrompt(prompts))
        if variant != "alone":
            pilot = CachePilot(
                config or Config(provider=provider_profile), store=InMemoryArtifactStore()
            )
        ours: CachePilotMiddleware | None = None
        if variant == "plain":
            assert pilot is not None
            ours = CachePilotMiddleware(pilot, clock=provider.clock)
        elif variant == "recipe":
            assert pilot is not None
            ours = DeepAgentCachePilotMiddleware(pilot, clock=provider.clock)
        if ours is not None:
            middleware.append(ours)
        if variant != "recipe":
            # deepagents' own summarization, with the replay's summarizer (replaces by name).
            middleware.append(
                create_summarization_middleware(llm, backend, summarizer=RunnableLambda(summarizer))
            )
        middleware.append(RecordedResults(script))
        kwargs: dict[str, Any] = {
            "system_prompt": None if prompts else script.system,
            "backend": backend,
            "checkpointer": InMemorySaver(),
        }
        if isinstance(ours, DeepAgentCachePilotMiddleware):
            agent = create_cachepilot_deep_agent(
                llm, replay_tools(script), pilot=ours, middleware=middleware, **kwargs
            )
        else:
            agent = create_deep_agent(llm, replay_tools(script), middleware=middleware, **kwargs)
        run_config: RunnableConfig = {
            "configurable": {"thread_id": "replay"},
            "recursion_limit": 10_000,
        }
        state: dict[str, Any] = {}
        try:
            for texts in invocations(script):
                if provider.remaining == 0:
                    break
                state = agent.invoke({"messages": [HumanMessage(t) for t in texts]}, run_config)
                while provider.remaining and not prompt_due(script, len(provider.records)):
                    state = agent.invoke({"messages": []}, run_config)
        except Exception as exc:  # the replay of a strange trace must not stop a benchmark
            logger.warning("session %s (%s): %s", session.id, variant, exc, exc_info=True)
            result.error = f"{type(exc).__name__}: {exc}"
        records = provider.records
        result.unserved_turns = provider.remaining
    result.add_records(records, provider_profile)
    result.request_chars = sum(len(json.dumps(r.body)) for r in records if r.turn is not None)
    result.summaries = summarizer.calls
    result.summary_input_tokens = summarizer.tokens
    result.summary_input_usd = summarizer.usd
    result.final_messages = len(state.get("messages") or [])
    result.files = len(state.get("files") or {})
    result.outcome = outcome_digest(state)
    if pilot is not None:
        result.epochs = len(pilot.state("replay").plan.epochs)
    return result


def outcome_digest(state: Mapping[str, Any]) -> str:
    """A digest of what a run returned: each final message's type, content, tool calls (valid
    and invalid), call id and status, the files with their content, and the todos; not the ids
    and timestamps the framework draws at random."""
    messages = [
        (
            type(m).__name__,
            m.content,
            [(c.get("name"), c.get("args"), c.get("id")) for c in getattr(m, "tool_calls", [])],
            [
                (c.get("name"), c.get("args"), c.get("id"), c.get("error"))
                for c in getattr(m, "invalid_tool_calls", [])
            ],
            getattr(m, "tool_call_id", None),
            getattr(m, "status", None),
        )
        for m in state.get("messages") or []
    ]
    files = {
        path: data.get("content") if isinstance(data, Mapping) else data
        for path, data in sorted((state.get("files") or {}).items())
    }
    payload = json.dumps([messages, files, state.get("todos")], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()

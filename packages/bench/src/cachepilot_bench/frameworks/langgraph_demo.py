"""The demo: the built-in session run by a real `create_agent` agent, with and without
`CachePilotMiddleware`.

The agent is LangChain's `create_agent` with `ChatOpenAI` and the demo's deterministic tools
(they read and edit a small shipped project). By default the model is the replay provider
(`cachepilot_bench.replay`): an OpenAI-compatible endpoint on loopback that replays the
session's recorded assistant turns and reports usage computed by the cache simulator on the
request bodies the framework really sent. It is a replay, not a language model. With
`live=True` a real OpenAI-compatible endpoint answers instead (`OPENAI_API_KEY`, optional
`OPENAI_BASE_URL`) and usage comes from its responses.

The system prompt carries the date, time, cwd and a session id and changes on every call, as
many agents' prompts do; cachepilot's canonicalizer moves those values out of the prefix.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import SecretStr

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.sim import get_profile
from cachepilot.usage import Usage
from cachepilot_bench.demo_workload import (
    DEMO_TOOL_SCHEMAS,
    DemoToolState,
    build_demo_session,
    run_demo_tool,
)
from cachepilot_bench.frameworks.langgraph_replay import PerCallSystemPrompt
from cachepilot_bench.replay import ReplayProvider, ReplayScript
from cachepilot_bench.traces import Session
from cachepilot_langgraph.middleware import CachePilotMiddleware

__all__ = [
    "DemoCall",
    "DemoReport",
    "DemoRun",
    "demo_tools",
    "format_report",
    "run_demo",
    "write_chart",
]

logger = logging.getLogger(__name__)

DEMO_THREAD = "demo"


@dataclass(frozen=True, slots=True)
class DemoCall:
    """One model call of a demo run, as billed."""

    index: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    input_cost_usd: float
    cost_usd: float
    prefix_extends: bool | None = None
    """Replay only: the request started with the previous request's bytes."""


@dataclass(slots=True)
class DemoRun:
    """All calls of one agent run."""

    name: str
    calls: list[DemoCall] = field(default_factory=list)
    final_answers: list[str] = field(default_factory=list)
    recalls: int = 0
    epochs: int = 0
    request_log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def input_cost_usd(self) -> float:
        """Input cost of the run (cached + uncached + cache writes)."""
        return sum(c.input_cost_usd for c in self.calls)

    @property
    def cost_usd(self) -> float:
        """Total cost (input and output)."""
        return sum(c.cost_usd for c in self.calls)

    @property
    def hit_rate(self) -> float:
        """Cached input tokens / input tokens."""
        total = sum(c.input_tokens for c in self.calls)
        return sum(c.cached_tokens for c in self.calls) / total if total else 0.0

    @property
    def prefix_breaks(self) -> int:
        """Requests that did not extend the previous one (replay only)."""
        return sum(1 for c in self.calls[1:] if c.prefix_extends is False)


@dataclass(slots=True)
class DemoReport:
    """The two runs, plus what `cachepilot bench` predicts for the same session."""

    provider: str
    mode: str
    runs: dict[str, DemoRun]
    predicted_input_cost_usd: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """cachepilot's input cost over vanilla's."""
        base = self.runs["vanilla"].input_cost_usd
        return self.runs["cachepilot"].input_cost_usd / base if base else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (per-call rows included)."""
        return {
            "provider": self.provider,
            "mode": self.mode,
            "ratio_input_cost": round(self.ratio, 4),
            "predicted_input_cost_usd": {
                k: round(v, 6) for k, v in self.predicted_input_cost_usd.items()
            },
            "runs": {
                name: {
                    "calls": len(run.calls),
                    "input_cost_usd": round(run.input_cost_usd, 6),
                    "cost_usd": round(run.cost_usd, 6),
                    "hit_rate": round(run.hit_rate, 4),
                    "prefix_breaks": run.prefix_breaks,
                    "recalls": run.recalls,
                    "maintenance_epochs": run.epochs,
                    "final_answers": run.final_answers,
                    "per_call": [
                        {
                            "input_tokens": c.input_tokens,
                            "cached_tokens": c.cached_tokens,
                            "output_tokens": c.output_tokens,
                            "input_cost_usd": round(c.input_cost_usd, 6),
                        }
                        for c in run.calls
                    ],
                }
                for name, run in self.runs.items()
            },
        }


def demo_tools(state: DemoToolState) -> list[BaseTool]:
    """The demo's tools (read_file, list_dir, grep, bash, fetch_url, edit_file) as LangChain
    tools over one `DemoToolState` (a private copy of the shipped project)."""

    def make(schema: dict[str, Any]) -> BaseTool:
        function = schema["function"]
        name = str(function["name"])

        def run(**kwargs: Any) -> str:
            return run_demo_tool(name, json.dumps(kwargs), state)

        return StructuredTool(
            name=name,
            description=str(function.get("description", "")),
            args_schema=dict(function["parameters"]),
            func=run,
        )

    return [make(s) for s in DEMO_TOOL_SCHEMAS]


class _UsageRecorder(BaseCallbackHandler):
    """Collects `usage_metadata` of every model response (live runs)."""

    def __init__(self) -> None:
        self.usages: list[Usage] = []

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if isinstance(message, AIMessage) and message.usage_metadata:
                    self.usages.append(Usage.from_langchain(message.usage_metadata))


def _tasks(session: Session) -> list[str]:
    return [m.text for m in session.messages if m.role == "user"]


def _system_prompts(session: Session) -> list[str]:
    per_call = session.meta.get("system_per_call")
    if isinstance(per_call, list) and per_call:
        return [str(p) for p in per_call]
    first = session.messages[0] if session.messages else None
    return [first.text] if first is not None and first.role == "system" else [""]


def _run_agent(
    session: Session,
    *,
    with_cachepilot: bool,
    provider_profile: str,
    model: str,
    base_url: str | None,
    api_key: str,
    clock: Callable[[], float] | None,
    recursion_limit: int,
    anthropic: bool = False,
    client_marks: str = "default",
) -> tuple[DemoRun, _UsageRecorder, CachePilot | None]:
    name = "cachepilot" if with_cachepilot else "vanilla"
    middleware: list[AgentMiddleware[Any, Any]] = [PerCallSystemPrompt(_system_prompts(session))]
    llm: Any
    if anthropic:
        from langchain_anthropic import ChatAnthropic

        llm = ChatAnthropic(  # type: ignore[call-arg]
            model=model,
            base_url=(base_url or "").removesuffix("/v1"),
            api_key=SecretStr(api_key),
            max_retries=0,
        )
        if client_marks == "default":
            # What a LangChain user of Claude adds for caching: system prompt, last tool and
            # the conversation end marked by LangChain's own middleware.
            from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware

            one_hour = provider_profile.endswith("-1h")
            middleware.append(AnthropicPromptCachingMiddleware(ttl="1h" if one_hour else "5m"))
    else:
        from langchain_openai import ChatOpenAI

        llm = ChatOpenAI(model=model, base_url=base_url, api_key=api_key, max_retries=0)  # type: ignore[arg-type]
    pilot: CachePilot | None = None
    if with_cachepilot:
        pilot = CachePilot(Config(provider=provider_profile), store=InMemoryArtifactStore())
        middleware.append(CachePilotMiddleware(pilot, clock=clock))
    agent = create_agent(
        llm, demo_tools(DemoToolState()), middleware=middleware, checkpointer=InMemorySaver()
    )
    recorder = _UsageRecorder()
    config: RunnableConfig = {
        "configurable": {"thread_id": DEMO_THREAD},
        "callbacks": [recorder],
        "recursion_limit": recursion_limit,
    }
    run = DemoRun(name)
    for task in _tasks(session):
        out: dict[str, Any] = agent.invoke({"messages": [HumanMessage(task)]}, config)
        last = out["messages"][-1]
        run.final_answers.append(str(last.content))
    if pilot is not None:
        state = pilot.state(DEMO_THREAD)
        run.recalls = state.recalls
        run.epochs = len(state.plan.epochs)
    return run, recorder, pilot


def _has_anthropic() -> bool:
    try:
        import langchain_anthropic  # noqa: F401
    except ImportError:
        logger.warning(
            "langchain-anthropic is not installed: the agents use the Chat Completions API, "
            "whose requests carry no cache marks (the simulator marks them as a client would)"
        )
        return False
    return True


def _priced(usage: Usage, profile: str) -> tuple[float, float]:
    cost = get_profile(profile).cost(usage)
    return cost.input_usd, cost.input_usd + cost.output_usd


def run_demo(
    *,
    provider_profile: str = "openai-gpt-5.4-mini",
    live: bool = False,
    model: str = "gpt-5.4-mini",
    recursion_limit: int = 400,
    predict: bool = True,
    session: Session | None = None,
    client_marks: str = "default",
) -> DemoReport:
    """Run the demo session with and without cachepilot and price every call.

    Args:
        provider_profile: prices and cache rules (`cachepilot.sim` profile name).
        live: use a real endpoint (`OPENAI_API_KEY`, optional `OPENAI_BASE_URL`) instead of
            the replay provider.
        model: model name sent to the endpoint.
        recursion_limit: LangGraph step limit per task.
        predict: also replay the session through `cachepilot bench` for comparison.
        session: the session to run (default: the built-in demo session).
        client_marks: with a breakpoint profile (`anthropic`, `anthropic-1h`) on the replay
            provider the agents talk to it through `ChatAnthropic`; `default` gives both
            agents LangChain's `AnthropicPromptCachingMiddleware` (the marks a user sets),
            `none` leaves only the marks cachepilot places itself.

    Raises:
        ValueError: `live` without `OPENAI_API_KEY`.
    """
    session = session or build_demo_session()
    runs: dict[str, DemoRun] = {}
    if live:
        api_key = os.environ.get("OPENAI_API_KEY", "")
        if not api_key:
            raise ValueError("--live needs OPENAI_API_KEY (and optionally OPENAI_BASE_URL)")
        base_url = os.environ.get("OPENAI_BASE_URL") or None
        for with_cp in (False, True):
            run, recorder, _ = _run_agent(
                session,
                with_cachepilot=with_cp,
                provider_profile=provider_profile,
                model=model,
                base_url=base_url,
                api_key=api_key,
                clock=None,
                recursion_limit=recursion_limit,
            )
            for i, usage in enumerate(recorder.usages):
                input_usd, total_usd = _priced(usage, provider_profile)
                run.calls.append(
                    DemoCall(
                        i,
                        usage.input_tokens,
                        usage.cached_tokens,
                        usage.output_tokens,
                        input_usd,
                        total_usd,
                    )
                )
            runs[run.name] = run
    else:
        if client_marks not in ("default", "none"):
            raise ValueError(f"client_marks must be 'default' or 'none', not {client_marks!r}")
        # A breakpoint provider caches only what a request marks: speak its own API, so the
        # marks (the user's and cachepilot's) are what decides the hits.
        anthropic = get_profile(provider_profile).match == "breakpoints" and _has_anthropic()
        script = ReplayScript.from_session(session)
        for with_cp in (False, True):
            with ReplayProvider(script, profile=provider_profile) as provider:
                run, _, _ = _run_agent(
                    session,
                    with_cachepilot=with_cp,
                    provider_profile=provider_profile,
                    model=model,
                    base_url=provider.base_url,
                    api_key=provider.api_key,
                    clock=provider.clock,
                    recursion_limit=recursion_limit,
                    anthropic=anthropic,
                    client_marks=client_marks,
                )
                for record in provider.records:
                    input_usd, total_usd = _priced(record.usage, provider_profile)
                    run.calls.append(
                        DemoCall(
                            record.index,
                            record.usage.input_tokens,
                            record.usage.cached_tokens,
                            record.usage.output_tokens,
                            input_usd,
                            total_usd,
                            record.prefix_extends,
                        )
                    )
                    run.request_log.append(
                        {"api": record.api, "request": record.body, "usage": record.wire_usage}
                    )
                if provider.remaining:
                    logger.warning(
                        "%s run ended with %d recorded turns unserved", run.name, provider.remaining
                    )
            runs[run.name] = run
    report = DemoReport(provider_profile, "live" if live else "replay", runs)
    if predict:
        report.predicted_input_cost_usd = _bench_prediction(session, provider_profile)
    return report


def _bench_prediction(session: Session, provider_profile: str) -> dict[str, float]:
    from cachepilot_bench import BenchConfig, run_bench

    results = run_bench(
        [session], ["vanilla", "cachepilot"], BenchConfig(provider=provider_profile, workers=1)
    )
    out: dict[str, float] = {}
    for r in results:
        out[r.strategy] = sum(c.input_cost_usd for c in r.calls if c.kind != "round_trip")
        # The bench also charges a fetch for each fact the view lost; a replayed agent never
        # recalls, so those are reported apart.
        fetches = sum(c.input_cost_usd for c in r.calls if c.kind == "round_trip")
        if fetches:
            out[f"{r.strategy}_round_trips"] = fetches
    return out


def format_report(report: DemoReport) -> str:
    """The per-call table and the totals, as text."""
    vanilla, ours = report.runs["vanilla"], report.runs["cachepilot"]
    lines = [
        f"built-in demo session through langchain create_agent + ChatOpenAI "
        f"({'live endpoint' if report.mode == 'live' else 'replay provider'}, "
        f"prices {report.provider})",
        "",
        f"{'call':>4} | {'vanilla in':>10} {'cached':>8} {'$ in':>9} | "
        f"{'cachepilot in':>13} {'cached':>8} {'$ in':>9}",
    ]
    for i in range(max(len(vanilla.calls), len(ours.calls))):
        left = vanilla.calls[i] if i < len(vanilla.calls) else None
        right = ours.calls[i] if i < len(ours.calls) else None
        a = (
            f"{left.input_tokens:>10,} {left.cached_tokens:>8,} {left.input_cost_usd:>9.5f}"
            if left
            else " " * 29
        )
        b = (
            f"{right.input_tokens:>13,} {right.cached_tokens:>8,} {right.input_cost_usd:>9.5f}"
            if right
            else ""
        )
        lines.append(f"{i:>4} | {a} | {b}")
    lines.append("")
    for run in (vanilla, ours):
        lines.append(
            f"{run.name:>10}: {len(run.calls)} calls, input ${run.input_cost_usd:.4f}, "
            f"total ${run.cost_usd:.4f}, hit rate {run.hit_rate:.1%}, "
            f"prefix breaks {run.prefix_breaks}, recalls {run.recalls}, "
            f"maintenance epochs {run.epochs}"
        )
    lines.append(f"input cost ratio cachepilot/vanilla: {report.ratio:.3f}")
    if report.predicted_input_cost_usd:
        pred = report.predicted_input_cost_usd
        parts = [f"{k} ${v:.4f}" for k, v in pred.items() if not k.endswith("_round_trips")]
        line = "cachepilot bench predicts for the same session: " + ", ".join(parts)
        fetches = pred.get("cachepilot_round_trips")
        if fetches:
            line += f" (plus ${fetches:.4f} it charges for recall round trips)"
        lines.append(line)
    return "\n".join(lines)


def write_chart(report: DemoReport, path: str | Path) -> Path:
    """Cumulative input cost per call of both runs, as a PNG.

    Raises:
        ValueError: when matplotlib is not installed (the `plot` extra of cachepilot).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValueError("the chart needs matplotlib: pip install 'cachepilot[plot]'") from exc
    target = Path(path)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for run, colour in (
        (report.runs["vanilla"], "#c0392b"),
        (report.runs["cachepilot"], "#1e8449"),
    ):
        total = 0.0
        cumulative = []
        for call in run.calls:
            total += call.input_cost_usd
            cumulative.append(total)
        top.plot(
            range(len(cumulative)), cumulative, label=f"{run.name} (${total:.3f})", color=colour
        )
        bottom.plot(
            range(len(run.calls)),
            [c.cached_tokens / c.input_tokens if c.input_tokens else 0.0 for c in run.calls],
            label=run.name,
            color=colour,
        )
    top.set_ylabel("cumulative input cost, USD")
    top.set_title(
        f"cachepilot demo · create_agent + ChatOpenAI · {report.mode} · {report.provider}"
    )
    top.legend()
    bottom.set_ylabel("cached share of input")
    bottom.set_xlabel("model call")
    bottom.set_ylim(0, 1.05)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target

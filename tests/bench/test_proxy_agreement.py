"""The proxy and the bench price the same session alike (`benchmarks/proxy_replay.py` against
`cachepilot bench`): what the proxy sends upstream, request by request, costs what the bench's
cachepilot strategy costs on the same session under the same settings."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from cachepilot.messages import Message, ToolCall
from cachepilot.sim import Request, render_request
from cachepilot.tokens import get_counter
from cachepilot.usage import Usage
from cachepilot_bench.harness import BenchConfig, run_session
from cachepilot_bench.registry import make_strategy
from cachepilot_bench.synthetic import module_source
from cachepilot_bench.traces import RecordedCall, Session, load_paths

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"
PROFILE = "anthropic-1h"
HIDDEN = 20_000
"""Tokens of the unrecorded system prompt and tools, as a Claude Code trace bills them."""


def load_replay() -> Any:
    spec = importlib.util.spec_from_file_location(
        "proxy_replay_benchmark", ROOT / "benchmarks" / "proxy_replay.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def made_up_session(reads: int = 40) -> Session:
    """A Claude Code-shaped session without its system prompt: a task, then the agent reads
    one module per call (a few thousand tokens each), then answers."""
    messages = [Message(role="user", content="Find where the handlers overflow and fix it.")]
    calls: list[RecordedCall] = []
    start = 1_750_000_000.0
    for i in range(reads):
        path = f"src/pkg/module_{i}.py"
        call = ToolCall(id=f"toolu_{i:03d}", name="Read", arguments=json.dumps({"path": path}))
        calls.append(RecordedCall(index=len(messages), timestamp=start + 40 * i))
        messages.append(Message(role="assistant", content=f"Reading {path}.", tool_calls=(call,)))
        messages.append(
            Message(
                role="tool",
                content=module_source(i, 9_000 + 1_500 * (i % 5)),
                tool_call_id=call.id,
                name="Read",
            )
        )
    calls.append(RecordedCall(index=len(messages), timestamp=start + 40 * reads))
    messages.append(Message(role="assistant", content="handler_3_2 overflows; fixed."))
    shown = render_request(Request(None, messages[:1]), get_counter()).total_tokens
    calls[0] = RecordedCall(
        index=calls[0].index, timestamp=calls[0].timestamp, usage=Usage(shown + HIDDEN, 0, 0)
    )
    return Session(id="made-up", source="claude-code", messages=messages, calls=calls)


def bench(session: Session, strategy: str) -> tuple[float, int]:
    """The bench's input cost of `strategy` on `session`, and its maintenance points."""
    result = run_session(session, make_strategy(strategy), BenchConfig(provider=PROFILE))
    assert result.error is None
    return sum(c.input_cost_usd for c in result.calls), sum(c.maintenance for c in result.calls)


def both(session: Session, fold_min_tokens: int) -> dict[str, float]:
    """The proxy replay's and the bench's cost ratios to the straight requests, and the
    bench's maintenance points."""
    replay = load_replay()
    config = replay.pilot_config(PROFILE, [f"fold_min_tokens={fold_min_tokens}"])
    row = replay.replay_session(session, PROFILE, config)
    ours, folds = bench(session, f"cachepilot[fold_min_tokens={fold_min_tokens}]")
    return {
        "proxy": row["proxy"]["input_cost_usd"] / row["straight"]["input_cost_usd"],
        "bench": ours / bench(session, "vanilla")[0],
        "folds": folds,
    }


@pytest.mark.parametrize("fold_min_tokens", [6_000, 15_000])
def test_proxy_replay_and_bench_agree_on_a_made_up_session(fold_min_tokens: int) -> None:
    ratios = both(made_up_session(), fold_min_tokens)
    # The session folds several times: the agreement covers rewrites of the history.
    assert ratios["folds"] >= 5
    # The proxy saves on this session (0.89 x with the default fold settings).
    assert ratios["proxy"] < 0.9
    assert ratios["proxy"] == pytest.approx(ratios["bench"], rel=0.005)


def test_replayed_requests_mark_the_header_as_claude_code_does() -> None:
    from cachepilot.audit.convert import anthropic_body

    tools = [{"type": "function", "function": {"name": "Read", "parameters": {}}}]
    messages = [Message(role="user", content="hi")]
    mark = {"type": "ephemeral", "ttl": "1h"}
    # No recorded system prompt: the mark on the end of the header goes on the last tool.
    body = anthropic_body(None, messages, tools, cache_control=mark)
    assert body["tools"][-1]["cache_control"] == mark
    assert body["messages"][-1]["content"][-1]["cache_control"] == mark
    body = anthropic_body("You are terse.", messages, tools, cache_control=mark)
    assert body["system"][-1]["cache_control"] == mark
    assert "cache_control" not in body["tools"][-1]
    assert "cache_control" not in anthropic_body(None, messages, tools)["tools"][-1]


@pytest.mark.traces
@pytest.mark.parametrize("fold_min_tokens", [6_000, 15_000])
def test_proxy_replay_and_bench_agree_on_a_claude_code_session(fold_min_tokens: int) -> None:
    path = (
        TRACES / "claude_code_spotter/test/fixtures/transcripts/"
        "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    )
    if not path.is_file():
        pytest.skip(f"shared traces not found at {TRACES}")
    session = load_paths([path])[0]  # the part before Claude Code's own compaction
    ratios = both(session, fold_min_tokens)
    assert ratios["proxy"] < 0.8
    assert ratios["proxy"] == pytest.approx(ratios["bench"], rel=0.03)

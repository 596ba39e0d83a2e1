"""`cachepilot+lc-clear-tool-uses`: cachepilot's view, then LangChain's `ClearToolUsesEdit`."""

from __future__ import annotations

import json

from cachepilot.maintenance.policy import MaintenanceConfig, is_stub
from cachepilot.messages import Message, ToolCall, pairing_issues
from cachepilot.pilot.facade import Config
from cachepilot.tokens import get_counter
from cachepilot_bench.peers.cachepilot_lc_clear import CachePilotLcClearToolUses
from cachepilot_bench.registry import make_strategy
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext

SYSTEM = "You are a careful coding agent."
TOOLS = ({"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},)


def transcript(results: int, size: int) -> list[Message]:
    msgs = [Message("user", "run every step", id="u0")]
    for k in range(results):
        call = ToolCall(f"c{k}", "bash", json.dumps({"cmd": f"step {k}"}))
        msgs.append(Message("assistant", f"step {k}", tool_calls=(call,), id=f"a{k}"))
        body = f"out {k} " + "".join(f"{(k * 31 + i) % 997:03d} " for i in range(size // 4))
        msgs.append(Message("tool", body, tool_call_id=f"c{k}", name="bash", id=f"t{k}"))
    msgs.append(Message("assistant", "done", id="f"))
    return msgs


def replay(messages: list[Message], config: Config | None = None) -> list[PreparedCall]:
    strategy = CachePilotLcClearToolUses(config)
    strategy.start(
        SessionContext(
            session_id="s",
            system=SYSTEM,
            tools=TOOLS,
            context_window=1_000_000,
            counter=get_counter(),
        )
    )
    calls: list[PreparedCall] = []
    last = 0
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        context = CallContext(len(calls), tuple(messages[last:i]), tuple(messages[:i]), None)
        calls.append(strategy.prepare(context))
        last = i
    return calls


def test_registered_under_its_name() -> None:
    assert make_strategy("cachepilot+lc-clear-tool-uses").name == "cachepilot+lc-clear-tool-uses"


def test_clears_past_the_trigger_and_leaves_cachepilots_stubs() -> None:
    # Results under cachepilot's size gate, the last 250k tokens of them protected from its
    # pruning and no fold: its view passes LangChain's 100k trigger (approximate tokens)
    # while it stubs the older ones.
    config = Config(
        maintenance=MaintenanceConfig(prune=True, protect_tool_tokens=250_000, fold=False)
    )
    calls = replay(transcript(80, 10_000), config)
    final = {m.tool_call_id: m.text for m in calls[-1].messages if m.role == "tool"}
    assert "[cleared]" in final.values()
    assert any(is_stub(v) for v in final.values())
    assert "[cleared]" not in list(final.values())[-3:]
    for number, call in enumerate(calls):
        assert pairing_issues(call.messages) == []
        assert "[cleared]" not in call.archived
        for message in call.messages:
            if message.role != "tool" or not is_stub(message.text):
                continue
            # A stub cachepilot showed stays that stub: LangChain never clears it.
            for later in calls[number:]:
                shown = {m.tool_call_id: m.text for m in later.messages if m.role == "tool"}
                assert shown[message.tool_call_id] == message.text


def test_below_the_trigger_it_is_cachepilot() -> None:
    calls = replay(transcript(6, 4_000))
    assert all(m.text != "[cleared]" for c in calls for m in c.messages)

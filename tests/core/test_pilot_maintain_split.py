"""`maintain` + `prepare(maintain=False)` (a graph's maintenance node, then its model call)
builds the same requests and plan as `prepare` alone."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot.facade import CachePilot, Config

SETTINGS: dict[str, Any] = {
    "protect_tool_tokens": 400,
    "protect_results": 1,
    "min_prune_tokens": 100,
    "schedule": "fixed",
}
SYSTEM = "You are a coding agent. Today is 2026-11-21, cwd /home/dev/app."


def _transcripts(turns: int) -> list[list[Message]]:
    messages: list[Message] = [Message("user", "Fix the build.", id="u0")]
    out = []
    for turn in range(turns):
        out.append(list(messages))
        call = ToolCall(f"c{turn}", "bash", json.dumps({"command": f"make t{turn}"}))
        messages.append(Message("assistant", "", tool_calls=(call,), id=f"a{turn}"))
        body = "\n".join(hashlib.sha256(f"{turn}/{i}".encode()).hexdigest() for i in range(60))
        messages.append(Message("tool", body, tool_call_id=call.id, name="bash", id=f"t{turn}"))
    return out


def _json(prepared: tuple[str | None, list[Message], list[dict[str, Any]]]) -> str:
    system, messages, tools = prepared
    return json.dumps([system, [m.to_dict() for m in messages], tools])


def test_split_matches_prepare() -> None:
    whole = CachePilot(Config(maintenance=SETTINGS), store=InMemoryArtifactStore())
    split = CachePilot(Config(maintenance=SETTINGS), store=InMemoryArtifactStore())
    appended = 0
    for n, transcript in enumerate(_transcripts(24)):
        now = 1_000.0 + 10 * n
        expected = whole.prepare(SYSTEM, transcript, thread="t", now=now)
        appended += split.maintain(SYSTEM, transcript, thread="t", now=now)
        got = split.prepare(SYSTEM, transcript, thread="t", now=now, maintain=False)
        assert _json(got) == _json(expected), f"call {n}"
    assert appended > 0
    assert split.state("t").plan == whole.state("t").plan
    assert split.state("t").calls == whole.state("t").calls == 24


def test_maintain_without_prepare_changes_only_the_plan() -> None:
    pilot = CachePilot(Config(maintenance=SETTINGS), store=InMemoryArtifactStore())
    transcripts = _transcripts(12)
    for n, transcript in enumerate(transcripts[:-1]):
        pilot.prepare(SYSTEM, transcript, thread="t", now=1_000.0 + n)
    before = pilot.state("t").model_copy(deep=True)
    appended = asyncio.run(pilot.amaintain(SYSTEM, transcripts[-1], thread="t", now=2_000.0))
    after = pilot.state("t")
    assert len(after.plan.epochs) == len(before.plan.epochs) + int(appended)
    assert after.calls == before.calls
    assert after.last_request_time == before.last_request_time
    assert after.revision > before.revision
    if not appended:
        assert after.plan == before.plan and after.canonical == before.canonical

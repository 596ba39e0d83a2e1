"""Tool calls left without a result get the synthetic error result providers require.

Only the request (the view) gets it, deterministically; the framework's transcript is never
changed, and the calls of the last turn that are still running are left alone.
"""

from __future__ import annotations

from cachepilot import CachePilot, InMemoryArtifactStore
from cachepilot.messages import MISSING_RESULT, Message, ToolCall, missing_results, pairing_issues


def interrupted() -> list[Message]:
    calls = (
        ToolCall("a", "bash", '{"command": "ls"}'),
        ToolCall("b", "bash", '{"command": "pwd"}'),
    )
    return [
        Message("user", "look around"),
        Message("assistant", "", tool_calls=calls),
        Message("tool", "file.txt", tool_call_id="a", name="bash"),
        Message("user", "never mind, continue"),  # b was interrupted
    ]


def test_missing_results_are_placed_after_the_turns_answers() -> None:
    messages = interrupted()
    found = missing_results(messages, pairing_issues(messages))
    assert [(at, m.tool_call_id, m.name, m.content) for at, m in found] == [
        (3, "b", "bash", MISSING_RESULT)
    ]


def test_prepare_answers_interrupted_calls_in_the_view_only() -> None:
    pilot = CachePilot(store=InMemoryArtifactStore())
    transcript = interrupted()
    frozen = list(transcript)
    _, view, _ = pilot.prepare("sys", transcript, (), "t")
    assert transcript == frozen
    assert [m.role for m in view] == ["user", "assistant", "tool", "tool", "user"]
    assert view[3].tool_call_id == "b" and view[3].content == MISSING_RESULT
    assert pairing_issues(view, allow_pending_tail=False) == []
    # Deterministic and append-only on the next call.
    more = [*transcript, Message("assistant", "ok")]
    _, again, _ = pilot.prepare("sys", more, (), "t")
    assert again[: len(view)] == view


def test_calls_still_running_are_not_answered() -> None:
    pilot = CachePilot(store=InMemoryArtifactStore())
    transcript = interrupted()[:3]  # b may still be running: its turn is the last one
    _, view, _ = pilot.prepare("sys", transcript, (), "t")
    assert [m.role for m in view] == ["user", "assistant", "tool"]


def test_breakpoints_address_the_request_as_sent() -> None:
    pilot = CachePilot(store=InMemoryArtifactStore())
    transcript = interrupted()
    system, view, tools = pilot.prepare("You are a coder. " * 300, transcript, (), "t")
    marks = pilot.cache_breakpoints(system, view, tools, "t", profile="anthropic")
    assert marks and max(marks) == len(view) - 1

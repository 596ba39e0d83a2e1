"""Trace loaders: real files from ../shared/data/traces (when present) and tiny hand-made ones."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cachepilot.messages import (
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCall,
    pairing_issues,
)
from cachepilot.usage import Usage
from cachepilot_bench.traces import FORMATS, Session, detect_format, load_file, load_paths
from cachepilot_bench.traces._common import NO_RESULT, repair_pairing

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
CC = "claude_code_spotter/test/fixtures/transcripts"
GEMINI = "mini_swe_agent_gemini3/swebench_results/20251118_gemini-3-pro-74pct/trajs"
DEEPSEEK = "mini_swe_agent_deepseek_toolcall/output"
TAU = "tau_bench/historical_trajectories/gpt-4o-airline.json"
OPENHANDS = "openhands/evaluation/benchmarks/multi_swe_bench/examples/output.jsonl"
SWE = "swe_agent"


def _check_invariants(sessions: list[Session]) -> None:
    ids = [s.id for s in sessions]
    assert len(ids) == len(set(ids))
    for s in sessions:
        assert not s.id.startswith("/")
        assert pairing_issues(s.messages, allow_pending_tail=True) == []
        assert s.assistant_indices, s.id
        for call in s.calls:
            assert s.messages[call.index].role == "assistant"
        assert [c.index for c in s.calls] == sorted({c.index for c in s.calls})
        assert isinstance(s.meta["repairs"], int)
        system = [i for i, m in enumerate(s.messages) if m.role == "system"]
        assert system in ([], [0])


# --- real traces ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> dict[str, Session]:
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not found at {TRACES}")
    sessions = load_paths([TRACES])
    return {s.id: s for s in sessions}


def _raw_rows(rel: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TRACES / rel).read_text().splitlines() if line.strip()]


@pytest.mark.traces
def test_real_counts_and_invariants(real: dict[str, Session]) -> None:
    sessions = list(real.values())
    _check_invariants(sessions)
    by_source = Counter(s.source for s in sessions)
    assert by_source == {
        "claude-code": 12,
        "mini-swe-agent-1": 15,
        "mini-swe-agent-1.1": 13,
        "swe-agent": 11,
        "tau-bench": 200,
        "openhands": 3,
    }
    # deterministic: a second load gives the same ids in the same order
    assert [s.id for s in load_paths([TRACES])] == list(real)


@pytest.mark.traces
def test_real_claude_code_short_fixture(real: dict[str, Session]) -> None:
    s = real[f"{CC}/short.jsonl"]
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "tool", "user"]
    assert s.messages[0].content == "mix phx.server doesnt seem to start"
    turn = s.messages[1]
    assert turn.id == "msg_01MKH1ccEGrZGNPvu8pYiiQa"
    assert [type(p) for p in turn.parts] == [TextPart, ReasoningPart, TextPart]
    assert [c.name for c in turn.tool_calls] == ["Bash", "Glob"]
    assert json.loads(turn.tool_calls[0].arguments) == {
        "command": "mix phx.server 2>&1 | head -80",
        "timeout": 30000,
    }
    assert s.messages[2].tool_call_id == "toolu_0116Hyi5v8ut7Ffb7d8qV1Sc"
    assert s.messages[2].name == "Bash"
    assert s.messages[3].name == "Glob"
    assert s.messages[4].text == "[Request interrupted by user for tool use]"
    (call,) = s.calls
    assert call.usage == Usage(
        input_tokens=25353, cached_tokens=11515, cache_write_tokens=13835, output_tokens=13
    )
    assert call.model == "claude-opus-4-6"
    assert call.timestamp == pytest.approx(1770757919.186)  # 2026-02-10T21:11:59.186Z
    assert s.meta["first_call_input_tokens"] == 25353
    assert s.meta["kind"] == "main"


@pytest.mark.traces
def test_real_claude_code_merges_rows_of_one_message(real: dict[str, Session]) -> None:
    rel = f"{CC}/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    rows = [r for r in _raw_rows(rel) if r.get("type") == "assistant"]
    merged = [r for r in rows if r["message"]["id"] == "msg_01GGLGCJ9sN12iKQZvVorFAw"]
    assert len(merged) == 10  # thinking, text, 8 x tool_use
    s = real[rel]
    index = next(i for i, m in enumerate(s.messages) if m.id == "msg_01GGLGCJ9sN12iKQZvVorFAw")
    turn = s.messages[index]
    assert [type(p) for p in turn.parts] == [ReasoningPart, TextPart]
    assert [c.name for c in turn.tool_calls] == ["Read"] * 8
    assert len(turn.parts) + len(turn.tool_calls) == len(merged)
    answers = s.messages[index + 1 : index + 9]
    assert all(m.role == "tool" and m.name == "Read" for m in answers)
    assert {m.tool_call_id for m in answers} == {c.id for c in turn.tool_calls}
    call = s.call_for(index)
    assert call is not None
    # the last row carries the final output_tokens; prompt numbers are equal on every row
    assert call.usage == Usage(
        input_tokens=1 + 27336 + 3843,
        cached_tokens=27336,
        cache_write_tokens=3843,
        output_tokens=780,
    )
    # one assistant message per distinct message.id across both halves of the session
    distinct = {r["message"]["id"] for r in rows}
    assert (
        len(s.assistant_indices) + len(real[f"{rel}#2"].assistant_indices) == len(distinct) == 152
    )


@pytest.mark.traces
def test_real_claude_code_compact_boundary_splits_session(real: dict[str, Session]) -> None:
    rel = f"{CC}/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    first, second = real[rel], real[f"{rel}#2"]
    assert f"{rel}#3" not in real
    assert "compact_summary" not in first.meta
    summary = second.messages[0]
    assert summary.role == "user"
    assert summary.text.startswith("This session is being continued from a previous conversation")
    assert second.meta["compact_summary"] == summary.text
    assert second.meta["compact_pre_tokens"] == 167094
    assert second.meta["compact_trigger"] == "auto"
    assert first.meta["first_call_input_tokens"] == 25882
    assert second.meta["first_call_input_tokens"] == 12497 + 21460 + 3
    other = real[f"{CC}/4d5611e5-241a-462a-8d15-5122611a9569.jsonl#2"]
    assert other.messages[0].text.startswith("This session is being continued")


@pytest.mark.traces
def test_real_claude_code_subagent_files(real: dict[str, Session]) -> None:
    base = f"{CC}/258c7280-ae70-4798-800f-63464d01a85d/subagents"
    sub = real[f"{base}/agent-a881341.jsonl"]
    assert sub.meta["kind"] == "subagent"
    assert sub.meta["agent_id"] == "a881341"
    assert sub.model == "claude-sonnet-4-5-20250929"
    assert len(sub.assistant_indices) == 3
    compaction = real[f"{base}/agent-acompact-fffbd0.jsonl"]
    assert compaction.meta["kind"] == "compaction"
    assert [m.role for m in compaction.messages] == ["user", "user", "user", "assistant"]
    assert compaction.messages[2].text.startswith("Your task is to create a detailed summary")


@pytest.mark.traces
def test_real_mini_swe_agent_v1(real: dict[str, Session]) -> None:
    s = real[f"{GEMINI}/astropy__astropy-14508/astropy__astropy-14508.traj.json"]
    assert s.source == "mini-swe-agent-1"
    assert len(s.messages) == 52
    roles = Counter(m.role for m in s.messages)
    assert roles == {"system": 1, "user": 2, "assistant": 25, "tool": 24}
    first = s.messages[2]
    assert first.tool_calls == (
        ToolCall(id="call_1", name="bash", arguments='{"command": "ls -R"}'),
    )
    assert "```bash\nls -R\n```" in first.text  # the action stays in the text the model wrote
    assert s.messages[3].role == "tool" and s.messages[3].text.startswith(
        "<returncode>0</returncode>"
    )
    rejected = next(
        i for i, m in enumerate(s.messages) if m.role == "assistant" and not m.tool_calls
    )
    assert s.messages[rejected + 1].role == "user"
    assert s.messages[rejected + 1].text.startswith("Please always provide EXACTLY ONE action")
    last = s.messages[-1]
    assert last.role == "tool" and last.text.startswith("diff --git a/astropy/io/fits/card.py")
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in s.messages[-2].tool_calls[0].arguments
    call = s.calls[0]
    assert call.index == 2
    assert call.usage == Usage(input_tokens=2263, output_tokens=132, reasoning_tokens=95)
    assert call.model == "google/gemini-3-pro-preview"
    assert call.timestamp == 1763511950.0


@pytest.mark.traces
def test_real_mini_swe_agent_v1_1_deepseek(real: dict[str, Session]) -> None:
    s = real[
        f"{DEEPSEEK}/deepseek_reasoner_dev/sqlfluff__sqlfluff-2419/sqlfluff__sqlfluff-2419.traj.json"
    ]
    assert s.source == "mini-swe-agent-1.1"
    assert len(s.messages) == 111  # 112 raw minus the closing `exit` record
    first = s.messages[2]
    assert isinstance(first.parts[0], ReasoningPart)
    assert first.parts[0].text.startswith("I'll start by exploring the codebase")
    assert first.tool_calls == (
        ToolCall(
            id="call_00_LSWSv6MRjfYJ3PFqWa1cPLtw",
            name="bash",
            arguments='{"command": "pwd && ls -la"}',
        ),
    )
    assert s.messages[3].tool_call_id == "call_00_LSWSv6MRjfYJ3PFqWa1cPLtw"
    call = s.call_for(2)
    assert call is not None
    # prompt_tokens 1540 = prompt_cache_hit_tokens 320 + prompt_cache_miss_tokens 1220
    assert call.usage == Usage(
        input_tokens=1540, cached_tokens=320, output_tokens=82, reasoning_tokens=34
    )
    assert call.model == "deepseek-reasoner"
    assert call.timestamp == pytest.approx(1776073880.3366468)
    assert s.messages[-1].role == "assistant"  # the submit call stays pending
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in s.messages[-1].tool_calls[0].arguments
    assert s.meta["exit_status"] == "Submitted"


@pytest.mark.traces
def test_real_swe_agent(real: dict[str, Session]) -> None:
    fc = real[f"{SWE}/trajectories/demonstrations/function_calling_simple.traj"]
    assert len(fc.messages) == 12
    assert fc.messages[2].tool_calls[0] == ToolCall(
        id="call_PbWErNIge3YTrli3fiVvmIid",
        name="find_file",
        arguments='{"file_name":"missing_colon.py"}',
    )
    assert fc.messages[3].name == "find_file"
    demo = next(s for sid, s in real.items() if sid.endswith("pydicom__pydicom-1458.traj"))
    assert demo.meta["has_demonstration"] is True
    assert demo.messages[1].role == "user"
    assert demo.messages[1].text.startswith(
        "Here is a demonstration of how to correctly accomplish this task."
    )
    assert demo.messages[3].tool_calls == (
        ToolCall(id="call_1", name="bash", arguments='{"command": "create reproduce_bug.py"}'),
    )
    assert demo.messages[4].role == "tool"
    replayed = next(s for sid, s in real.items() if "function_calling_replace" in sid)
    assert replayed.meta["repairs"] == 5  # the replay reuses call ids: renamed <id>~<n>
    assert replayed.model == "gpt-4o"


@pytest.mark.traces
def test_real_tau_bench(real: dict[str, Session]) -> None:
    runs = [s for s in real.values() if s.source == "tau-bench"]
    assert len(runs) == 200
    s = real[f"{TAU}#task0-trial0"]
    assert s.meta["reward"] == 0.0 and s.meta["task_id"] == 0 and s.meta["trial"] == 0
    assert s.model == "gpt-4o"
    assert s.messages[0].role == "system" and s.messages[0].text.startswith(
        "# Airline Agent Policy"
    )
    call = next(m for m in s.messages if m.tool_calls).tool_calls[0]
    assert call == ToolCall(
        id="call_oIHazX6yQrB8hUwl4cRilFKj",
        name="get_user_details",
        arguments='{"user_id":"mia_li_3668"}',
    )
    # GPT-4o reused two call ids in this run: both renamed, pairing holds
    assert s.meta["repairs"] == 2
    assert any(c.id == "call_oIHazX6yQrB8hUwl4cRilFKj~2" for m in s.messages for c in m.tool_calls)
    assert sum(len(r.messages) for r in runs) == 5308


@pytest.mark.traces
def test_real_openhands(real: dict[str, Session]) -> None:
    s = real[f"{OPENHANDS}#ponylang__ponyc-4595"]
    assert [t["function"]["name"] for t in s.tools] == [
        "execute_bash",
        "think",
        "finish",
        "str_replace_editor",
    ]
    assert s.messages[0].role == "system" and s.messages[0].text.startswith(
        "You are OpenHands agent"
    )
    assert s.messages[1].role == "user" and "<uploaded_files>" in s.messages[1].text
    assert s.messages[2].role == "user" and "<RUNTIME_INFORMATION>" in s.messages[2].text
    assert len(s.messages) == 48 and len(s.assistant_indices) == 23
    turn = s.messages[3]
    assert turn.tool_calls == (
        ToolCall(
            id="toolu_01",
            name="execute_bash",
            arguments='{"command": "ls -l /workspace/ponylang__ponyc__0.1"}',
        ),
    )
    assert s.messages[4].role == "tool" and s.messages[4].text.startswith("total 300")
    call = s.call_for(3)
    assert call is not None and call.usage == Usage(input_tokens=5920, output_tokens=128)
    assert call.model == "meta-llama/llama-4-maverick"
    assert s.messages[-1].tool_calls[0].name == "finish"  # pending at the tail
    broken = real[f"{OPENHANDS}#ponylang__ponyc-4593"]
    errors = [m for m in broken.messages if "[Error occurred in processing last action]" in m.text]
    assert len(errors) == 1 and errors[0].role == "user"
    # the unparsable response is only visible as the error: 34 responses, 33 assistant messages
    assert broken.meta["recorded_responses"] == 34 and len(broken.assistant_indices) == 33
    # every response of these runs issued a single call: no parallel merge in the real data
    assert all(len(m.tool_calls) <= 1 for m in s.messages)


@pytest.mark.traces
def test_real_detection(real: dict[str, Session]) -> None:
    assert detect_format(TRACES / CC / "short.jsonl") == "claude-code"
    assert detect_format(TRACES / TAU) == "tau-bench"
    assert detect_format(TRACES / OPENHANDS) == "openhands"
    assert detect_format(TRACES / "SOURCES.md") is None
    for s in real.values():
        assert s.path is not None
        assert detect_format(s.path) in FORMATS


# --- hand-made files -----------------------------------------------------------------------


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _cc_row(kind: str, uuid: str, content: Any, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "parentUuid": None,
        "isSidechain": False,
        "sessionId": "sess-1",
        "type": kind,
        "uuid": uuid,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": kind, "content": content},
    }
    row.update(extra)
    return row


def _cc_assistant(uuid: str, mid: str, block: dict[str, Any], out: int, ts: str) -> dict[str, Any]:
    usage = {
        "input_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
        "output_tokens": out,
    }
    row = _cc_row("assistant", uuid, [block], timestamp=ts)
    row["message"] = {
        "id": mid,
        "model": "claude-x",
        "role": "assistant",
        "content": [block],
        "usage": usage,
    }
    return row


def _claude_code_file(path: Path) -> Path:
    rows = [
        {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}},
        _cc_row("user", "u1", "hello"),
        _cc_assistant(
            "a1",
            "msg_1",
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            3,
            "2026-01-01T00:00:01Z",
        ),
        _cc_assistant(
            "a2", "msg_1", {"type": "text", "text": "Looking."}, 3, "2026-01-01T00:00:02Z"
        ),
        _cc_assistant(
            "a3",
            "msg_1",
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "é"}},
            3,
            "2026-01-01T00:00:03Z",
        ),
        {"type": "progress", "uuid": "p1", "data": {}},
        _cc_row(
            "user",
            "u2",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "see image"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                        },
                    ],
                }
            ],
        ),
        _cc_assistant(
            "a4",
            "msg_1",
            {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "ls"}},
            42,
            "2026-01-01T00:00:04Z",
        ),
        _cc_row("user", "u3", [{"type": "tool_result", "tool_use_id": "t2", "content": "a\nb"}]),
        _cc_row("user", "side", "sub-agent prompt", isSidechain=True),
        _cc_assistant("a5", "msg_2", {"type": "text", "text": "Done."}, 7, "2026-01-01T00:00:05Z"),
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": "b1",
            "compactMetadata": {"trigger": "auto", "preTokens": 999},
        },
        _cc_row("user", "u4", "Summary: we said hello.", isCompactSummary=True),
        _cc_assistant(
            "a6", "msg_3", {"type": "text", "text": "Continuing."}, 9, "2026-01-01T00:00:06Z"
        ),
    ]
    return _jsonl(path, rows)


def test_claude_code_hand_made(tmp_path: Path) -> None:
    path = _claude_code_file(tmp_path / "proj" / "s.jsonl")
    assert detect_format(path) == "claude-code"
    first, second = load_paths([tmp_path])
    assert first.id == "proj/s.jsonl" and second.id == "proj/s.jsonl#2"
    assert [m.role for m in first.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    turn = first.messages[1]
    assert turn.id == "msg_1"
    assert turn.parts == (ReasoningPart("hmm", signature="sig"), TextPart("Looking."))
    assert turn.tool_calls == (
        ToolCall(id="t1", name="Read", arguments='{"p": "é"}'),
        ToolCall(id="t2", name="Bash", arguments='{"command": "ls"}'),
    )
    image_result = first.messages[2]
    assert image_result.name == "Read"
    assert image_result.parts == (
        TextPart("see image"),
        ImagePart(url="data:image/png;base64,AAAA", media_type="image/png"),
    )
    assert first.messages[3].content == "a\nb" and first.messages[3].name == "Bash"
    assert all(m.text != "sub-agent prompt" for m in first.messages)
    c1, c2 = first.calls
    assert (c1.index, c2.index) == (1, 4)
    assert c1.usage == Usage(
        input_tokens=125, cached_tokens=100, cache_write_tokens=20, output_tokens=42
    )
    assert c1.timestamp == pytest.approx(1767225601.0)
    assert first.meta["first_call_input_tokens"] == 125
    assert second.messages[0].text == "Summary: we said hello."
    assert second.meta["compact_summary"] == "Summary: we said hello."
    assert second.meta["compact_pre_tokens"] == 999
    _check_invariants([first, second])


def test_claude_code_subagent_file(tmp_path: Path) -> None:
    rows = [
        _cc_row("user", "s1", "find the bug", isSidechain=True, agentId="abc"),
        _cc_assistant("s2", "msg_9", {"type": "text", "text": "found"}, 1, "2026-01-01T00:00:01Z"),
    ]
    rows[1]["isSidechain"] = True
    path = _jsonl(tmp_path / "subagents" / "agent-acompact-1.jsonl", rows)
    (s,) = load_file(path)
    assert s.id == "agent-acompact-1.jsonl"
    assert s.meta["kind"] == "compaction" and s.meta["agent_id"] == "abc"
    assert [m.role for m in s.messages] == ["user", "assistant"]


def _openai_usage(prompt: int, hit: int, out: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": prompt - hit,
    }


def test_mini_swe_agent_v1_hand_made(tmp_path: Path) -> None:
    extra = {"response": {"model": "m1", "created": 100, "usage": _openai_usage(50, 10, 5)}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "THOUGHT: look\n\n```bash\nls -la\n```", "extra": extra},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\nx\n</output>"},
        {"role": "assistant", "content": "```bash\na\n```\n```bash\nb\n```"},
        {
            "role": "user",
            "content": "Please always provide EXACTLY ONE action, found 2 actions.",
        },
        {"role": "assistant", "content": "THOUGHT: no action at all"},
        {
            "role": "user",
            "content": "Please always provide EXACTLY ONE action, found 0 actions.",
        },
        {
            "role": "assistant",
            "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
        },
        {"role": "user", "content": "diff --git a/x b/x"},
    ]
    data = {
        "info": {"exit_status": "Submitted"},
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1",
    }
    path = _json(tmp_path / "run.traj.json", data)
    assert detect_format(path) == "mini-swe-agent"
    (s,) = load_file(path)
    assert s.source == "mini-swe-agent-1"
    assert [m.role for m in s.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert s.messages[2].tool_calls == (
        ToolCall(id="call_1", name="bash", arguments='{"command": "ls -la"}'),
    )
    assert s.messages[2].text == messages[2]["content"]
    assert s.messages[3].content == messages[3]["content"]
    assert s.messages[4].tool_calls == () and s.messages[6].tool_calls == ()
    assert s.messages[8].tool_calls[0].id == "call_2"
    assert s.messages[9].tool_call_id == "call_2" and s.messages[9].text == "diff --git a/x b/x"
    (call,) = s.calls
    assert call.index == 2 and call.usage == Usage(
        input_tokens=50, cached_tokens=10, output_tokens=5
    )
    assert call.model == "m1" and call.timestamp == 100.0
    _check_invariants([s])


def test_mini_swe_agent_v1_1_hand_made(tmp_path: Path) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "thinking...",
            "tool_calls": [call],
            "extra": {
                "response": {"model": "deepseek-chat", "usage": _openai_usage(1000, 900, 20)},
                "timestamp": 5.5,
            },
        },
        {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>"},
        {"role": "assistant", "content": "bye", "tool_calls": [{**call, "id": "c2"}]},
        {"role": "exit", "content": "patch", "extra": {"exit_status": "Submitted"}},
    ]
    path = _json(
        tmp_path / "r.traj.json",
        {"info": {}, "messages": messages, "trajectory_format": "mini-swe-agent-1.1"},
    )
    (s,) = load_file(path)
    assert s.source == "mini-swe-agent-1.1"
    assert [m.role for m in s.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert s.messages[2].parts == (ReasoningPart("thinking..."),)
    assert s.messages[3].name == "bash"
    assert s.calls[0].usage == Usage(input_tokens=1000, cached_tokens=900, output_tokens=20)
    assert s.calls[0].timestamp == 5.5
    assert s.meta["exit_status"] == "Submitted"
    _check_invariants([s])


def test_swe_agent_hand_made(tmp_path: Path) -> None:
    text_actions = {
        "history": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "DEMO", "is_demo": True},
            {"role": "user", "content": [{"type": "text", "text": "issue"}]},
            {
                "role": "assistant",
                "content": "Let me look.\n```\nopen a.py\n```",
                "action": "open a.py\n",
            },
            {"role": "user", "content": "[File: a.py]"},
            {"role": "assistant", "content": "I am confused", "action": ""},
            {"role": "user", "content": "please act"},
            {"role": "assistant", "content": "submit", "action": "submit\n"},
        ],
        "replay_config": json.dumps({"agent": {"model": {"name": "gpt-4o"}}}),
    }
    function_calling = {
        "history": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "issue"},
            {
                "role": "assistant",
                "content": "find it",
                "action": "find_file x.py",
                "tool_calls": [
                    {
                        "id": "k1",
                        "type": "function",
                        "function": {"name": "find_file", "arguments": {"file_name": "x.py"}},
                    }
                ],
            },
            {
                "role": "tool",
                "content": [{"type": "text", "text": "found"}],
                "tool_call_ids": ["k1"],
            },
        ]
    }
    a = _json(tmp_path / "t.traj", text_actions)
    b = _json(tmp_path / "f.traj", function_calling)
    assert detect_format(a) == detect_format(b) == "swe-agent"
    fc, ta = load_paths([tmp_path])  # sorted: f.traj, t.traj
    assert [m.role for m in ta.messages] == [
        "system",
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert ta.messages[1].text == "DEMO" and ta.messages[2].text == "issue"
    assert ta.messages[3].tool_calls == (
        ToolCall(id="call_1", name="bash", arguments='{"command": "open a.py"}'),
    )
    assert ta.messages[5].tool_calls == ()
    assert ta.messages[7].tool_calls[0].id == "call_2"
    assert ta.model == "gpt-4o" and len(ta.calls) == 3
    assert fc.messages[2].tool_calls == (
        ToolCall(id="k1", name="find_file", arguments='{"file_name": "x.py"}'),
    )
    assert fc.messages[3].tool_call_id == "k1" and fc.messages[3].text == "found"
    assert fc.calls == []
    _check_invariants([fc, ta])


def _tau_call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_tau_bench_hand_made_with_repairs(tmp_path: Path) -> None:
    traj_ok = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [_tau_call("x", "get_user")]},
        {"role": "tool", "tool_call_id": "x", "name": "get_user", "content": "{}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_tau_call("x", "get_user")],
        },  # reused id
        {"role": "tool", "tool_call_id": "x", "name": "get_user", "content": "{}"},
        {"role": "assistant", "content": "done"},
    ]
    traj_broken = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_tau_call("a", "f"), _tau_call("b", "g")],
        },
        {"role": "tool", "tool_call_id": "a", "name": "f", "content": "A"},
        {"role": "tool", "tool_call_id": "zzz", "name": "h", "content": "orphan"},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "ok"},
    ]
    runs = [
        {"task_id": 1, "trial": 0, "reward": 1.0, "info": {}, "traj": traj_ok},
        {"task_id": 1, "trial": 1, "reward": 0.0, "info": {}, "traj": traj_broken},
        {
            "task_id": 2,
            "trial": 0,
            "reward": 0.0,
            "info": {},
            "traj": [{"role": "user", "content": "no model call"}],
        },
    ]
    path = _json(tmp_path / "gpt-x-retail.json", runs)
    assert detect_format(path) == "tau-bench"
    ok, broken = load_file(path)  # the run without an assistant message is dropped
    assert (
        ok.id == "gpt-x-retail.json#task1-trial0" and broken.id == "gpt-x-retail.json#task1-trial1"
    )
    assert ok.model == "gpt-x" and ok.meta["env"] == "retail" and ok.meta["reward"] == 1.0
    assert ok.messages[4].tool_calls[0].id == "x~2" and ok.messages[5].tool_call_id == "x~2"
    assert ok.meta["repairs"] == 1
    roles = [m.role for m in broken.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "user", "assistant"]
    assert broken.messages[4].tool_call_id == "b" and broken.messages[4].content == NO_RESULT
    assert broken.messages[5].text.startswith("[tool result without a matching call: h zzz]")
    assert broken.meta["repairs"] == 2
    _check_invariants([ok, broken])


def _oh_action(eid: int, rid: str, call_id: str, command: str, text: str = "") -> dict[str, Any]:
    tool_calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": "execute_bash", "arguments": json.dumps({"command": command})},
        }
    ]
    response = {
        "id": rid,
        "created": 1000 + eid,
        "model": "llama",
        "choices": [{"message": {"role": "assistant", "content": text, "tool_calls": tool_calls}}],
        "usage": {"prompt_tokens": 100 + eid, "completion_tokens": 10},
    }
    metadata = {
        "function_name": "execute_bash",
        "tool_call_id": call_id,
        "model_response": response,
    }
    return {
        "id": eid,
        "timestamp": "2025-01-01T00:00:00",
        "source": "agent",
        "action": "run",
        "args": {"command": command},
        "tool_call_metadata": metadata,
    }


def _oh_obs(eid: int, cause: int, call_id: str, content: str) -> dict[str, Any]:
    metadata = {"function_name": "execute_bash", "tool_call_id": call_id}
    extras = {
        "metadata": {
            "exit_code": 0,
            "prefix": "",
            "suffix": "\n[The command completed with exit code 0.]",
        }
    }
    return {
        "id": eid,
        "source": "agent",
        "observation": "run",
        "cause": cause,
        "content": content,
        "extras": extras,
        "tool_call_metadata": metadata,
    }


def test_openhands_hand_made_parallel_calls(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": n}} for n in ("execute_bash", "finish")]
    history = [
        {
            "id": 0,
            "source": "agent",
            "action": "system",
            "args": {"content": "You are OpenHands", "tools": tools},
        },
        {
            "id": 1,
            "source": "user",
            "action": "message",
            "args": {"content": "fix it", "image_urls": []},
        },
        {"id": 2, "source": "user", "action": "recall", "args": {}},
        {
            "id": 3,
            "source": "environment",
            "observation": "recall",
            "content": "",
            "extras": {"date": "2025-01-01"},
        },
        _oh_action(4, "resp-A", "call_a", "ls", "two at once"),
        _oh_obs(5, 4, "call_a", "file1"),
        _oh_action(6, "resp-A", "call_b", "pwd", "two at once"),
        _oh_obs(7, 6, "call_b", "/w"),
        {"id": 8, "source": "agent", "observation": "error", "content": "bad parameter"},
        _oh_action(9, "resp-B", "call_c", "exit"),
    ]
    record = {
        "instance_id": "org__repo-1",
        "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "openai/llama"}},
        "history": history,
    }
    path = _jsonl(tmp_path / "output.jsonl", [record, {**record, "instance_id": "org__repo-2"}])
    assert detect_format(path) == "openhands"
    s, s2 = load_file(path)
    assert s.id == "output.jsonl#org__repo-1" and s2.id == "output.jsonl#org__repo-2"
    assert s.tools == tools and s.model == "openai/llama"
    roles = [m.role for m in s.messages]
    assert roles == ["system", "user", "user", "assistant", "tool", "tool", "user", "assistant"]
    assert "Today's date is 2025-01-01" in s.messages[2].text
    merged = s.messages[3]
    assert merged.text == "two at once"
    assert [(c.id, json.loads(c.arguments)["command"]) for c in merged.tool_calls] == [
        ("call_a", "ls"),
        ("call_b", "pwd"),
    ]
    assert (
        s.messages[4].text
        == "file1\n[The command completed with exit code 0.]\n[Command finished with exit code 0]"
    )
    assert s.messages[5].tool_call_id == "call_b"
    assert s.messages[6].text == "bad parameter\n[Error occurred in processing last action]"
    assert [c.index for c in s.calls] == [3, 7]
    assert s.calls[0].usage == Usage(input_tokens=104, output_tokens=10)
    assert s.calls[0].timestamp == 1004.0
    _check_invariants([s, s2])


# --- robustness ----------------------------------------------------------------------------


def test_broken_files_are_skipped_with_one_warning_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _claude_code_file(tmp_path / "good.jsonl")
    (tmp_path / "bad.json").write_text('{"messages": [ {"role": ')
    (tmp_path / "binary.jsonl").write_bytes(b"\x00\x01\xff\xfe" * 64)
    (tmp_path / "empty.traj").write_bytes(b"")
    _json(
        tmp_path / "shape.traj.json", {"trajectory_format": "mini-swe-agent-1", "messages": "nope"}
    )
    _json(
        tmp_path / "noassistant.traj.json",
        {"trajectory_format": "mini-swe-agent-1", "messages": [{"role": "user", "content": "hi"}]},
    )
    _json(tmp_path / "other.json", {"hello": "world"})
    (tmp_path / "notes.md").write_text("not a trace")
    (tmp_path / ".hidden.jsonl").write_text("garbage")
    with caplog.at_level(logging.WARNING, logger="cachepilot_bench.traces"):
        sessions = load_paths([tmp_path, tmp_path / "missing-dir"])
    assert [s.id for s in sessions] == ["good.jsonl", "good.jsonl#2"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name in (
        "bad.json",
        "binary.jsonl",
        "empty.traj",
        "shape.traj.json",
        "noassistant.traj.json",
        "other.json",
        "missing-dir",
    ):
        assert sum(name in w for w in warnings) == 1, (name, warnings)
    assert len(warnings) == 7
    assert not any("notes.md" in w or ".hidden" in w for w in warnings)


def test_load_file_on_undetectable_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "random.txt"
    path.write_text("hello world")
    with caplog.at_level(logging.WARNING, logger="cachepilot_bench.traces"):
        assert load_file(path) == []
    assert len(caplog.records) == 1 and "random.txt" in caplog.records[0].getMessage()
    assert detect_format(tmp_path / "does-not-exist.json") is None


def test_explicit_files_and_duplicates(tmp_path: Path) -> None:
    path = _claude_code_file(tmp_path / "a" / "s.jsonl")
    sessions = load_paths([path, tmp_path])  # the file again through its folder: loaded once
    assert [s.id for s in sessions] == ["s.jsonl", "s.jsonl#2"]
    assert load_file(path, fmt="claude-code", root=tmp_path)[0].id == "a/s.jsonl"


def test_repair_pairing_defers_orphans_and_keeps_pending_tail() -> None:
    call_a, call_b = ToolCall("a", "f"), ToolCall("b", "g")
    items = [
        (Message("user", "go"), None),
        (Message("assistant", tool_calls=(call_a, call_b)), None),
        (Message("tool", "A", tool_call_id="a"), None),
        (Message("tool", "?", tool_call_id="nope", name="h"), None),
        (Message("tool", "B", tool_call_id="b"), None),
        (Message("assistant", tool_calls=(ToolCall("c", "f"),)), None),
    ]
    repaired, repairs = repair_pairing(items)
    messages = [m for m, _ in repaired]
    assert repairs == 1
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert [m.name for m in messages[2:4]] == ["f", "g"]  # names filled from the calls
    assert pairing_issues(messages, allow_pending_tail=True) == []
    assert pairing_issues(messages, allow_pending_tail=False) != []

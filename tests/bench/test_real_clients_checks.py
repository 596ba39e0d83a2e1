"""The real-client suite's own logic: the scripted model's next step, and the checks that
judge a proxied run (`benchmarks/real_clients/`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from cachepilot.wire import parse_body

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "real_clients"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(SUITE))
    spec = importlib.util.spec_from_file_location(f"real_clients_{name}", SUITE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


run = _load("run")
aider = _load("aider_client")
scripted = _load("scripted")
task = _load("task")

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("list_files", "read_file", "grep", "edit_file", "run")
]
RECALL = {"type": "function", "function": {"name": "recall", "parameters": {"type": "object"}}}


def _chat(done: int, log_text: str, *, recall: bool, recalled: bool = False) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.PROMPT}]
    for step in range(done):
        call_id = f"call_cp_s{step}"
        call = {"id": call_id, "type": "function", "function": {"name": "run", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = log_text if step == 1 else "ok"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    if recalled:
        call = {"id": "call_cp_recall", "type": "function", "function": {"name": "recall"}}
        messages.append({"role": "assistant", "content": "x", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": "call_cp_recall", "content": "full"})
    return {"messages": messages, "tools": [*TOOLS, *([RECALL] if recall else [])]}


def _reply(plan: str, body: dict[str, Any]) -> Any:
    model = scripted.ScriptedModel(scripted.PLANS[plan], "/repo")
    return model("chat", body, parse_body(body, api="chat").request)


SHORT = 'log head\n[output shortened; full text: recall(ref="0123456789ab")]'


@pytest.mark.parametrize("plan", ["python", "python-parallel"])
def test_the_model_recalls_a_shortened_log_once_with_text_first(plan: str) -> None:
    reply = _reply(plan, _chat(2, SHORT, recall=True))
    assert reply.text == scripted.RECALL_PREAMBLE
    names = [c.name for c in reply.tool_calls]
    assert names == (["recall", "read_file"] if plan == "python-parallel" else ["recall"])
    assert json.loads(reply.tool_calls[0].arguments)["ref"] == "0123456789ab"
    # Recalled already, or no recall offered (straight run): the next step follows.
    for body in (_chat(2, SHORT, recall=True, recalled=True), _chat(2, SHORT, recall=False)):
        assert [c.name for c in _reply(plan, body).tool_calls] == ["read_file"]


def test_the_model_walks_the_steps_and_answers() -> None:
    assert [c.id for c in _reply("python", _chat(0, "", recall=False)).tool_calls] == ["call_cp_s0"]
    assert [c.name for c in _reply("python", _chat(4, "log", recall=True)).tool_calls] == [
        "edit_file"
    ]
    final = _reply("python", _chat(len(task.STEPS), "log", recall=True))
    assert final.tool_calls == () and final.text == task.FINAL_ANSWER
    side = {"messages": [{"role": "user", "content": "Warmup"}]}
    assert _reply("python", side).text == "OK."


def _records(*bodies: dict[str, Any], api: str = "anthropic") -> list[Any]:
    return [SimpleNamespace(body=b, api=api, response_id="", response={}) for b in bodies]


def test_prefix_breaks_ignore_moved_marks_and_catch_rewritten_history() -> None:
    mark = {"type": "ephemeral"}
    first = {
        "system": [{"type": "text", "text": "S", "cache_control": mark}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": mark}]}
        ],
    }
    second = {
        "system": [{"type": "text", "text": "S", "cache_control": mark}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "b", "cache_control": mark}],
            },
        ],
    }
    rewritten = {**second, "messages": [{"role": "user", "content": "a"}, *second["messages"][1:]]}
    assert run.prefix_breaks("anthropic", _records(first, second)) == []
    assert run.prefix_breaks("anthropic", _records(first, rewritten)) == [1]
    other_system = {**second, "system": "T"}
    assert run.prefix_breaks("anthropic", _records(first, other_system)) == [1]


def test_executed_tools_leave_recall_out_and_the_repository_path_neutral() -> None:
    body = {
        "input": [
            {
                "type": "function_call",
                "call_id": "call_cp_s0",
                "name": "sh",
                "arguments": '{"p": "/r/x"}',
            },
            {
                "type": "function_call",
                "call_id": "call_cp_recall",
                "name": "recall",
                "arguments": "{}",
            },
            {"type": "function_call", "call_id": "other", "name": "sh", "arguments": "{}"},
        ]
    }
    assert run.executed_tools("responses", body, "/r") == [("sh", '{"p": "<repo>/x"}')]


def test_chained_bodies_put_the_named_response_in_front_and_keep_the_prefix() -> None:
    user = {"role": "user", "content": "go"}
    call = {"type": "function_call", "call_id": "call_cp_s0", "name": "run", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_cp_s0", "output": "ok"}
    first = SimpleNamespace(
        body={"input": [user]}, api="responses", response_id="resp_0", response={"output": [call]}
    )
    second = SimpleNamespace(
        body={"input": [output], "previous_response_id": "resp_0"},
        api="responses",
        response_id="resp_1",
        response={"output": []},
    )
    bodies = run.chained_bodies([first, second])
    assert bodies[1]["input"] == [user, call, output]
    assert "previous_response_id" not in bodies[1]
    assert run.prefix_breaks("responses", [first, second]) == []
    assert run.executed_tools("responses", bodies[1], "/r") == [("run", "{}")]
    # Without the chain the delta alone would look like a rewritten history.
    unchained = SimpleNamespace(**{**vars(second), "body": {"input": [output]}})
    assert run.prefix_breaks("responses", [first, unchained]) == [1]


def test_mark_places_name_tools_so_a_sorted_tool_list_keeps_its_marks() -> None:
    mark = {"type": "ephemeral"}
    client = {"tools": [{"name": "b"}, {"name": "a", "cache_control": mark}], "messages": []}
    proxied = {"tools": [{"name": "a", "cache_control": mark}, {"name": "b"}], "messages": []}
    assert run.mark_places(client) == run.mark_places(proxied) == {("tools/a", 0, 0)}
    moved = {"tools": [{"name": "a"}, {"name": "b", "cache_control": mark}], "messages": []}
    assert run.mark_places(client) != run.mark_places(moved)


def _aider_body(*texts: str, system: str = "Use SEARCH/REPLACE blocks.") -> dict[str, Any]:
    messages = [{"role": "system", "content": system}]
    messages += [{"role": "user", "content": t} for t in texts]
    return {"messages": messages}


def _aider_reply(body: dict[str, Any]) -> Any:
    model = aider.AiderModel()
    return model("chat", body, parse_body(body, api="chat").request), model.replies


def test_the_aider_model_edits_the_line_it_sees_and_cannot_without_the_file() -> None:
    name, value = aider.EDITS[0]
    seen = _aider_body(f"{task.MODULE_PATH}\n```\n{name} = 700\n```", aider.prompt(0))
    reply, replies = _aider_reply(seen)
    assert f"<<<<<<< SEARCH\n{name} = 700\n=======\n{name} = {value}\n" in reply.text
    assert replies == ["edit 1"]  # turns are numbered from 1, as the user writes them
    folded = _aider_body("[earlier conversation folded: 9 messages]", aider.prompt(0))
    reply, replies = _aider_reply(folded)
    assert f"<<<<<<< SEARCH\n{name} = ?\n" in reply.text and replies == ["blind 1"]
    commit = _aider_body("diff ...", system="Write a commit message.")
    reply, replies = _aider_reply(commit)
    assert reply.text == aider.COMMIT_MESSAGE and replies == ["side"]


def test_applied_edits_count_each_new_value_on_its_own_line() -> None:
    lines = [f"{n} = {v}" for n, v in aider.EDITS[:3]] + [f"{aider.EDITS[3][0]} = 1"]
    assert aider.applied_edits("\n" + "\n".join(lines) + "\n") == 3
    assert aider.applied_edits("\nLIMIT_0100 = 90010\n") == 0


def test_request_date_reads_the_date_or_the_value_of_its_placeholder() -> None:
    plain = _aider_body("hi", system="SEARCH/REPLACE\n- Current date: 2026-11-28\n")
    assert aider.request_date(plain) == "2026-11-28"
    placeholder = _aider_body(
        "<context>\n{{date_1}} = 2026-11-29\n</context>\nhi",
        system="SEARCH/REPLACE\n- Current date: {{date_1}}\n",
    )
    assert aider.request_date(placeholder) == "2026-11-29"
    unresolved = _aider_body("hi", system="SEARCH/REPLACE\n- Current date: {{date_1}}\n")
    assert aider.request_date(unresolved) is None
    assert aider.request_date(_aider_body("hi")) is None


def test_two_days_wants_one_date_then_the_next_days_to_the_end() -> None:
    assert run._two_days(["2026-11-28", "2026-11-28", "2026-11-29"])
    assert run._two_days(["2026-12-31", "2027-01-01"])
    assert not run._two_days(["2026-11-28", "2026-11-28"])  # no second session date
    assert not run._two_days(["2026-11-28", "2026-11-29", "2026-11-28"])
    assert not run._two_days(["2026-11-28", "2026-11-30"])
    assert not run._two_days([None, "2026-11-29"])
    assert not run._two_days([])


long = _load("long_session")


def _anthropic_request(messages: list[dict[str, Any]], tools: list[str]) -> tuple[Any, Any]:
    body = {
        "system": "s",
        "tools": [{"name": n, "input_schema": {"type": "object"}} for n in tools],
        "messages": messages,
    }
    return body, parse_body(body, api="anthropic").request


def _long_history(steps: range, parts: dict[int, str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": long.LONG_PROMPT}]
    for k in steps:
        use = {"type": "tool_use", "id": f"toolu_cp_l{k}", "name": "Bash", "input": {}}
        messages.append({"role": "assistant", "content": [use]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_cp_l{k}", "content": parts[k]}
        messages.append({"role": "user", "content": [result]})
    return messages


def test_the_long_model_keeps_its_progress_through_a_compaction(tmp_path: Path) -> None:
    long.make_parts(tmp_path)
    parts = {
        k: (tmp_path / "logs" / f"part_{k:02d}.log").read_text() for k in range(long.LONG_STEPS)
    }
    model = long.LongModel("toolu", frozenset({"Bash"}), "Bash")
    body, request = _anthropic_request(_long_history(range(20), parts), ["Bash"])
    reply = model("anthropic", body, request)
    assert reply.tool_calls[0].id == "toolu_cp_l20"
    assert json.loads(reply.tool_calls[0].arguments)["command"] == "cat logs/part_20.log"
    # The client asks for a summary: the model writes its progress into it ...
    ask = "Your task is to create a detailed summary of the conversation so far."
    body, request = _anthropic_request(
        [
            *_long_history(range(20), parts),
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": ask},
        ],
        ["Bash"],
    )
    summary = model("anthropic", body, request)
    assert summary.tool_calls == () and "steps completed through s19" in summary.text
    # ... and continues from it on the compacted history (step 15 was an edit).
    body, request = _anthropic_request(
        [{"role": "user", "content": f"{long.LONG_PROMPT}\n\n{summary.text}"}], ["Bash"]
    )
    after = model("anthropic", body, request)
    assert after.tool_calls[0].id == "toolu_cp_l20"
    assert model.compactions == 1
    assert "sed -i" in long.step_command(15) and long.step_command(15).endswith(task.MODULE_PATH)


def _opencode_serialized(steps: range) -> str:
    """History as OpenCode 1.18 serializes it into its compaction request."""
    lines = [f"[User]: {long.LONG_PROMPT}"]
    for k in steps:
        args = {"command": long.step_command(k), "description": f"Step {k}"}
        lines += [f"[Assistant tool call]: bash({json.dumps(args, separators=(',', ':'))})"]
        lines += [f"[Tool result]: === PART {k:02d} BEGIN ===\n..."]
    lines.append('[Assistant tool call]: bash({"command":"cat x","description":"Step 99"})')
    return "\n".join(lines)


def test_the_long_model_answers_opencodes_compaction_requests() -> None:
    model = long.LongModel("toolu", frozenset({"bash"}), "bash")
    # The anchored-summary request: the history serialized in one user message, no tools.
    ask = (
        "Here is the conversation so far:\n<conversation>\n"
        + _opencode_serialized(range(19))
        + "\n</conversation>\nCreate a new anchored summary from the conversation history in "
        "the <conversation> tags above so another coding agent can continue the work."
    )
    body, request = _anthropic_request([{"role": "user", "content": ask}], [])
    summary = model("anthropic", body, request)
    assert summary.tool_calls == () and "steps completed through s18" in summary.text
    assert "s99" not in summary.text  # a call without its result is not done
    # The next one carries the prior summary (with its progress line): still a compaction.
    again = (
        "Here is the conversation so far:\n<conversation>\n"
        + _opencode_serialized(range(19, 37))
        + "\n</conversation>\nHere is the summary of the conversation before the "
        f"<conversation> above:\n<prior-summary>\n{summary.text}\n</prior-summary>\n"
        "The <prior-summary> summarizes everything that happened before the <conversation>. "
        "Construct a new summary that combines both."
    )
    body, request = _anthropic_request([{"role": "user", "content": again}], [])
    second = model("anthropic", body, request)
    assert "steps completed through s36" in second.text
    # Its other form: the history, then "What did we do so far?" as the last message.
    history = _long_history(range(3), {k: f"part {k}" for k in range(3)})
    body, request = _anthropic_request(
        [*history, {"role": "user", "content": "What did we do so far?"}], []
    )
    assert "steps completed through s2" in model("anthropic", body, request).text
    assert model.compactions == 3
    # The compacted history carries the summary: the model goes on from it, with its tools.
    checkpoint = f"<conversation-checkpoint>\n{second.text}\n</conversation-checkpoint>"
    body, request = _anthropic_request(
        [{"role": "user", "content": long.LONG_PROMPT}, {"role": "user", "content": checkpoint}],
        ["bash"],
    )
    assert model("anthropic", body, request).tool_calls[0].id == "toolu_cp_l37"
    # A compacted history whose last message carries a summary is no request for one.
    body, request = _anthropic_request(
        [{"role": "user", "content": f"Summarize the conversation. {second.text}"}], ["bash"]
    )
    assert not long.is_compaction(request)


def test_recent_in_view_counts_whole_parts_only(tmp_path: Path) -> None:
    long.make_parts(tmp_path)
    parts = {
        k: (tmp_path / "logs" / f"part_{k:02d}.log").read_text() for k in range(long.LONG_STEPS)
    }
    _, everything = _anthropic_request(_long_history(range(long.LONG_STEPS), parts), ["Bash"])
    assert long.recent_in_view(everything) == long.RECENT
    cut = {**parts, 62: parts[62][:2000] + "\n[... reduced; recall(ref=...)]\n" + parts[62][-200:]}
    _, reduced = _anthropic_request(_long_history(range(long.LONG_STEPS), cut), ["Bash"])
    assert long.recent_in_view(reduced) == long.RECENT - 1
    _, compacted = _anthropic_request(_long_history(range(20, 40), parts), ["Bash"])
    assert long.recent_in_view(compacted) == 0  # none of the last 16 printed parts


def test_long_edits_applied_counts_the_sessions_settings() -> None:
    module = "\n".join(f"LIMIT_{k + 100:04d} = {7000 + k}" for k in (15, 31, 47)) + "\n"
    assert long.long_edits_applied("\n" + module) == 3
    assert long.LONG_EDITS == 4


def test_json_run_reads_a_clients_json_report() -> None:
    base = _load("client_base")
    report = json.dumps({"result": "done", "is_error": False, "executed": [["bash", "ls"]]})
    run_ = base.json_run(0, report, "log", answer="result", error="is_error")
    assert (run_.returncode, run_.answer, run_.executed) == (0, "done", [("bash", "ls")])
    failed = base.json_run(0, json.dumps({"result": "x", "is_error": True}), "", answer="result",
                           error="is_error")  # fmt: skip
    assert failed.returncode == 1 and failed.answer == "x"
    for text in ("not json", "[1, 2]", ""):
        assert base.json_run(3, text, "tail", answer="result").answer == ""
        assert base.json_run(3, text, "tail", answer="result").returncode == 3
    assert base.json_run(0, json.dumps({"response": None}), "", answer="response").answer == ""


subagents = _load("subagents")
CLAUDE_TOOLS = ["Agent", "Bash", "Edit", "Grep", "Read", "Write"]
"""Claude Code 2.1 offers its `Agent` tool to the main conversation and to a sub-agent."""


def _use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def _result(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text}


def _main_history(done: int, agent_result: str = "") -> list[dict[str, Any]]:
    """The main conversation after `done` steps (step 1 is the `Agent` call)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.PROMPT}]
    for k in range(done):
        args = {"prompt": subagents.SUBAGENT_PROMPT} if k == 1 else {"command": "x"}
        name = "Agent" if k == 1 else "Bash"
        messages.append({"role": "assistant", "content": [_use(f"toolu_cp_s{k}", name, args)]})
        text = agent_result if k == 1 else "ok"
        messages.append({"role": "user", "content": [_result(f"toolu_cp_s{k}", text)]})
    return messages


def _sub_history(log: str | None) -> list[dict[str, Any]]:
    """The sub-agent's conversation: the delegated prompt after Claude Code's notes, then the
    log step when `log` is given."""
    first = [
        {"type": "text", "text": "<system-reminder>\n# Environment\n</system-reminder>"},
        {"type": "text", "text": subagents.SUBAGENT_PROMPT},
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    if log is not None:
        use = _use("toolu_sub_cp_s1", "Bash", {"command": "tail"})
        messages.append({"role": "assistant", "content": [use]})
        messages.append({"role": "user", "content": [_result("toolu_sub_cp_s1", log)]})
    return messages


def test_the_subagent_model_plays_the_main_conversation_and_the_subagent_apart() -> None:
    model = subagents.SubagentModel("/repo")

    def reply(messages: list[dict[str, Any]], tools: list[str] = CLAUDE_TOOLS) -> Any:
        body, request = _anthropic_request(messages, tools)
        return model("anthropic", body, request)

    # Main, after listing: the log step is delegated, in the foreground, with the prompt.
    (call,) = reply(_main_history(1)).tool_calls
    args = json.loads(call.arguments)
    assert (call.id, call.name, args["prompt"]) == (
        "toolu_cp_s1",
        "Agent",
        subagents.SUBAGENT_PROMPT,
    )
    assert args["run_in_background"] is False and args["subagent_type"] == "general-purpose"
    # The sub-agent (its own first message, the same tools offered): prints the log under its
    # own call ids, though the main conversation has not printed it.
    (call,) = reply(_sub_history(None)).tool_calls
    assert (call.id, call.name) == ("toolu_sub_cp_s1", "Bash")
    assert json.loads(call.arguments)["command"] == scripted.LARGE_LOG_COMMAND
    # Shortened with recall offered: it recalls under its own id, then returns its result.
    recalled = reply(_sub_history(SHORT), [*CLAUDE_TOOLS, "recall"])
    assert [c.id for c in recalled.tool_calls] == ["toolu_sub_cp_recall"]
    done = reply(_sub_history("[01711] ERROR config check"))
    assert done.tool_calls == () and done.text == subagents.SUBAGENT_RESULT
    # Main again, with the sub-agent's report as the Agent call's result: it reads the module
    # (the prompt in its own Agent call does not make it the sub-agent's conversation).
    (call,) = reply(_main_history(2, subagents.SUBAGENT_RESULT)).tool_calls
    assert (call.id, call.name) == ("toolu_cp_s2", "Read")
    # A side call (no tools) is neither conversation's.
    assert reply([{"role": "user", "content": "Hi"}], []).text == "OK."
    assert model.main.replies == ["log", "read"]
    assert model.sub.replies == ["log", "recall", "answer"]
    assert (model.recalls, model.side) == (1, 1)


def test_split_conversations_sorts_requests_by_their_own_user_turns() -> None:
    echoed = _main_history(2, f"report of: {subagents.SUBAGENT_PROMPT}")  # echo in a tool result
    bodies = [
        _anthropic_request(_main_history(1), CLAUDE_TOOLS)[0],
        _anthropic_request(_sub_history(None), CLAUDE_TOOLS)[0],
        _anthropic_request([{"role": "user", "content": "Hi"}], [])[0],
        _anthropic_request(echoed, CLAUDE_TOOLS)[0],
    ]
    assert subagents.split_conversations(bodies) == {"main": [0, 3], "sub": [1]}


def test_conversation_leaks_flag_the_other_conversations_content_the_client_did_not_send() -> None:
    ref = 'recall(ref="0123456789ab")'
    main = (
        "main",
        _anthropic_request(_main_history(3, subagents.SUBAGENT_RESULT), CLAUDE_TOOLS)[0],
    )
    sub = ("sub", _anthropic_request(_sub_history(f"[00002] CC src/app/module_02.c\n{ref}"), [])[0])
    straight = [main, ("sub", _anthropic_request(_sub_history("x"), [])[0])]
    assert subagents.conversation_leaks(straight, [main, sub]) == []
    # The sub-agent's recall ref, or its log, shows up later in the main conversation.
    for foreign in (ref, "[00002] CC src/app/module_02.c ... ok"):
        leaked = _main_history(3, f"{subagents.SUBAGENT_RESULT}\n{foreign}")
        proxied = [main, sub, ("main", _anthropic_request(leaked, CLAUDE_TOOLS)[0])]
        found = subagents.conversation_leaks(straight, proxied)
        assert found and all(f.startswith("main request 1 carries") for f in found)
    # The main conversation's module lines in the sub-agent's requests.
    moved = ("sub", _anthropic_request(_sub_history("LIMIT_0003 = 21"), [])[0])
    found = subagents.conversation_leaks(straight, [main, moved])
    assert found == ["sub request 0 carries 'LIMIT_0003 = 21' of the main conversation"]
    # What the client itself sent in the straight run is its own, not a leak.
    assert subagents.conversation_leaks([main, moved], [main, moved]) == []

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachepilot.memory import (
    RESUME_TIERS,
    ItemKind,
    MemoryItem,
    Relation,
    SessionMemory,
    Status,
    item_id,
    outputs,
    patterns,
    resume_block,
    shell_facts,
)
from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.tokens import ApproximateEncoding, TokenCounter, get_counter
from cachepilot_bench.memory_eval import (
    compaction_pairs,
    evaluate_resume,
    names,
    summary_terms,
)

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
CC = TRACES / "claude_code_spotter"


# --- helpers -------------------------------------------------------------------------------


class CharEncoding:
    """One token per character: a strict fake counter."""

    name = "chars"

    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def call(cid: str, name: str, **args: object) -> ToolCall:
    return ToolCall(cid, name, json.dumps(args))


def turn(cid: str, name: str, result: str, text: str = "", **args: object) -> list[Message]:
    """An assistant message with one call, and the tool result answering it."""
    return [
        Message(role="assistant", content=text, tool_calls=(call(cid, name, **args),)),
        Message(role="tool", tool_call_id=cid, name=name, content=result),
    ]


def coding_session() -> list[Message]:
    msgs = [Message(role="user", content="Fix the failing parser test in src/app/parser.py")]
    msgs += turn(
        "c1",
        "Read",
        "1\tdef parse(x):\n2\t    return x\n",
        "Let me read the parser first.",
        file_path="/repo/src/app/parser.py",
    )
    msgs += turn(
        "c2",
        "Bash",
        "<returncode>1</returncode>\n<output>\n"
        "FAILED tests/test_parser.py::test_empty - AssertionError: expected []\n"
        "========= 1 failed, 4 passed in 0.12s =========\n</output>",
        command="cd /repo && python -m pytest tests/test_parser.py -q",
    )
    msgs += turn(
        "c3",
        "Edit",
        "The file /repo/src/app/parser.py has been updated successfully.",
        "The fix is to return an empty list because `parse_tokens` drops blanks.",
        file_path="/repo/src/app/parser.py",
        old_string="def parse(x):\n    return x",
        new_string="def parse(x):\n    return parse_tokens(x) or []\n\nclass TokenStream: ...",
    )
    msgs += turn(
        "c4",
        "Bash",
        "<returncode>0</returncode>\n<output>\n========= 5 passed in 0.10s =========\n</output>",
        command="cd /repo && python -m pytest tests/test_parser.py -q",
    )
    msgs.append(Message(role="assistant", content="All tests pass now; the parser is fixed."))
    return msgs


def filler(n: int, start: int = 0) -> list[Message]:
    """n messages: alternating tool calls over many files and their results."""
    out: list[Message] = []
    i = start
    while len(out) < n:
        cid = f"f{i}"
        out.append(
            Message(
                role="assistant",
                content=f"Now let me inspect module_{i} because step {i} needs it.",
                tool_calls=(call(cid, "Read", file_path=f"/repo/src/pkg/module_{i}.py"),),
            )
        )
        out.append(
            Message(role="tool", tool_call_id=cid, name="Read", content=f"def fn_{i}(): ...")
        )
        i += 1
    return out[:n]


# --- extraction from tool-call structure ---------------------------------------------------


def test_paths_and_actions_come_from_tool_call_structure() -> None:
    msgs = [Message(role="user", content="Tidy the repo")]
    msgs += turn("a", "Read", "x", file_path="/repo/src/a.py")
    msgs += turn(
        "b", "Write", "ok", file_path="/repo/src/new_mod.py", content="class NewThing: ..."
    )
    msgs += turn("c", "str_replace_editor", "ok", command="view", path="/repo/docs/guide.md")
    msgs += turn(
        "d",
        "str_replace_editor",
        "ok",
        command="str_replace",
        path="/repo/src/b.py",
        old_str="x = 1",
        new_str="x = compute_total(2)",
    )
    msgs += turn("e", "bash", "<returncode>0</returncode>", command="cat src/c.py | head -5")
    msgs += turn("f", "bash", "ok", command="sed -n '10,20p' src/d.py && sed -i 's/a/b/' src/e.py")
    msgs += turn("g", "bash", "ok", command="grep -n compute_total src/f.py")
    msgs += turn("h", "bash", "ok", command="python scripts/run_me.py --fast")
    msgs += turn("i", "apply_patch", "ok", input="*** Begin Patch\n*** Update File: src/g.py\n")
    mem = SessionMemory()
    mem.update(msgs)

    def actions(path: str) -> list[str]:
        item = mem.file(path)
        assert item is not None, path
        return item.actions

    assert actions("/repo/src/a.py") == ["read"]
    assert actions("/repo/src/new_mod.py") == ["create"]
    assert actions("/repo/docs/guide.md") == ["read"]
    assert actions("/repo/src/b.py") == ["edit"]
    assert actions("src/c.py") == ["read"]
    assert actions("src/d.py") == ["read"]
    assert actions("src/e.py") == ["edit"]
    assert actions("src/f.py") == ["search"]
    assert actions("scripts/run_me.py") == ["run"]
    assert actions("src/g.py") == ["edit"]
    # Symbols the edits introduced are exact facts; the command links to its file.
    assert mem.get(ItemKind.IDENTIFIER, "NewThing") is not None
    assert mem.get(ItemKind.IDENTIFIER, "compute_total") is not None
    cmd = mem.get(ItemKind.COMMAND, "python scripts/run_me.py --fast")
    assert cmd is not None and cmd.group == "python"
    assert item_id(ItemKind.FILE, "scripts/run_me.py") in mem.neighbours(cmd.id, Relation.TOUCHES)


def test_writing_a_known_file_is_an_edit_not_a_create() -> None:
    msgs = turn("a", "Read", "x", file_path="/r/src/a.py")
    msgs += turn("b", "Write", "ok", file_path="/r/src/a.py", content="x = 1")
    mem = SessionMemory()
    mem.update(msgs)
    item = mem.file("/r/src/a.py")
    assert item is not None and item.actions == ["edit", "read"]


def test_shell_facts_families_cwd_and_package_managers() -> None:
    facts = shell_facts("cd /testbed && uv run pytest -x tests/test_a.py::test_b 2>&1 | tail -5")
    assert facts.family == "pytest"
    assert facts.cwd == "/testbed"
    assert "uv" in facts.package_managers
    assert [(f.path, f.action) for f in facts.files] == [("tests/test_a.py", "run")]
    assert shell_facts("git commit -m 'x'").family == "git commit"
    assert shell_facts("FOO=1 timeout 30 mix test").family == "mix test"
    heredoc = shell_facts(
        "cat <<'EOF' > repro.py\ndef reproduce_bug():\n    pass\nEOF\npython repro.py"
    )
    assert ("repro.py", "create") in [(f.path, f.action) for f in heredoc.files]
    assert ("reproduce_bug", 2.0) in heredoc.identifiers
    # Quoted prose with a slash is not a path.
    assert shell_facts('bd close x --reason "done with a/b and c"').files == []


def test_swe_agent_edit_without_path_uses_the_open_file() -> None:
    msgs = turn("a", "open", "[File: /repo/x.py (10 lines total)]", path="/repo/x.py")
    msgs += turn("b", "edit", "ok", search="a", replace="b")
    mem = SessionMemory()
    mem.update(msgs)
    item = mem.file("/repo/x.py")
    assert item is not None and item.actions == ["edit", "read"]


# --- results: errors, lifecycle ------------------------------------------------------------


def test_pytest_failure_opens_an_error_and_a_later_pass_resolves_it() -> None:
    msgs = coding_session()
    mem = SessionMemory()
    mem.update(msgs[:5])  # up to the failing run
    errors = mem.by_kind(ItemKind.ERROR)
    assert [e.status for e in errors] == [Status.OPEN]
    assert "test_empty" in errors[0].text and errors[0].group == "pytest"
    command = mem.get(ItemKind.COMMAND, "cd /repo && python -m pytest tests/test_parser.py -q")
    assert command is not None and command.exit_code == 1
    assert "1 failed, 4 passed" in command.detail
    assert errors[0].id in mem.neighbours(command.id, Relation.PRODUCED)
    mem.update(msgs)
    error = mem.items[errors[0].id]
    assert error.status == Status.RESOLVED
    assert command.exit_code == 0
    # The passing run is a milestone; the completion cue closes the task.
    assert any(m.key == "pass:pytest" for m in mem.by_kind(ItemKind.MILESTONE))
    assert [t.status for t in mem.by_kind(ItemKind.TASK)] == [Status.DONE]
    decision = mem.by_kind(ItemKind.DECISION)
    assert any("The fix is to return an empty list" in d.text for d in decision)


def test_error_that_stops_appearing_is_resolved_and_a_recurring_one_reopens() -> None:
    cmd = "mix test"
    msgs = turn(
        "a",
        "Bash",
        "Exit code 1\n** (CompileError) lib/a.ex:3: undefined function foo/0",
        command=cmd,
    )
    msgs += turn("b", "Bash", "Exit code 1\n** (RuntimeError) boom in lib/b.ex:9", command=cmd)
    mem = SessionMemory()
    mem.update(msgs)
    by_text = {e.text.split(")")[0]: e for e in mem.by_kind(ItemKind.ERROR)}
    assert by_text["** (CompileError"].status == Status.RESOLVED
    assert by_text["** (RuntimeError"].status == Status.OPEN
    # The error names its file: file → error edge.
    file_item = mem.file("lib/b.ex")
    assert file_item is not None
    assert by_text["** (RuntimeError"].id in mem.neighbours(file_item.id, Relation.RAISED)
    mem.update(
        msgs
        + turn(
            "c",
            "Bash",
            "Exit code 1\n** (CompileError) lib/a.ex:3: undefined function foo/0",
            command=cmd,
        )
    )
    assert by_text["** (CompileError"].status == Status.OPEN


def test_only_valid_transitions_apply() -> None:
    task = MemoryItem(kind=ItemKind.TASK, key="t", text="t", status=Status.OPEN)
    assert not task.transition(Status.RESOLVED)
    assert task.transition(Status.DONE) and task.status == Status.DONE
    assert not task.transition(Status.DONE)
    fact = MemoryItem(kind=ItemKind.IDENTIFIER, key="x", text="x")
    assert not fact.transition(Status.DONE) and fact.status == Status.ACTIVE
    error = MemoryItem(kind=ItemKind.ERROR, key="e", text="e", status=Status.OPEN)
    assert not error.transition(Status.DONE)
    assert error.transition(Status.RESOLVED) and error.transition(Status.OPEN)


def test_grep_without_match_is_not_an_error_and_reads_are_not_scanned() -> None:
    msgs = turn(
        "a", "bash", "<returncode>1</returncode>\n<output>\n</output>", command="grep -rn zzz src/"
    )
    msgs += turn(
        "b", "Read", "raise ValueError('x')\nclass FooError(Exception): ...", file_path="/r/a.py"
    )
    msgs += turn(
        "c", "bash", "<returncode>0</returncode>\nTypeError: in a log line", command="cat log.txt"
    )
    mem = SessionMemory()
    mem.update(msgs)
    assert mem.by_kind(ItemKind.ERROR) == []


def test_environment_facts_and_commits() -> None:
    msgs = turn(
        "a",
        "bash",
        "platform linux -- Python 3.11.4, pytest-8.0.0, pluggy-1.0\n3 passed in 0.1s",
        command="cd /work/proj && pytest",
    )
    msgs += turn("b", "bash", "On branch feature-x\nnothing to commit", command="git status")
    msgs += turn(
        "c",
        "bash",
        "[feature-x 1a2b3c4] fix: handle empty input\n 1 file changed",
        command="git commit -am 'fix'",
    )
    mem = SessionMemory()
    mem.update(msgs)
    env = {e.key: e.text for e in mem.by_kind(ItemKind.ENVIRONMENT)}
    assert env["cwd"] == "cwd: /work/proj"
    assert env["python"] == "python: 3.11.4"
    assert env["pytest"] == "pytest: 8.0.0"
    assert env["branch"] == "branch: feature-x"
    commits = [m.text for m in mem.by_kind(ItemKind.MILESTONE) if m.key.startswith("commit:")]
    assert commits == ["commit 1a2b3c4: fix: handle empty input"]


def test_answers_to_questions_are_user_decisions_not_new_tasks() -> None:
    msgs = [
        Message(role="user", content="Book a flight from New York to Seattle."),
        Message(role="assistant", content="Sure. What is your user id?"),
        Message(role="user", content="My user ID is mia_li_3668."),
        Message(role="user", content="Also please check flight HAT136 for May 20."),
    ]
    mem = SessionMemory()
    mem.update(msgs)
    tasks = [t.text for t in mem.by_kind(ItemKind.TASK)]
    assert tasks == [
        "Book a flight from New York to Seattle.",
        "Also please check flight HAT136 for May 20.",
    ]
    assert any(d.text.startswith("user: My user ID") for d in mem.by_kind(ItemKind.DECISION))
    assert mem.get(ItemKind.IDENTIFIER, "mia_li_3668") is not None
    assert mem.get(ItemKind.IDENTIFIER, "HAT136") is not None


# --- incremental update --------------------------------------------------------------------


def test_update_is_incremental_and_idempotent() -> None:
    msgs = coding_session() + filler(110 - len(coding_session()))
    assert len(msgs) == 110
    mem = SessionMemory()
    assert mem.update(msgs[:100]) == 100
    assert mem.update(msgs) == 10
    dump = mem.model_dump()
    assert mem.update(msgs) == 0
    assert mem.update(msgs[:50]) == 0
    assert mem.model_dump() == dump
    batch = SessionMemory()
    batch.update(msgs)
    assert batch.model_dump() == dump
    assert batch.resume_block(300) == mem.resume_block(300)


def test_update_uses_given_keys_and_checks_alignment() -> None:
    msgs = coding_session()
    keys = [f"k{i}" for i in range(len(msgs))]
    mem = SessionMemory()
    assert mem.update(msgs, keys) == len(msgs)
    assert mem.update(msgs, keys) == 0
    assert mem.update(msgs[:2], ["new1", "new2"]) == 2  # new keys are new messages
    with pytest.raises(ValueError, match="align"):
        mem.update(msgs, keys[:-1])


# --- resume blocks -------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["real", "approx", "chars"])
@pytest.mark.parametrize("budget", [*RESUME_TIERS, 1, 5, 12, 37, 150, 1000])
def test_resume_block_fits_every_budget(encoding: str, budget: int) -> None:
    counter = {
        "real": get_counter(),
        "approx": TokenCounter(ApproximateEncoding()),
        "chars": TokenCounter(CharEncoding()),
    }[encoding]
    mem = SessionMemory()
    mem.update(coding_session() + filler(80))
    block = mem.resume_block(budget, counter)
    assert counter.count(block) <= budget
    if budget >= 100 and encoding != "chars":
        assert block.startswith("## Session memory\nGoal: Fix the failing parser test")


def test_resume_block_sections_and_content() -> None:
    mem = SessionMemory()
    mem.update(coding_session())
    block = mem.resume_block(600)
    assert "Goal: Fix the failing parser test in src/app/parser.py (done)" in block
    assert "Files edited: src/app/parser.py" in block  # relative to the inferred root
    assert "fixed: FAILED tests/test_parser.py::test_empty" in block
    assert "parse_tokens" in block
    assert "root: /repo" in block or "cwd: /repo" in block
    labels = [line.split(":")[0] for line in block.splitlines() if not line.startswith("- ")]
    order = ["## Session memory", "Goal", "Done", "Files edited", "Errors", "Facts"]
    assert [label for label in labels if label in order] == order


def test_resume_block_is_deterministic_and_survives_json_round_trip() -> None:
    msgs = coding_session() + filler(60)
    a, b = SessionMemory(), SessionMemory()
    a.update(msgs)
    b.update(msgs)
    for budget in (*RESUME_TIERS, None):
        assert a.resume_block(budget) == b.resume_block(budget)
    restored = SessionMemory.model_validate_json(a.model_dump_json())
    assert restored.model_dump() == a.model_dump()
    assert restored.resume_block(300) == a.resume_block(300)
    # The restored memory still knows which messages it has seen.
    assert restored.update(msgs) == 0
    assert restored.update([*msgs, Message(role="user", content="Now add docs for parse")]) == 1


def test_resume_block_edge_cases() -> None:
    empty = SessionMemory()
    assert empty.resume_block(300) == ""
    assert resume_block(empty, None) == ""
    mem = SessionMemory()
    mem.update(coding_session())
    assert mem.resume_block(0) == ""
    with pytest.raises(ValueError, match="budget_tokens"):
        mem.resume_block(-1)
    uncapped = mem.resume_block(None)
    assert len(uncapped) >= len(mem.resume_block(600))


# --- bounds and bad input ------------------------------------------------------------------


def test_caps_bound_every_kind_with_deterministic_eviction() -> None:
    msgs = coding_session() + filler(400)
    a = SessionMemory(cap_per_kind=10)
    a.update(msgs)
    kinds: dict[ItemKind, int] = {}
    for item in a.items.values():
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    assert max(kinds.values()) <= 10
    # The most recent files survive; an edited file outranks old reads.
    assert a.file("/repo/src/pkg/module_199.py") is not None
    assert a.file("/repo/src/pkg/module_0.py") is None
    assert a.file("/repo/src/app/parser.py") is not None
    b = SessionMemory(cap_per_kind=10)
    b.update(msgs)
    assert a.model_dump() == b.model_dump()
    assert all(e.src in a.items and e.dst in a.items for e in a.edges)
    with pytest.raises(ValueError):
        SessionMemory(cap_per_kind=0)


def test_odd_messages_never_crash() -> None:
    huge = ("x" * 1000 + "\n") * 1000  # 1 MB
    pathological = [
        "a" * 1_000_000,
        "/" * 1_000_000,
        "_a" * 500_000,
        "Error: " * 150_000,
        "`" * 1_000_000,
        ("a/" * 200 + " ") * 2_000,
        "x." * 500_000,
        "Traceback (most recent call last):\n" * 30_000,
        "\x1b[31m" * 100_000,
        "'" * 1_000_000,
    ]
    msgs: list[Message] = [
        Message(role="user", content=""),
        Message(role="user", content=(ImagePart("data:image/png;base64,AAAA"),)),
        Message(role="assistant", content=(ReasoningPart("thinking", signature="s"),)),
        Message(role="assistant", content=""),
        Message(role="tool", tool_call_id="orphan", content="no call for me"),
        Message(role="system", content="You are helpful.\x00\udcff"),
        Message(role="assistant", content="x", tool_calls=(ToolCall("bad", "Bash", "{not json"),)),
        Message(
            role="tool", tool_call_id="bad", content=(TextPart("ok"), ImagePart("https://x/y.png"))
        ),
        Message(role="user", content="\udcff\udcfe broken surrogates src/a.py"),
        Message(
            role="assistant",
            content="`sur\udcffrogate_name` I'll fix \udcff.py because it breaks",
            tool_calls=(call("s\udcff", "Bash", command="cat /r/\udcff.py && exit 3"),),
        ),
        Message(role="tool", tool_call_id="s\udcff", content="Exit code 3\nError: \udcff bad"),
    ]
    for n, text in enumerate([huge, *pathological]):
        cid = f"h{n}"
        msgs.append(
            Message(
                role="assistant",
                content=text[:200_000],
                tool_calls=(call(cid, "Bash", command=text[:100_000]),),
            )
        )
        msgs.append(Message(role="tool", tool_call_id=cid, content="Exit code 1\n" + text))
        msgs.append(Message(role="user", content=text))
    mem = SessionMemory()
    assert mem.update(msgs) == len(msgs)
    for budget in (*RESUME_TIERS, None):
        block = mem.resume_block(budget)
        if budget is not None:
            assert get_counter().count(block) <= budget
    assert len(mem.model_dump_json()) < 2_000_000


def test_patterns_on_long_degenerate_lines() -> None:
    # Each input would take quadratic time under a backtracking-prone pattern.
    assert patterns.decisions("word." * 200_000) == []
    assert patterns.paths_in_text("a/" * 100_000 + "x.py") == []  # beyond 30 segments
    assert outputs.error_hits("E" * 500_000 + "rror: x") == []
    assert outputs.test_summary("1 failed, " * 100_000) is None
    assert patterns.identifiers("`" + "a" * 500_000) == []
    assert shell_facts("'" * 100_000 + " && ls").family == "ls"


def test_plans_and_todo_tools_become_open_work() -> None:
    text = (
        "Now I know what to do. I'll update:\n\n1. **parser.py** - handle blanks\n2. tests\n\nGo."
    )
    assert patterns.plan_steps(text) == ["parser.py - handle blanks", "tests"]
    msgs = [Message(role="user", content="Refactor the parser module")]
    msgs.append(Message(role="assistant", content=text))
    msgs += turn(
        "t",
        "TodoWrite",
        "ok",
        todos=[
            {"content": "Split tokenizer", "status": "completed"},
            {"content": "Add fuzz tests", "status": "in_progress"},
        ],
    )
    mem = SessionMemory.from_messages(msgs)
    block = mem.resume_block(300)
    assert "Plan: parser.py - handle blanks; tests" in block
    assert "- Add fuzz tests" in block.split("Open work:")[1]
    assert "- Split tokenizer" in block.split("Done:")[1].split("Open work:")[0]


# --- evaluation helpers --------------------------------------------------------------------


def test_summary_terms_and_matching() -> None:
    summary = (
        "This session is being continued from a previous conversation that ran out of context.\n"
        "Modified `lib/app/annotation.ex` and mix.exs; added `close_review_session` to "
        "ProjectReviewLive. Open/closed states, see `length/1` and `:state`.\n"
        "If you need specific details from before compaction, read /home/u/.claude/x.jsonl\n"
    )
    paths, idents = summary_terms(summary)
    assert paths == ["lib/app/annotation.ex", "mix.exs"]
    assert idents == [":state", "ProjectReviewLive", "close_review_session", "length"]
    assert names("edited lib/app/annotation.ex today", "annotation.ex")
    assert not names("see resources_test.exs", "test.exs")
    assert names("Facts: Spotter.Transcripts.AnnotationMessageRef", "AnnotationMessageRef")
    assert not names("create_message_refs", "message_refs")


@pytest.mark.traces
def test_resume_blocks_name_much_of_claude_codes_own_summaries() -> None:
    if not CC.is_dir():
        pytest.skip(f"shared traces not found at {CC}")
    report = evaluate_resume([CC])
    assert len(report.sessions) == 2
    # Measured (benchmarks/resume_vs_compact.py); a small margin for tokenizer drift.
    measured = {100: 0.107, 300: 0.286, 600: 0.459, None: 0.842}
    for budget, share in measured.items():
        assert report.mean_share(budget) >= share - 0.03, budget
    for session in report.sessions:
        for tier in session.tiers:
            if tier.budget is not None:
                assert tier.tokens <= tier.budget
    table = report.format_table()
    assert "share@100" in table and "uncapped" in table
    assert json.loads(json.dumps(report.to_dict()))["mean_share"]["300"] >= 0.2


@pytest.mark.traces
def test_compaction_pairs_link_the_parts_of_a_session() -> None:
    if not CC.is_dir():
        pytest.skip(f"shared traces not found at {CC}")
    from cachepilot_bench.traces import load_paths

    pairs = compaction_pairs(load_paths([CC]))
    assert [(b.id + "#2" == a.id) for b, a in pairs] == [True, True]
    for before, after in pairs:
        assert "compact_summary" not in before.meta
        assert after.meta["compact_summary"].startswith("This session is being continued")

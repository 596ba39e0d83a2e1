"""Tests of the built-in demo workload (cachepilot_bench.demo_workload)."""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import os
import re
import tempfile
from pathlib import Path

import pytest

import cachepilot
from cachepilot.messages import Message, pairing_issues
from cachepilot.tokens import TokenCounter
from cachepilot_bench.demo_workload import (
    AGENT_SESSION_UUID,
    DEMO_CWD,
    DEMO_SESSION_ID,
    DEMO_TOOL_SCHEMAS,
    DEMO_TOOLS,
    TASK2_FIRST_CALL,
    DemoToolState,
    build_demo_session,
    call_timestamp,
    run_demo_tool,
    volatile_system_prompt,
)
from cachepilot_bench.demo_workload import tools as demo_tools
from cachepilot_bench.demo_workload.generate import IDLE_GAP_SECONDS, START_EPOCH
from cachepilot_bench.traces.session import Session

DATA_DIR = Path(demo_tools.__file__).parent / "data"
SERVICE = "inventory/service.py"


@pytest.fixture(scope="module")
def session() -> Session:
    return build_demo_session()


CAPTURE_MODULE = "cachepilot_bench.demo_workload._capture"


def _blob(session: Session) -> str:
    return json.dumps(
        {
            "id": session.id,
            "source": session.source,
            "model": session.model,
            "messages": [
                [
                    m.role,
                    m.text,
                    [[c.id, c.name, c.arguments] for c in m.tool_calls],
                    m.tool_call_id,
                    m.name,
                ]
                for m in session.messages
            ],
            "tools": session.tools,
            "calls": [[c.index, c.timestamp, c.model, c.usage] for c in session.calls],
            "meta": session.meta,
        },
        sort_keys=True,
        ensure_ascii=False,
    )


def _tool_results(session: Session) -> list[tuple[str, dict[str, object], str]]:
    """(tool name, parsed arguments, output) for every tool call, in order."""
    calls = {c.id: c for m in session.messages for c in m.tool_calls}
    out = []
    for message in session.messages:
        if message.role == "tool":
            call = calls[message.tool_call_id or ""]
            out.append((call.name, call.parsed_arguments(), message.text))
    return out


def _shipped_lines(path: str) -> list[str]:
    return demo_tools.shipped_workspace()[path].split("\n")


# --------------------------------------------------------------------------- determinism


def test_build_is_deterministic(session: Session) -> None:
    again = build_demo_session()
    assert again.messages == session.messages
    assert again.calls == session.calls
    assert again.tools == session.tools
    assert _blob(again) == _blob(session)


def test_no_machine_specific_text(session: Session) -> None:
    blob = _blob(session)
    package_dir = str(Path(cachepilot.__file__).resolve().parent)
    assert package_dir not in blob
    assert str(DATA_DIR.resolve()) not in blob
    assert os.getcwd() not in blob
    assert tempfile.gettempdir() + "/cachepilot" not in blob
    home = str(Path.home())
    if home not in ("/", "/root"):
        assert home not in blob
    assert DEMO_CWD in blob


def test_session_identity(session: Session) -> None:
    assert session.id == DEMO_SESSION_ID
    assert session.source == "demo"
    assert session.messages[0].role == "system"
    assert all(c.usage is None for c in session.calls)


# --------------------------------------------------------------------------- structure


def test_pairing(session: Session) -> None:
    assert pairing_issues(session.messages, allow_pending_tail=False) == []


def test_one_recorded_call_per_assistant_message(session: Session) -> None:
    assert [c.index for c in session.calls] == session.assistant_indices


def test_tool_call_ids_are_sequential(session: Session) -> None:
    ids = [c.id for m in session.messages for c in m.tool_calls]
    assert ids == [f"call_{n:04d}" for n in range(1, len(ids) + 1)]
    # A few turns call two tools at once.
    assert any(len(m.tool_calls) == 2 for m in session.messages)


def test_two_tasks_in_one_session(session: Session) -> None:
    users = [i for i, m in enumerate(session.messages) if m.role == "user"]
    assert len(users) == 2
    assert "INV-482" in session.messages[users[0]].text
    assert "low_stock_report" in session.messages[users[1]].text
    assert session.assistant_indices[TASK2_FIRST_CALL] == users[1] + 1
    # Each task ends with a text-only answer.
    for end in (users[1] - 1, len(session.messages) - 1):
        assert session.messages[end].role == "assistant"
        assert not session.messages[end].tool_calls


def test_timestamps_and_idle_gap(session: Session) -> None:
    stamps = [c.timestamp for c in session.calls]
    assert stamps[0] == START_EPOCH
    assert stamps == [call_timestamp(n) for n in range(len(stamps))]
    gaps = [b - a for a, b in itertools.pairwise(c.timestamp or 0.0 for c in session.calls)]
    idle = gaps[TASK2_FIRST_CALL - 1]
    assert idle >= IDLE_GAP_SECONDS > 600
    others = gaps[: TASK2_FIRST_CALL - 1] + gaps[TASK2_FIRST_CALL:]
    assert all(20 <= g <= 90 for g in others)


def test_size_targets(session: Session) -> None:
    counter = TokenCounter("o200k_base")
    assert 50 <= len(session.calls) <= 70
    assert 25 <= TASK2_FIRST_CALL <= 35
    assert 15 <= len(session.calls) - TASK2_FIRST_CALL <= 30
    context = counter.count_messages(session.messages[: session.assistant_indices[-1]])
    low, high = (60_000, 125_000) if not counter.approximate else (30_000, 250_000)
    assert low <= context <= high
    results = _tool_results(session)
    reads = [out for name, _, out in results if name == "read_file"]
    assert max(len(r) for r in reads) > 20_000
    fetched = [out for name, _, out in results if name == "fetch_url"]
    assert any(f.lstrip().startswith("<!doctype html>") and len(f) > 30_000 for f in fetched)
    assert any(f.startswith("{") and len(f) > 25_000 for f in fetched)


# --------------------------------------------------------------------------- the system prompt


def test_volatile_system_prompt(session: Session) -> None:
    first = volatile_system_prompt(0)
    assert session.messages[0].content == first
    assert "Today is Tuesday, 2026-03-17 14:05:09 UTC" in first
    assert f"Working directory: {DEMO_CWD}" in first
    assert AGENT_SESSION_UUID in first
    second = volatile_system_prompt(1)
    assert second != first
    assert second.replace(second.split("\n")[1], "") == first.replace(first.split("\n")[1], "")
    per_call = session.meta["system_per_call"]
    assert len(per_call) == len(session.calls)
    assert per_call == [volatile_system_prompt(n) for n in range(len(session.calls))]
    assert len(set(per_call)) == len(per_call)


def test_call_timestamp_rejects_negative() -> None:
    with pytest.raises(ValueError, match="call_number"):
        call_timestamp(-1)


# --------------------------------------------------------------------------- real tool outputs


def test_tool_outputs_replay_from_the_shipped_files(session: Session) -> None:
    state = DemoToolState()
    calls = {c.id: c for m in session.messages for c in m.tool_calls}
    for message in session.messages:
        if message.role == "tool":
            call = calls[message.tool_call_id or ""]
            assert run_demo_tool(call.name, call.arguments, state) == message.content, call.id


def test_read_file_shows_shipped_lines_with_numbers(session: Session) -> None:
    lines = _shipped_lines(SERVICE)
    number = next(i for i, line in enumerate(lines, 1) if "def expire_stale_reservations" in line)
    first_read = next(
        out
        for name, args, out in _tool_results(session)
        if name == "read_file" and args == {"path": SERVICE}
    )
    assert f"{number:>6}\t{lines[number - 1]}" in first_read
    assert first_read.startswith('     1\t"""The inventory service')
    assert len(first_read.split("\n")) == len(lines) - 1  # trailing newline: no empty last line


def test_shipped_logs_reach_the_transcript(session: Session) -> None:
    bash = [(args["command"], out) for name, args, out in _tool_results(session) if name == "bash"]
    by_command: dict[str, list[str]] = {}
    for command, out in bash:
        by_command.setdefault(str(command), []).append(out)
    pip = by_command["pip install -e '.[dev]'"][0]
    assert "\r" in pip and "Successfully installed acme-inventory-2.7.0" in pip
    assert pip == demo_tools.shipped_output("pip_install.log")
    (failing,) = [o for o in by_command["pytest -v"] if "4 failed" in o]
    assert "\x1b[" in failing and "[ 50%]" in failing
    assert failing.endswith("[exit code 1]")
    assert "ModuleNotFoundError: No module named 'inventory'" in by_command["pytest -v"][0]
    assert "63 passed" in by_command["pytest -q"][0]
    assert "68 passed" in by_command["pytest -q"][1]
    log = by_command["git log -n 6"][0]
    assert log.startswith("commit 969ea9e9200d892f72c1354d2fda090c48b0160c (HEAD -> main")
    assert log.count("\ncommit ") == 5


def test_loop_of_three_identical_commands(session: Session) -> None:
    bash = [(args["command"], out) for name, args, out in _tool_results(session) if name == "bash"]
    runs = [i for i in range(len(bash) - 2) if bash[i] == bash[i + 1] == bash[i + 2]]
    assert runs, "expected the same command with the same output three times in a row"
    assert "reserved would become -12" in bash[runs[0]][1]


def test_docs_page_fetched_twice_identically(session: Session) -> None:
    pages = [
        out
        for name, args, out in _tool_results(session)
        if name == "fetch_url" and args["url"] == demo_tools.DOCS_URL
    ]
    assert len(pages) == 2 and pages[0] == pages[1]
    page = pages[0]
    for marker in ("<nav", "<script", "<style>", "<table>", "Expiry"):
        assert marker in page


def test_edits_visible_in_later_reads(session: Session) -> None:
    full_reads = [
        out
        for name, args, out in _tool_results(session)
        if name == "read_file" and args == {"path": SERVICE}
    ]
    assert len(full_reads) == 2  # the second supersedes the first
    before, after = full_reads
    assert "Mark the reservation first so a concurrent commit()" in before
    assert "Mark the reservation first so a concurrent commit()" not in after
    assert "so its units stayed reserved forever (INV-482)" in after
    diff = next(
        out for name, args, out in _tool_results(session) if args == {"command": "git diff"}
    )
    assert diff.startswith("diff --git a/inventory/service.py b/inventory/service.py")
    assert "-            # Mark the reservation first" in diff
    reports = [
        out
        for name, args, out in _tool_results(session)
        if name == "read_file" and args == {"path": "inventory/reports.py"}
    ]
    assert "def low_stock_report" not in reports[0] and "def low_stock_report" in reports[1]


def test_task2_rereads_files_of_task1(session: Session) -> None:
    users = [i for i, m in enumerate(session.messages) if m.role == "user"]
    read_in: list[set[str]] = [set(), set()]
    for index, message in enumerate(session.messages):
        for call in message.tool_calls:
            if call.name == "read_file":
                read_in[index > users[1]].add(str(call.parsed_arguments()["path"]))
    assert {"inventory/api.py", "inventory/models.py", SERVICE, "tests/conftest.py"} <= (
        read_in[0] & read_in[1]
    )


def test_assistant_facts_come_from_earlier_messages(session: Session) -> None:
    """Every `quoted` span in assistant text was seen before (fidelity can be measured)."""
    seen = ""
    for message in session.messages:
        if message.role == "assistant":
            own_args = "\n".join(c.arguments for c in message.tool_calls)
            for span in re.findall(r"`([^`]+)`", message.text):
                assert span in seen or span in own_args, span
        seen += "\n" + message.text + "\n" + "\n".join(c.arguments for c in message.tool_calls)


def test_captured_runs_match_the_workspace_exactly(session: Session) -> None:
    """Every test/lint output in the session comes from a real run on that exact workspace."""
    runs = demo_tools._captured_runs()
    state = DemoToolState()
    calls = {c.id: c for m in session.messages for c in m.tool_calls}
    checked = 0
    for message in session.messages:
        if message.role != "tool":
            continue
        call = calls[message.tool_call_id or ""]
        command = str(call.parsed_arguments().get("command", ""))
        if call.name == "bash" and demo_tools.is_captured_command(command.split()):
            tree = state.tree_digest()
            assert any(
                r.command == command and r.installed == state.installed and dict(r.tree) == tree
                for r in runs
            ), f"stale capture for {command!r}: run python -m {CAPTURE_MODULE}"
            checked += 1
        run_demo_tool(call.name, call.arguments, state)
    assert checked >= 8


def test_shipped_data_is_untouched_by_edits(session: Session) -> None:
    shipped = demo_tools.shipped_workspace()
    assert "low_stock_report" not in shipped["inventory/reports.py"]
    state = DemoToolState()
    run_demo_tool(
        "edit_file",
        json.dumps({"path": "README.md", "old": "# acme-inventory", "new": "# x"}),
        state,
    )
    assert state.modified() == ["README.md"]
    assert DemoToolState().files == dict(shipped)


# --------------------------------------------------------------------------- tools


def _run(name: str, state: DemoToolState | None = None, **arguments: object) -> str:
    return run_demo_tool(name, json.dumps(arguments), state or DemoToolState())


def test_schemas_match_the_functions() -> None:
    names = [s["function"]["name"] for s in DEMO_TOOL_SCHEMAS]
    assert names == list(DEMO_TOOLS)
    for schema in DEMO_TOOL_SCHEMAS:
        function = DEMO_TOOLS[schema["function"]["name"]]
        params = list(inspect.signature(function).parameters)[1:]
        assert params == list(schema["function"]["parameters"]["properties"])


def test_read_file_ranges_and_errors() -> None:
    lines = _shipped_lines("README.md")
    assert _run("read_file", path="README.md", start_line=2, end_line=3) == (
        f"     2\t{lines[1]}\n     3\t{lines[2]}"
    )
    assert _run("read_file", path=f"{DEMO_CWD}/README.md", end_line=1) == f"     1\t{lines[0]}"
    assert _run("read_file", path="nope.py").startswith("Error: no such file")
    assert _run("read_file", path="inventory").startswith("Error: inventory is a directory")
    assert _run("read_file", path="/etc/passwd").startswith("Error: /etc/passwd is outside")
    assert _run("read_file", path="../../etc/passwd").startswith("Error: no such file")
    assert _run("read_file", path="README.md", start_line=10_000).startswith("Error:")


def test_list_dir() -> None:
    out = _run("list_dir", path=".")
    assert out.split("\n")[0] == f"{DEMO_CWD}:"
    assert "inventory/" in out.split("\n") and "tests/" in out.split("\n")
    assert re.search(r"^README\.md +[\d,]+ bytes$", out, re.MULTILINE)
    assert _run("list_dir", path="README.md").startswith("Error:")
    assert _run("list_dir", path="missing").startswith("Error: no such directory")


def test_grep() -> None:
    out = _run("grep", pattern=r"def expire_stale_reservations", path="inventory")
    number = next(
        i for i, line in enumerate(_shipped_lines(SERVICE), 1) if "def expire_stale" in line
    )
    assert out.startswith(f"{SERVICE}:{number}:    def expire_stale_reservations(")
    assert _run("grep", pattern="zzz_not_there", path=".") == "(no matches)"
    assert _run("grep", pattern="(", path=".").startswith("Error: invalid regular expression")


def test_edit_file() -> None:
    state = DemoToolState()
    out = _run("edit_file", state, path="README.md", old="# acme-inventory", new="# inventory")
    assert out.startswith("Edited README.md: replaced 1 line with 1 line at line 1.")
    assert _run("read_file", state, path="README.md", end_line=1) == "     1\t# inventory"
    assert "not found" in _run("edit_file", state, path="README.md", old="# acme", new="x")
    assert "occurs" in _run("edit_file", state, path="README.md", old="WH-", new="x")
    assert _run("edit_file", state, path="NEW.md", old="", new="hi\n").startswith("Created")
    assert "NEW.md" in _run("bash", state, command="git status")


def test_fetch_url() -> None:
    page = _run("fetch_url", url=demo_tools.DOCS_URL)
    assert page == demo_tools.shipped_workspace()["docs/index.html"]
    body = json.loads(_run("fetch_url", url=demo_tools.STAGING_STOCK_URL))
    item = next(i for i in body["items"] if i["sku"] == "WID-0042")
    assert (item["on_hand"], item["reserved"], item["reservations"]) == (12, 12, [])
    assert _run("fetch_url", url="https://example.com/").startswith("Error: could not resolve")
    assert _run("fetch_url", url="ftp://x").startswith("Error: unsupported")


def test_bash_commands() -> None:
    state = DemoToolState()
    assert _run("bash", state, command="git status").endswith("working tree clean")
    oneline = _run("bash", state, command="git log --oneline -n 2").split("\n")
    assert oneline[0].startswith("969ea9e (HEAD -> main")
    assert len(oneline) == 2
    assert _run("bash", state, command="git diff") == ""
    assert _run("bash", state, command="git log -n 6 | tail -n 1") != ""
    assert _run("bash", state, command="wc -l README.md").endswith(" README.md")
    assert "command not found" in _run("bash", state, command="make test")
    before_install = _run("bash", state, command="pytest -v")
    assert "No module named 'inventory'" in before_install
    _run("bash", state, command="pip install -e .")
    assert state.installed
    assert "4 failed" in _run("bash", state, command="python -m pytest -v 2>&1")


def test_run_demo_tool_never_raises() -> None:
    state = DemoToolState()
    assert run_demo_tool("nope", "{}", state).startswith("Error: unknown tool")
    assert run_demo_tool("read_file", "{not json", state).startswith("Error:")
    assert run_demo_tool("read_file", "[1]", state).startswith("Error:")
    assert run_demo_tool("read_file", '{"wrong": 1}', state).startswith("Error: bad arguments")
    assert run_demo_tool("read_file", '{"path": "README.md", "start_line": "x"}', state).startswith(
        "Error:"
    )
    assert run_demo_tool("bash", '{"command": "echo \\"unterminated"}', state).startswith("bash:")


# --------------------------------------------------------------------------- packaging


def test_data_folder_is_small_and_tool_safe() -> None:
    files = [p for p in DATA_DIR.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 300_000
    assert not [p for p in files if p.suffix in (".png", ".py", ".pyc")]
    referenced = {"captured.json", "git_log.txt", "pip_install.log", "staging_stock_WH-EAST.json"}
    referenced |= {r.output for r in demo_tools._captured_runs()}
    assert {p.name for p in (DATA_DIR / "outputs").iterdir()} == referenced


def test_message_contents_are_plain_text(session: Session) -> None:
    assert all(isinstance(m, Message) and isinstance(m.content, str) for m in session.messages)


# Pinned so a build on another machine (other OS, Python, checkout with CRLF conversion)
# that differs by a single byte fails. Update it only for a deliberate change of the
# workload: data files, session script or tools.
GOLDEN_SHA256 = "a941b18f66625064e536962306653fe7aea237afa2ec262bd121253e66b94fce"


def test_session_bytes_are_pinned(session: Session) -> None:
    digest = hashlib.sha256(_blob(session).encode()).hexdigest()
    assert digest == GOLDEN_SHA256, "demo session changed; update GOLDEN_SHA256 if intended"

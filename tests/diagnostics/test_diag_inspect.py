"""`cachepilot inspect` on real pilot states: a JSON file, an Agents SDK state database (the
plugin's own store), and a LangGraph SQLite checkpoint written by a real graph."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from cachepilot import CachePilot, Config
from cachepilot.artifacts import SQLiteArtifactStore
from cachepilot.cli import main
from cachepilot.diagnose.inspect import inspect_report, load_threads
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot_bench.demo_workload import DEMO_TOOL_SCHEMAS, build_demo_session
from cachepilot_langgraph.inspect import from_checkpointer

SESSION = build_demo_session()


@pytest.fixture(scope="module")
def pilot_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[CachePilot, Path]:
    """The demo session through a pilot that maintains eagerly: epochs, decisions, archive."""
    archive = tmp_path_factory.mktemp("archive") / "artifacts.sqlite"
    config = Config(
        maintenance=MaintenanceConfig(
            schedule="fixed", every=3, min_prune_tokens=200, protect_tool_tokens=1_000
        )
    )
    pilot = CachePilot(config, store=SQLiteArtifactStore(archive))
    system = SESSION.messages[0].text
    transcript = []
    for original in SESSION.messages[1:]:
        message = original
        if message.role == "tool":
            text = pilot.ingest(
                message.name or "tool", {}, message.text, message.tool_call_id or "", "t1"
            )
            message = type(message)(
                "tool", text, tool_call_id=message.tool_call_id, name=message.name
            )
        if message.role == "assistant":
            pilot.prepare(system, transcript, DEMO_TOOL_SCHEMAS, thread="t1")
        transcript.append(message)
    return pilot, archive


def test_json_state_file(
    pilot_run: tuple[CachePilot, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pilot, archive = pilot_run
    state = pilot.export_state("t1")
    assert state["plan"]["epochs"], "the eager config must have appended epochs"
    path = tmp_path / "t1.json"
    path.write_text(json.dumps(state))
    [item] = load_threads(path)
    doc = inspect_report(item, store=pilot.store)
    assert doc["calls"] == len(SESSION.assistant_indices)
    assert doc["epochs"][0]["reason"] and sum(doc["edits"].values()) > 0
    assert doc["artifacts"]["count"] > 0
    sizes = [a["size"] for a in doc["artifacts"]["biggest"]]
    assert sizes == sorted(sizes, reverse=True)
    assert main(["inspect", str(path), "--store", str(archive), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "thread t1" in text and "epoch 0 (" in text and "archive:" in text
    assert "frozen volatile values" in text
    assert main(["inspect", str(path), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["thread"] == "t1"


def test_agents_state_database(pilot_run: tuple[CachePilot, Path], tmp_path: Path) -> None:
    from cachepilot_agents.state import SQLiteStateStore

    pilot, _ = pilot_run
    db = tmp_path / "session.sqlite"
    store = SQLiteStateStore(db)
    asyncio.run(store.save("conv-1", json.dumps(pilot.export_state("t1"))))
    asyncio.run(store.save("conv-2", json.dumps(CachePilot().export_state("x"))))
    threads = load_threads(db)
    assert sorted(t.thread for t in threads) == ["conv-1", "conv-2"]
    [one] = load_threads(db, "conv-1")
    assert one.state.calls == len(SESSION.assistant_indices) and one.updated_at is not None


class GraphState(TypedDict):
    messages: Annotated[list[Any], add_messages]
    cachepilot: dict[str, Any] | None


def test_langgraph_sqlite_checkpoint(
    pilot_run: tuple[CachePilot, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pilot, _ = pilot_run
    exported = pilot.export_state("t1")

    def model(state: GraphState) -> dict[str, Any]:
        return {"messages": [("ai", "done")], "cachepilot": exported}

    graph = StateGraph(GraphState)
    graph.add_node("model", model)
    graph.add_edge(START, "model")
    graph.add_edge("model", END)
    db = tmp_path / "checkpoints.sqlite"
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    app = graph.compile(checkpointer=saver)
    app.invoke({"messages": [("human", "fix the bug")]}, {"configurable": {"thread_id": "lg-1"}})
    item = from_checkpointer(saver, "lg-1")
    assert item.state.calls == exported["calls"]
    assert item.messages is not None and [m.role for m in item.messages] == ["user", "assistant"]
    conn.close()
    [loaded] = load_threads(db)
    assert loaded.thread == "lg-1"
    assert main(["inspect", str(db)]) == 0
    out = capsys.readouterr().out
    assert "thread lg-1" in out and "tokens in view:" in out


def test_bad_sources(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        load_threads(tmp_path / "missing.json")
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="no pilot state"):
        load_threads(junk)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(ValueError, match="neither"):
        load_threads(other)
    assert main(["inspect", str(junk)]) == 2

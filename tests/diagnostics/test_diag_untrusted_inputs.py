"""Files handed to the CLI are untrusted: read-only commands leave them byte-identical, run
nothing from them and stay within bounded memory.

`cachepilot inspect` on a crafted LangGraph checkpoint (a value that names `os.mkdir`), on an
archive holding month-old artifacts (`--store`), and on an Agents SDK state database: the
files and their folders are unchanged afterwards, the crafted callable never ran, and the
report names what it could not decode. `cachepilot audit` on a cassette whose gzip body
expands to 256 MiB: the body is skipped by name, within a bounded memory peak.
"""

from __future__ import annotations

import asyncio
import enum
import gzip
import hashlib
import json
import logging
import sqlite3
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import yaml
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from cachepilot import CachePilot
from cachepilot.artifacts import SQLiteArtifactStore
from cachepilot.artifacts.sqlite_readonly import ReadOnlySQLiteArtifactStore, connect_read_only
from cachepilot.audit import audit_file, load_calls
from cachepilot.audit.inflate import BodyTooLargeError, body_limit, inflate
from cachepilot.cli import main
from cachepilot.diagnose.inspect import load_threads
from cachepilot_langgraph.checkpoint_reader import decode_typed

MONTH = 31 * 24 * 3600


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file of a folder with its sha256: a change to any byte or any new file shows."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


class GraphState(TypedDict):
    messages: Annotated[list[Any], add_messages]
    cachepilot: dict[str, Any] | None
    extra: Any


def _checkpoint_db(folder: Path, extra: Any = None) -> Path:
    """A real LangGraph SQLite checkpoint of one thread with a pilot state."""
    state = CachePilot().export_state("lg-1")

    def model(_: GraphState) -> dict[str, Any]:
        return {"messages": [("ai", "done")], "cachepilot": state}

    graph = StateGraph(GraphState)
    graph.add_node("model", model)
    graph.add_edge(START, "model")
    graph.add_edge("model", END)
    db = folder / "checkpoints.sqlite"
    conn = sqlite3.connect(db, check_same_thread=False)
    app = graph.compile(checkpointer=SqliteSaver(conn))
    app.invoke({"messages": [("human", "fix the bug")]}, {"configurable": {"thread_id": "lg-1"}})
    if extra is not None:
        # Put a crafted value into the latest checkpoint, the way an attacker writing the
        # file would: LangGraph's own serializer encodes it as "call <module>.<name>(arg)".
        serde = JsonPlusSerializer()
        row = conn.execute(
            "SELECT checkpoint_id, type, checkpoint FROM checkpoints "
            "ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
        checkpoint = serde.loads_typed((row[1], row[2]))
        checkpoint["channel_values"]["extra"] = extra
        kind, blob = serde.dumps_typed(checkpoint)
        conn.execute(
            "UPDATE checkpoints SET type = ?, checkpoint = ? WHERE checkpoint_id = ?",
            (kind, blob, row[0]),
        )
        conn.commit()
    conn.close()
    return db


def _payload(target: Path) -> enum.Enum:
    """An enum member LangGraph serializes as `os.mkdir(<target>)` (its module and name)."""

    class Payload(enum.Enum):
        VALUE = str(target)

    Payload.__module__ = "os"
    Payload.__name__ = "mkdir"
    return Payload.VALUE


def test_inspect_runs_nothing_from_a_crafted_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "created-by-the-checkpoint"
    folder = tmp_path / "db"
    folder.mkdir()
    db = _checkpoint_db(folder, extra=_payload(target))
    # the crafted checkpoint really does call os.mkdir under LangGraph's default serializer
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT type, checkpoint FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
    JsonPlusSerializer().loads_typed((row[0], row[1]))
    assert target.is_dir()
    target.rmdir()
    before = _snapshot(folder)

    assert main(["inspect", str(db)]) == 0
    captured = capsys.readouterr()
    assert not target.exists()
    assert "thread lg-1" in captured.out
    assert "not decoded (left out, nothing run): os.mkdir" in captured.out
    assert _snapshot(folder) == before
    [item] = load_threads(db)
    assert item.messages is not None and [m.role for m in item.messages] == ["user", "assistant"]
    assert not target.exists()


def test_inspect_store_deletes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "archive"
    folder.mkdir()
    archive = folder / "artifacts.sqlite"
    old = time.time() - MONTH
    store = SQLiteArtifactStore(archive, clock=lambda: old)
    ref = store.put("t1", "a month-old tool output\n" * 50, meta={"tool": "bash"})
    store.close()
    state = tmp_path / "t1.json"
    state.write_text(json.dumps(CachePilot().export_state("t1")))
    before = _snapshot(folder)

    assert main(["inspect", str(state), "--store", str(archive), "--json", "-"]) == 0
    [doc] = json.loads(capsys.readouterr().out)
    assert doc["artifacts"]["count"] == 1 and doc["artifacts"]["biggest"][0]["ref"] == ref
    assert _snapshot(folder) == before  # nothing pruned, no -wal/-shm left behind
    # the writable store would have pruned it: the archive really holds an expired artifact
    assert SQLiteArtifactStore(archive).list("t1") == []


def test_inspect_leaves_an_agents_state_database_alone(tmp_path: Path) -> None:
    from cachepilot_agents.state import SQLiteStateStore

    folder = tmp_path / "db"
    folder.mkdir()
    db = folder / "session.sqlite"
    store = SQLiteStateStore(db)
    asyncio.run(store.save("conv-1", json.dumps(CachePilot().export_state("x"))))
    before = _snapshot(folder)
    assert main(["inspect", str(db)]) == 0
    assert _snapshot(folder) == before


def test_the_read_only_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    archive = tmp_path / "artifacts.sqlite"
    with SQLiteArtifactStore(archive) as store:
        ref = store.put("t1", "payload")
    before = _snapshot(tmp_path)
    with ReadOnlySQLiteArtifactStore(archive) as ro:
        artifact = ro.get("t1", ref)
        assert artifact is not None and artifact.text == "payload"
        assert [a.ref for a in ro.list("t1")] == [ref] and ro.get("t2", ref) is None
        for write in (
            lambda: ro.put("t1", "x"),
            lambda: ro.record_access("t1", ref),
            lambda: ro.delete("t1", ref),
            lambda: ro.delete_thread("t1"),
            ro.prune,
        ):
            with pytest.raises(PermissionError):
                write()
    assert _snapshot(tmp_path) == before
    with pytest.raises(ValueError, match="no such file"):
        ReadOnlySQLiteArtifactStore(tmp_path / "missing.sqlite")
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(ValueError, match="not a cachepilot artifact archive"):
        ReadOnlySQLiteArtifactStore(other)
    with pytest.raises(sqlite3.OperationalError):
        connect_read_only(other).execute("INSERT INTO x VALUES (1)")


def test_checkpoint_payloads_that_are_never_decoded() -> None:
    pickled = decode_typed("pickle", b"cos\nsystem\n(S'true'\ntR.")
    assert pickled.value is None and pickled.describe_skipped() == "pickle payload"
    legacy = json.dumps(
        {
            "a": {"lc": 1, "type": "constructor", "id": ["os", "system"], "kwargs": {}},
            "m": {
                "lc": 1,
                "type": "constructor",
                "id": ["langchain", "schema", "messages", "HumanMessage"],
                "kwargs": {"content": "hi", "type": "human"},
            },
        }
    ).encode()
    decoded = decode_typed("json", legacy)
    assert decoded.value == {"a": None, "m": {"content": "hi", "type": "human"}}
    assert decoded.describe_skipped() == "os.system"
    with pytest.raises(ValueError, match="malformed"):
        decode_typed("msgpack", b"\x91" * 100_000)


# --- audit: bounded decompression ---------------------------------------------------------------

BOMB_BYTES = 256 * 1024 * 1024


def _gzip_bomb(size: int = BOMB_BYTES) -> bytes:
    """`size` zero bytes, gzip-compressed a MiB at a time (about a thousandfold smaller)."""
    engine = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    parts = [engine.compress(block) for _ in range(size // len(block))]
    parts.append(engine.flush())
    return b"".join(parts)


def _chat_interaction(n: int, body: bytes | str, gz: bool) -> dict[str, Any]:
    request = {
        "model": "gpt-5.4-mini",
        "messages": [
            {"role": "system", "content": "You are a coder. " * 200},
            {"role": "user", "content": f"step {n}"},
        ],
    }
    headers = {"Content-Type": ["application/json"]}
    if gz:
        headers["Content-Encoding"] = ["gzip"]
    return {
        "request": {
            "body": json.dumps(request),
            "headers": {"Content-Type": ["application/json"]},
            "method": "POST",
            "uri": "https://api.openai.com/v1/chat/completions",
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": headers,
            "body": {"string": body},
        },
    }


def test_audit_skips_a_gzip_bomb_by_name_within_bounded_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bomb = _gzip_bomb()
    assert len(bomb) < 1024 * 1024  # a small file...
    answer = json.dumps({"id": "chatcmpl-0", "choices": [], "usage": {"prompt_tokens": 9}})
    cassette = {
        "interactions": [
            _chat_interaction(0, gzip.compress(answer.encode(), mtime=0), gz=True),
            _chat_interaction(1, bomb, gz=True),  # ...that would inflate to 256 MiB
        ],
        "version": 1,
    }
    path = tmp_path / "bomb.yaml"
    path.write_text(yaml.dump(cassette, Dumper=yaml.SafeDumper), encoding="utf-8")
    before = _snapshot(tmp_path)
    caplog.set_level(logging.WARNING, logger="cachepilot")
    tracemalloc.start()
    try:
        calls = load_calls(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 96 * 1024 * 1024, f"peak {peak:,} bytes"
    assert [c.response_id for c in calls] == ["chatcmpl-0", None]  # the call is still audited
    skipped = [r.getMessage() for r in caplog.records if "body skipped" in r.getMessage()]
    assert len(skipped) == 1 and skipped[0].startswith("interaction 1: response body skipped")
    assert "expands past" in skipped[0]
    report = audit_file(path)
    assert len(report.calls) == 2
    assert _snapshot(tmp_path) == before


def test_inflate_limits_and_formats() -> None:
    text = b"0123456789" * 1000
    packed = gzip.compress(text, mtime=0)
    assert inflate(packed, "gzip", limit=len(text)) == text  # exactly at the limit
    with pytest.raises(BodyTooLargeError):
        inflate(packed, "gzip", limit=len(text) - 1)
    assert inflate(packed + gzip.compress(b"!", mtime=0), "gzip") == text + b"!"  # two members
    assert inflate(zlib.compress(text), "deflate") == text
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert inflate(raw.compress(text) + raw.flush(), "deflate") == text
    with pytest.raises(zlib.error):
        inflate(packed[: len(packed) // 2], "gzip")  # truncated
    with pytest.raises(zlib.error):
        inflate(b"not compressed", "deflate")
    assert body_limit(10) == 1024 * 1024 and body_limit(10**9) == 32 * 1024 * 1024
    assert body_limit(100_000) == 10_000_000

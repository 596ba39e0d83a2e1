"""Without a recall tool, nothing the model reads names `recall(...)`.

Stubs, argument previews, fold summaries and ingestion stubs say what was elided instead
(sizes, call ids and previews stay); the originals are archived all the same.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.fold import FOLD_HEADER_PREFIX
from cachepilot.maintenance.policy import MaintenanceConfig, is_stub, stub_text
from cachepilot.messages import Message, ToolCall, pairing_issues

CALL = "recall("


def _session(task: str = "run the tests") -> list[Message]:
    """Large writes (arguments to reduce), large logs (results to stub), then more work."""
    transcript: list[Message] = [Message("user", f"write the modules and {task}")]
    for k in range(4):
        content = "".join(f"def f{k}_{j}(x):\n    return x + {j}\n" for j in range(600))
        content += f"# {task}\n"
        write = ToolCall(
            f"w{k}", "write", json.dumps({"file_path": f"m{k}.py", "content": content})
        )
        log = "\n".join(f"test_{k}_{j} PASSED in {j} ms" for j in range(800))
        run = ToolCall(f"b{k}", "bash", json.dumps({"command": f"pytest m{k}.py"}))
        transcript += [
            Message("assistant", f"writing m{k}", tool_calls=(write,)),
            Message("tool", "ok", tool_call_id=write.id, name="write"),
            Message("assistant", "testing", tool_calls=(run,)),
            Message("tool", log, tool_call_id=run.id, name="bash"),
        ]
    for k in range(3):
        call = ToolCall(f"s{k}", "bash", json.dumps({"command": f"git status {k}"}))
        transcript += [
            Message("assistant", "checking", tool_calls=(call,)),
            Message("tool", f"clean {k}", tool_call_id=call.id, name="bash"),
        ]
    return transcript


def _model_text(view: list[Message]) -> str:
    return "\n".join([m.text for m in view] + [c.arguments for m in view for c in m.tool_calls])


def _config(**maintenance: Any) -> Config:
    return Config(
        maintenance=MaintenanceConfig(
            prune=True,
            schedule="fixed",
            every=1,
            protect_results=2,
            protect_tool_tokens=0,
            min_prune_tokens=0,
            **maintenance,
        )
    )


@pytest.mark.parametrize("recall", [True, False])
def test_stubs_and_argument_previews_follow_the_recall_offer(recall: bool) -> None:
    store = InMemoryArtifactStore()
    pilot = CachePilot(_config(fold=False), store=store)
    transcript = _session()
    _, view, tools = pilot.prepare("sys", transcript, (), "t", recall=recall)
    edits = [e for ep in pilot.state("t").plan.epochs for e in ep.edits]
    kinds = {e.kind for e in edits}
    assert {"stub", "args"} <= kinds, kinds  # both producers fired
    assert pairing_issues(view) == []
    text = _model_text(view)
    assert (CALL in text) is recall
    assert any(t.get("function", t).get("name") == "recall" for t in tools) is recall
    if not recall:
        assert "tokens; full text elided]" in text  # a pruned log: its size, and that it went
        assert "full value elided]" in text  # an argument preview: its head stays
        assert "def f0_0(x):" in text
    for edit in edits:  # nothing is lost either way
        assert edit.ref is not None and store.get("t", edit.ref) is not None
    stubs = [m.text for m in view if m.role == "tool" and "pruned" in m.text]
    assert stubs and all(is_stub(s) for s in stubs)  # recognised as stubs in both wordings


@pytest.mark.parametrize("recall", [True, False])
def test_fold_summaries_follow_the_recall_offer(recall: bool) -> None:
    pilot = CachePilot(
        _config(context_window=1_000, fold_protect_tokens=50), store=InMemoryArtifactStore()
    )
    _, view, _ = pilot.prepare("sys", _session(), (), "t", recall=recall)
    summaries = [m.text for m in view if m.text.startswith(FOLD_HEADER_PREFIX)]
    assert summaries, "the fold trigger must have folded"
    assert (CALL in _model_text(view)) is recall
    if not recall:
        assert summaries[0].splitlines()[0].endswith("tokens; full text elided]")


@pytest.mark.parametrize("recall", [True, False])
def test_emergency_fold_follows_the_recall_offer(recall: bool) -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    # Content of its own: the shared token counter memoises counts by message key.
    transcript = _session(f"fold with recall={recall}")
    assert pilot.emergency_fold("sys", transcript, "t", recall=recall)
    _, view, _ = pilot.prepare("sys", transcript, (), "t", maintain=False, recall=recall)
    assert any(m.text.startswith(FOLD_HEADER_PREFIX) for m in view)
    assert (CALL in _model_text(view)) is recall


def test_config_without_recall_ingests_without_naming_it() -> None:
    store = InMemoryArtifactStore()
    pilot = CachePilot(Config(recall_tool=False), store=store)
    big = "\n".join(f"line {i}: building target {i % 7}" for i in range(5_000))
    outputs = {
        "gate": pilot.ingest_report("bash", {"command": "make"}, big, "c1", "t"),
        "duplicate": pilot.ingest_report("bash", {"command": "make again"}, big, "c2", "t"),
        "binary": pilot.ingest_report("cat", {"path": "a.bin"}, b"\x00\x01\xff" * 4_000, "c3", "t"),
        "blank": pilot.ingest_report("bash", {"command": "true"}, "   \n\t  ", "c4", "t"),
        "utf8": pilot.ingest_report("cat", {"path": "b.txt"}, b"caf\xe9 ok", "c5", "t"),
    }
    for name, report in outputs.items():
        assert CALL not in report.text, name
        assert "elided" in report.text, (name, report.text[-200:])
        assert report.ref is not None and store.get("t", report.ref) is not None, name
    assert "5,000" in outputs["gate"].text or "lines" in outputs["gate"].text  # sizes stay
    assert "same output as call c1" in outputs["duplicate"].text
    with_recall = CachePilot(Config(), store=InMemoryArtifactStore())
    assert CALL in with_recall.ingest("bash", {"command": "make"}, big, "c1", "t")


def test_stub_wording_without_recall_is_still_a_stub() -> None:
    message = Message("tool", "x" * 10, tool_call_id="c", name="bash")
    text = stub_text("evict", message, 1_234, "0123456789ab", "superseded", recall=False)
    assert text == "[bash output evicted (superseded): 1,234 tokens; full text elided]"
    assert is_stub(text)

"""Stubs keep the output's most telling exact values in view, and stay recognisable stubs."""

from __future__ import annotations

import json

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig, is_stub, stub_text
from cachepilot.memory.values import output_values
from cachepilot.messages import Message, ToolCall

SECRET = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0" * 3


def _source(n: int) -> str:
    lines = [f"class SessionRegistryService{n}:"]
    for name in ("lookup", "store", "evict"):
        lines.append(f"    def {name}(self, session_id):")
        lines += [f"        # step {i}: keep the session in the table" for i in range(60)]
        lines.append("        return self.table.get(session_id)")
    return "\n".join(lines)


def test_a_stub_with_values_is_still_a_stub_and_names_them() -> None:
    message = Message(role="tool", content=_source(1), tool_call_id="c1", name="read_file")
    keeps = output_values(message.text, 240)
    assert keeps and "SessionRegistryService1" in keeps  # the name the output defines comes first
    assert len(", ".join(keeps)) <= 240
    text = stub_text("stub", message, 1_234, "0123456789ab", "old tool output", keeps=keeps)
    assert is_stub(text)
    assert text.endswith("; keeps: " + ", ".join(keeps) + "]")
    assert is_stub(stub_text("evict", message, 10, "0123456789ab", "superseded"))
    assert not is_stub(text + " trailing")


def test_credentials_never_become_kept_values() -> None:
    text = f"export OPENAI_API_KEY={SECRET}\nexport REGION_NAME=eu-west-3\n" * 5
    keeps = output_values(text, 400)
    assert all("sk-proj" not in v and SECRET not in v for v in keeps)
    assert output_values(text, 0) == [] and output_values("", 100) == []


def test_pruned_outputs_reach_the_model_as_stubs_with_their_values() -> None:
    maintenance = MaintenanceConfig(
        prune=True,
        schedule="fixed",
        every=1,
        protect_tool_tokens=0,
        protect_results=1,
        min_prune_tokens=1,
        fold=False,
    )
    pilot = CachePilot(Config(maintenance=maintenance), store=InMemoryArtifactStore())
    transcript = [Message(role="user", content="Find the registry bug.")]
    for n in range(4):
        call = ToolCall(f"c{n}", "read_file", json.dumps({"path": f"src/reg{n}.py"}))
        transcript.append(Message(role="assistant", content="", tool_calls=(call,)))
        text = pilot.ingest("read_file", {"path": f"src/reg{n}.py"}, _source(n), call.id)
        transcript.append(Message(role="tool", content=text, tool_call_id=call.id, name="x"))
        pilot.prepare("You are a coder.", transcript, [], now=float(n))
    _, view, _ = pilot.prepare("You are a coder.", transcript, [], now=10.0)
    stubs = [m.text for m in view if m.role == "tool" and is_stub(m.text)]
    assert stubs
    assert all("; keeps: " in s for s in stubs)
    assert any("SessionRegistryService0" in s for s in stubs)
    off = MaintenanceConfig(**{**maintenance.model_dump(), "stub_keeps_chars": 0})
    plain = CachePilot(Config(maintenance=off), store=InMemoryArtifactStore())
    for n in range(1, len(transcript) + 1):
        plain.prepare("You are a coder.", transcript[:n], [], now=float(n))
    _, view, _ = plain.prepare("You are a coder.", transcript, [], now=20.0)
    assert all("keeps:" not in m.text for m in view)

"""Maintenance keeps the host's own handles in view (DESIGN §2.7).

When a prune or eviction stub, or a fold, replaces an old tool result whose text holds the
host's pointer to the full output (deepagents' `/large_tool_results/<id>` line, Claude Code's
saved-output path), the stub or the fold header carries that line next to cachepilot's ref.
"""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold import plan_fold
from cachepilot.fold.request import (
    FOLD_HANDLES_INTRO,
    MAX_FOLD_HANDLES,
    FoldRequest,
    fold_handles_block,
    summary_body,
)
from cachepilot.maintenance.policy import MaintenanceConfig, is_stub, stub_text
from cachepilot.messages import Message, ToolCall, message_keys
from cachepilot.plan.epochs import Epoch, Plan
from cachepilot.reduce.handles import HANDLE_LINE_CHARS, MAX_HANDLES, host_handles
from cachepilot.tokens import get_counter

CLAUDE_CODE = (
    "Output too large (212.4KB). Full output saved to: "
    "/home/dev/.claude/projects/app/tool-results/toolu_01AbC.txt"
)
REF = re.compile(r'recall\(ref="([0-9a-f]{12})"\)')


def _deepagents(call_id: str) -> str:
    return (
        f"Tool result too large, the result of this tool call {call_id} was saved in the "
        f"filesystem at this path: /large_tool_results/{call_id}"
    )


def _preview(call_id: str, lines: int = 120) -> str:
    """A host's own capped preview: its pointer line, then the head of the output."""
    body = "\n".join(f"{call_id} line {i:04d}: compiling module_{i} ok" for i in range(lines))
    return f"{_deepagents(call_id)}\n\nHere are the first lines:\n{body}"


def test_a_stub_carries_the_hosts_pointer_lines_and_stays_a_stub() -> None:
    message = Message(role="tool", content=_preview("c1"), tool_call_id="c1", name="build")
    handles = host_handles(message.text)
    assert handles == [_deepagents("c1")]
    for kind in ("stub", "evict"):
        text = stub_text(kind, message, 1_234, "0123456789ab", "superseded", handles=handles)
        first, *rest = text.split("\n")
        assert REF.search(first) and rest == handles
        assert is_stub(text)
        # Without recall the pointer is the only way back: it stays all the same.
        bare = stub_text(kind, message, 1_234, "0123456789ab", "x", recall=False, handles=handles)
        assert "recall(" not in bare and _deepagents("c1") in bare and is_stub(bare)
    # A stub followed by a line that is no host pointer is no stub (a tool's own output).
    plain = stub_text("stub", message, 1_234, "0123456789ab", "old tool output")
    assert is_stub(plain)
    assert not is_stub(plain + "\nrm -rf /tmp/x")
    assert not is_stub(plain + "\n" + "\n".join([_deepagents("c1")] * (MAX_HANDLES + 1)))


def _pilot(**maintenance: object) -> CachePilot:
    config = MaintenanceConfig(
        schedule="fixed",
        every=1,
        protect_tool_tokens=0,
        protect_results=1,
        min_prune_tokens=1,
        **maintenance,  # type: ignore[arg-type]
    )
    return CachePilot(Config(maintenance=config), store=InMemoryArtifactStore())


def test_a_pruned_result_keeps_the_hosts_pointer_next_to_its_ref() -> None:
    pilot = _pilot(prune=True, fold=False)
    transcript = [Message(role="user", content="Fix the build.")]
    for n in range(4):
        call = ToolCall(f"c{n}", "build", json.dumps({"target": f"t{n}"}))
        transcript.append(Message(role="assistant", content="", tool_calls=(call,)))
        text = pilot.ingest("build", {"target": f"t{n}"}, _preview(call.id), call.id, "t")
        assert _deepagents(call.id) in text  # the host's short preview passes as it is
        transcript.append(Message(role="tool", content=text, tool_call_id=call.id, name="build"))
        pilot.prepare("You build.", transcript, [], thread="t", now=float(n))
    _, view, _ = pilot.prepare("You build.", transcript, [], thread="t", now=10.0)
    stubs = [m for m in view if m.role == "tool" and is_stub(m.text)]
    assert stubs, "pruning acted"
    for stub in stubs:
        call_id = stub.tool_call_id or ""
        assert stub.text.split("\n")[1:] == [_deepagents(call_id)]
        ref = REF.search(stub.text)
        assert ref is not None
        recalled = pilot.recall(ref.group(1), thread="t")
        assert recalled.split("\n", 1)[1] == _preview(call_id)  # after recall's own header


def _transcript(count: int) -> list[Message]:
    out = [Message(role="user", content="Fix the build.", id="m0")]
    for n in range(count):
        call_id = f"c{n}"
        call = ToolCall(call_id, "build", json.dumps({"target": f"t{n}"}))
        out.append(Message(role="assistant", content="", tool_calls=(call,), id=f"a{n}"))
        out.append(
            Message(
                role="tool",
                content=_preview(call_id),
                tool_call_id=call_id,
                name="build",
                id=f"r{n}",
            )
        )
    return out


def test_a_fold_keeps_the_latest_host_pointers_and_a_later_fold_carries_them() -> None:
    store = InMemoryArtifactStore()
    kw: dict[str, object] = {
        "store": store,
        "thread": "t",
        "protect_tail_tokens": 3_000,
        "min_tokens": 0,
    }
    early = _transcript(4)
    one = plan_fold(early, message_keys(early), **kw)  # type: ignore[arg-type]
    assert one is not None
    header, intro, *_ = one.text.split("\n")
    assert header.startswith("[earlier conversation folded:") and REF.search(header)
    assert intro == FOLD_HANDLES_INTRO
    assert _deepagents("c0") in one.text
    assert not summary_body(one.text).startswith(FOLD_HANDLES_INTRO)
    late = _transcript(14)
    plan = Plan(epochs=[Epoch(index=0, reason="fold", edits=[one])])
    two = plan_fold(late, message_keys(late), plan=plan, epoch_index=1, **kw)  # type: ignore[arg-type]
    assert two is not None and two.key == one.key
    carried = two.text.split("\n\n")[0].split("\n")[2:]
    assert len(carried) == MAX_FOLD_HANDLES  # the latest ones, in order
    numbers = [int(re.sub(r".*/c", "", line)) for line in carried]
    assert numbers == sorted(numbers) and numbers[-1] >= 9


def test_a_persisted_summary_passes_its_pointers_on() -> None:
    lines = [_deepagents("old1"), CLAUDE_CODE]
    previous = "[earlier conversation folded: 4 messages, 900 tokens; full text elided]\n"
    previous += "\n".join([FOLD_HANDLES_INTRO, *lines]) + "\n\n## Goal\nfix it"
    assert summary_body(previous) == "## Goal\nfix it"
    block = fold_handles_block(_transcript(1)[1:], previous)
    assert block.split("\n") == [FOLD_HANDLES_INTRO, *lines, _deepagents("c0")]
    assert fold_handles_block([Message(role="tool", content="ok", tool_call_id="x")]) == ""


_LINE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
    max_size=120,
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(_LINE, st.builds(_deepagents, st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True))),
        max_size=30,
    ),
    st.booleans(),
    st.sampled_from(["stub", "evict"]),
)
def test_stubs_and_folds_keep_only_real_pointer_lines_bounded(
    lines: list[str], recall: bool, kind: str
) -> None:
    text = "\n".join(lines)
    message = Message(role="tool", content=text, tool_call_id="c1", name="tool")
    handles = host_handles(text)
    stub = stub_text(kind, message, 10, "0123456789ab", "r", recall=recall, handles=handles)  # type: ignore[arg-type]
    assert is_stub(stub)
    assert stub.split("\n")[1:] == handles  # every pointer the output held, nothing else
    assert all(line in text and len(line) <= HANDLE_LINE_CHARS for line in handles)
    block = fold_handles_block([message] * 5)
    kept = block.split("\n")[1:] if block else []
    assert kept == handles  # each line once, in order
    assert len(kept) <= MAX_FOLD_HANDLES


class _Recording:
    """A summarizer that records its requests and fills its budget with one repeated word."""

    def __init__(self) -> None:
        self.requests: list[FoldRequest] = []

    def summarize(self, request: FoldRequest) -> str:
        self.requests.append(request)
        return " ".join(["fact"] * request.budget_tokens)


def test_a_summary_does_not_grow_by_its_header_and_pointer_lines_at_every_fold() -> None:
    # The floor "never smaller than the summary it replaces" counts that summary's body: the
    # header and the host's pointer lines are written anew around the new body, so counting
    # them would grow every later summary by their size, fold after fold.
    counter = get_counter()
    summarizer = _Recording()
    kw: dict[str, object] = {
        "store": InMemoryArtifactStore(),
        "thread": "t",
        "protect_tail_tokens": 3_000,
        "min_tokens": 0,
        "summary_tokens": 200,
        "summary_share": 0.01,
        "summary_max_tokens": 2_000,
        "summarizer": summarizer,
        "counter": counter,
    }
    plan = Plan(epochs=[])
    for size in (4, 8, 12, 16):
        transcript = _transcript(size)
        edit = plan_fold(
            transcript, message_keys(transcript), plan=plan, epoch_index=len(plan.epochs), **kw
        )  # type: ignore[arg-type]
        assert edit is not None and FOLD_HANDLES_INTRO in edit.text
        plan = Plan(
            epochs=[*plan.epochs, Epoch(index=len(plan.epochs), reason="fold", edits=[edit])]
        )
    budgets = [r.budget_tokens for r in summarizer.requests]
    bodies = [
        counter.count(r.previous_summary) for r in summarizer.requests[1:] if r.previous_summary
    ]
    assert len(bodies) == 3
    for budget, body in zip(budgets[1:], bodies, strict=True):
        assert budget <= max(body, 200) + 50  # the body's floor, not body + header + pointers

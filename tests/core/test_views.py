"""`CachePilot.reduce_results`: the model reads reduced tool results, the transcript stays plain."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import ImagePart, Message, TextPart, ToolCall
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.reduce.views import VIEW_KIND, view_key

REF = re.compile(r'recall\(ref="([0-9a-f]{12})"\)')
CONFIG = Config(maintenance=MaintenanceConfig(enabled=False))
BIG = "\n".join(f"line {i}: {'x' * 60}" for i in range(3_000))


def exchange(call_id: str, output: str, *, name: str = "bash", args: str = "{}") -> list[Message]:
    return [
        Message("assistant", "", tool_calls=(ToolCall(call_id, name, args),), id=f"a-{call_id}"),
        Message("tool", output, tool_call_id=call_id, name=name, id=f"t-{call_id}"),
    ]


def transcript(*outputs: str) -> list[Message]:
    messages = [Message("user", "go", id="u0")]
    for i, output in enumerate(outputs):
        messages += exchange(f"c{i}", output, args=json.dumps({"command": f"cmd {i}"}))
    return messages


def test_big_result_is_reduced_in_the_view_only() -> None:
    pilot = CachePilot(CONFIG, store=InMemoryArtifactStore())
    messages = transcript("small", BIG)
    frozen = list(messages)
    view = pilot.reduce_results(messages, "t")
    assert messages == frozen  # the input is not mutated
    assert view[2] is messages[2]  # unchanged results are the same objects
    assert len(view[4].content) < len(BIG) // 10
    ref = REF.search(str(view[4].content))
    assert ref is not None
    assert "line 2999:" in pilot.recall(ref.group(1), lines="2990-3000", thread="t")


def test_the_view_is_the_same_on_every_call_and_results_are_ingested_once() -> None:
    store = InMemoryArtifactStore()
    pilot = CachePilot(CONFIG, store=store)
    messages = transcript(BIG)
    first = pilot.reduce_results(messages, "t")
    stored = len(store.list("t"))
    longer = [*messages, Message("assistant", "done", id="a-end")]
    second = pilot.reduce_results(longer, "t")
    assert second[: len(first)] == first
    assert len(store.list("t")) == stored
    # A rebuilt transcript (new objects, same content) gets the same bytes.
    rebuilt = [replace(m) for m in longer]
    assert pilot.reduce_results(rebuilt, "t") == second


def test_a_new_process_shows_the_same_view_from_the_persisted_state() -> None:
    store = InMemoryArtifactStore()
    pilot = CachePilot(CONFIG, store=store)
    messages = transcript(BIG, BIG.replace("x", "y"))
    view = pilot.reduce_results(messages, "t")
    exported = pilot.export_state("t")
    assert len(exported["views"]) == 2
    kinds = [info.meta.get("kind") for info in store.list("t")]
    assert kinds.count(VIEW_KIND) == 2
    fresh = CachePilot(CONFIG, store=store)
    fresh.load_state("t", exported)
    assert fresh.reduce_results(messages, "t") == view
    assert fresh.export_state("t")["revision"] == exported["revision"]  # nothing re-ingested


def test_a_rewritten_result_is_ingested_as_new_and_the_old_text_never_archived() -> None:
    store = InMemoryArtifactStore()
    pilot = CachePilot(CONFIG, store=store)
    secret = "card 4111-1111-1111-1111\n"
    redacted = "card [REDACTED_CREDIT_CARD]\n"
    # The redaction ran before the model call: the pilot only ever sees the redacted text.
    view = pilot.reduce_results(transcript(redacted + BIG), "t")
    assert "[REDACTED_CREDIT_CARD]" in str(view[2].content)
    for info in store.list("t"):
        artifact = store.get("t", info.ref)
        assert artifact is not None
        assert "4111" not in artifact.text
    assert view_key(transcript(secret + BIG)[2]) != view_key(transcript(redacted + BIG)[2])


def test_without_recall_no_result_is_reduced_and_no_ref_is_shown() -> None:
    pilot = CachePilot(CONFIG, store=InMemoryArtifactStore())
    messages = transcript(BIG)
    assert pilot.reduce_results(messages, "t", recall=False) == messages
    assert CachePilot(Config(recall_tool=False)).reduce_results(messages, "t") == messages


def test_recall_answers_are_shown_as_they_are() -> None:
    pilot = CachePilot(CONFIG, store=InMemoryArtifactStore())
    messages = [
        Message("user", "go"),
        *exchange("r1", BIG, name=RECALL_TOOL_NAME, args='{"ref": "0123456789ab"}'),
    ]
    assert pilot.reduce_results(messages, "t")[2] is messages[2]


def test_images_stay_beside_the_reduced_text() -> None:
    pilot = CachePilot(CONFIG, store=InMemoryArtifactStore())
    image = ImagePart("data:image/png;base64,AAAA", media_type="image/png")
    messages = [
        Message("user", "go"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "shot"),)),
        Message("tool", (TextPart(BIG), image), tool_call_id="c1"),
    ]
    view = pilot.reduce_results(messages, "t")[2]
    assert isinstance(view.content, tuple)
    assert view.content[-1] == image
    assert len(view.content[0].text) < len(BIG) // 10  # type: ignore[union-attr]


def test_threads_never_share_views() -> None:
    store = InMemoryArtifactStore()
    pilot = CachePilot(CONFIG, store=store)
    view = pilot.reduce_results(transcript(BIG), "a")
    ref = REF.search(str(view[2].content))
    assert ref is not None
    assert "line 2999" not in pilot.recall(ref.group(1), thread="b")


def test_async_twin_gives_the_same_view() -> None:
    messages = transcript(BIG)
    sync = CachePilot(CONFIG, store=InMemoryArtifactStore()).reduce_results(messages, "t")
    pilot = CachePilot(CONFIG, store=InMemoryArtifactStore())
    assert asyncio.run(pilot.areduce_results(messages, "t")) == sync


@settings(max_examples=60, deadline=None)
@given(
    outputs=st.lists(
        st.one_of(st.text(max_size=200), st.just(BIG), st.binary(max_size=50).map(repr)),
        max_size=6,
    ),
    orphan=st.booleans(),
)
def test_views_are_deterministic_and_pairing_safe(outputs: list[str], orphan: bool) -> None:
    messages = transcript(*outputs)
    if orphan:
        messages.append(Message("tool", "lost", tool_call_id="nobody"))
    one = CachePilot(CONFIG, store=InMemoryArtifactStore()).reduce_results(messages, "t")
    two = CachePilot(CONFIG, store=InMemoryArtifactStore()).reduce_results(messages, "t")
    assert one == two
    assert [(m.role, m.id, m.tool_call_id) for m in one] == [
        (m.role, m.id, m.tool_call_id) for m in messages
    ]


def test_results_whose_calls_the_transcript_lacks_are_reduced_as_those_calls() -> None:
    """A server-held conversation sends results without their calls: `calls` names them, so
    a first file read keeps the file-read profile (whole) and the loop memory tells calls
    apart; a call in the transcript itself wins."""
    source = "\n".join(f"def f_{i}(): return {i}" for i in range(1_500))  # over the generic limit
    read = ToolCall("r1", "read_file", json.dumps({"path": "src/a.py"}))
    result = Message("tool", source, tool_call_id="r1")
    unnamed = CachePilot(CONFIG, store=InMemoryArtifactStore())
    assert unnamed.reduce_results([result], "t")[0].text != source  # generic profile: cut
    named = CachePilot(CONFIG, store=InMemoryArtifactStore())
    assert named.reduce_results([result], "t", calls={"r1": read})[0].text == source
    own = exchange("r1", source, name="bash", args=json.dumps({"command": "cat src/a.py"}))
    pilot = CachePilot(CONFIG, store=InMemoryArtifactStore())
    shown = pilot.reduce_results(own, "t", calls={"r1": read})
    assert shown[1].text != source  # reduced as the shell call it is, not as a file read

"""Input items <-> messages: identity of unchanged items, edits in place, reasoning adjacency."""

from __future__ import annotations

from typing import Any

from agents_helpers import dumps, pairing_problems, reasoning_followers
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.messages import message_keys, pairing_issues
from cachepilot.plan.epochs import Edit, Epoch, Plan, apply_plan
from cachepilot_agents.items import TranscriptBuilder, item_kind


def build_items(shape: list[tuple[str, int, bool]]) -> list[Any]:
    """Tasks of turns: (kind, n calls, with reasoning) with opaque hosted-tool items mixed in."""
    items: list[Any] = []
    for n, (kind, calls, with_reasoning) in enumerate(shape, 1):
        if kind == "user":
            items.append({"role": "user", "content": f"task {n}"})
        elif kind == "opaque":
            if with_reasoning:
                items.append({"type": "reasoning", "id": f"rs_ws{n}", "summary": []})
            items.append({"type": "web_search_call", "id": f"ws{n}", "status": "completed"})
        elif kind == "text":
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": f"msg{n}",
                    "content": [{"type": "output_text", "text": f"note {n}"}],
                }
            )
        else:
            ids = [f"c{n}_{i}" for i in range(max(1, calls))]
            for call_id in ids:
                if with_reasoning:
                    items.append({"type": "reasoning", "id": f"rs_{call_id}", "summary": []})
                items.append(
                    {"type": "function_call", "call_id": call_id, "name": "bash", "arguments": "{}"}
                )
            for call_id in ids:
                items.append(
                    {"type": "function_call_output", "call_id": call_id, "output": "x" * 50}
                )
    return items


SHAPES = st.lists(
    st.tuples(
        st.sampled_from(["user", "turn", "turn", "opaque", "text"]),
        st.integers(1, 3),
        st.booleans(),
    ),
    min_size=1,
    max_size=25,
).map(lambda s: [("user", 1, False), *s])


@settings(max_examples=150, deadline=None)
@given(SHAPES)
def test_unchanged_view_gives_back_the_very_same_items(shape: list[Any]) -> None:
    items = build_items(shape)
    transcript = TranscriptBuilder().build(items)
    out = transcript.render(transcript.messages, Plan())
    assert len(out) == len(items)
    assert all(a is b for a, b in zip(out, items, strict=True))
    assert pairing_issues(transcript.messages) == []


@settings(max_examples=150, deadline=None)
@given(SHAPES, st.data())
def test_stubs_replace_only_outputs_and_keep_reasoning_adjacent(
    shape: list[Any], data: Any
) -> None:
    items = build_items(shape)
    transcript = TranscriptBuilder().build(items)
    messages = transcript.messages
    keys = message_keys(messages)
    tools = [k for k, m in zip(keys, messages, strict=True) if m.role == "tool"]
    chosen = data.draw(st.lists(st.sampled_from(tools), unique=True)) if tools else []
    plan = Plan(
        epochs=[
            Epoch(
                index=0,
                reason="test",
                edits=[Edit(kind="stub", key=k, text=f"[stub {k}]") for k in chosen],
            )
        ]
    )
    out = transcript.render(apply_plan(messages, plan, keys), plan)
    assert len(out) == len(items)
    for before, after in zip(items, out, strict=True):
        if item_kind(before) == "output" and f"id:out:{before['call_id']}" in chosen:
            assert {k: v for k, v in after.items() if k != "output"} == {
                k: v for k, v in before.items() if k != "output"
            }
            assert after["output"].startswith("[stub")
            assert before["output"] == "x" * 50  # the input was not mutated
        else:
            assert after is before
    assert reasoning_followers(out) == reasoning_followers(items)
    assert pairing_problems(out) == []


@settings(max_examples=100, deadline=None)
@given(SHAPES)
def test_a_fold_keeps_pass_through_items_and_pairing(shape: list[Any]) -> None:
    items = build_items([*shape, ("user", 1, False)])
    transcript = TranscriptBuilder().build(items)
    messages = transcript.messages
    keys = message_keys(messages)
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    start, end = users[0], users[-1] - 1
    if end < start:
        return
    plan = Plan(
        epochs=[
            Epoch(
                index=0,
                reason="test",
                edits=[Edit(kind="fold", key=keys[start], end_key=keys[end], text="summary")],
            )
        ]
    )
    out = transcript.render(apply_plan(messages, plan, keys), plan)
    assert out[0] == {"role": "user", "content": "summary"}
    opaque_in = [dumps(i) for i in items if item_kind(i) in ("opaque",)]
    opaque_out = [dumps(i) for i in out if item_kind(i) in ("opaque",)]
    assert opaque_out == opaque_in  # never dropped, order kept
    assert pairing_problems(out) == []
    assert out[-1] is items[-1]
    for rs_id, follower in reasoning_followers(out).items():
        assert follower == reasoning_followers(items)[rs_id]


def test_canonicalized_user_content_keeps_its_parts() -> None:
    from cachepilot import CachePilot
    from cachepilot.artifacts import InMemoryArtifactStore

    image = {"type": "input_image", "image_url": "https://x/y.png"}
    items: list[Any] = [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "deploy it please"}, image],
        }
    ]
    transcript = TranscriptBuilder().build(items)
    from cachepilot import Config
    from cachepilot.canonical import CanonicalConfig

    first_call = Config(canonical=CanonicalConfig(move_when_changed=False))  # block at once
    pilot = CachePilot(first_call, store=InMemoryArtifactStore())
    system, view, _ = pilot.prepare("Today is 2025-03-04.", transcript.messages, [], thread="t")
    out = transcript.render(view, pilot.state("t").plan)
    assert system == "Today is {{date_1}}."
    content = out[0]["content"]
    assert len(content) == 3
    assert content[0]["type"] == "input_text" and "2025-03-04" in content[0]["text"]
    assert content[1] is items[0]["content"][0] and content[2] is image  # parts kept as they were
    assert len(items[0]["content"]) == 2  # the input was not mutated

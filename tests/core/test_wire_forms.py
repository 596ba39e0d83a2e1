"""A rewritten message is written back in the client's own form (string or parts, one part or
several), whatever marks the client put on it: property tests of `write_view`."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.canonical.freeze import _prepend_block
from cachepilot.wire import read_view, write_view
from cachepilot.wire._common import Api

BLOCK = "<context>\ndate: 2026-11-28\n</context>"
MARK = {"type": "ephemeral"}

line = st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), min_size=1, max_size=30)
texts = st.lists(line, min_size=1, max_size=3).map("\n".join)
PART_TYPE: dict[Api, str] = {"chat": "text", "responses": "input_text", "anthropic": "text"}


def user_entry(api: Api, content: Any) -> dict[str, Any]:
    entry = {"role": "user", "content": content}
    return {"type": "message", **entry} if api == "responses" else entry


def body_of(api: Api, content: Any) -> dict[str, Any]:
    key = "input" if api == "responses" else "messages"
    return {"model": "m", key: [user_entry(api, content)], "max_tokens": 10}


def written_content(api: Api, body: dict[str, Any]) -> Any:
    view = read_view(body, api)
    message = view.messages[0]
    rewritten = _prepend_block(message, BLOCK)
    out = write_view(view, view.system, [rewritten], None)
    return out["input" if api == "responses" else "messages"][0]["content"]


def unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


@settings(max_examples=60, deadline=None)
@given(
    api=st.sampled_from(["chat", "responses", "anthropic"]),
    pieces=st.lists(texts, min_size=1, max_size=3),
    form=st.sampled_from(["string", "parts"]),
    marked=st.booleans(),
)
def test_a_rewritten_message_keeps_the_clients_form(
    api: Api, pieces: list[str], form: str, marked: bool
) -> None:
    kind = PART_TYPE[api]
    if form == "string":
        content: Any = "\n".join(pieces)
    else:
        content = [{"type": kind, "text": p, "extra": k} for k, p in enumerate(pieces)]
        if marked:
            content[-1]["cache_control"] = MARK
    out = written_content(api, body_of(api, content))
    if isinstance(content, str):
        assert out == f"{BLOCK}\n\n{content}"
        return
    assert isinstance(out, list) and all(p["type"] == kind for p in out)
    texts_out = [p["text"] for p in out]
    if len(pieces) == 1:
        assert texts_out == [f"{BLOCK}\n\n{pieces[0]}"]  # still the client's one part
    else:
        assert texts_out == [BLOCK, *pieces]  # the client's parts, the block in front
    # The client's parts keep their fields; its mark stays on the part carrying its text.
    assert [p.get("extra") for p in out][-len(pieces) :] == list(range(len(pieces)))
    marks = [p for p in out if "cache_control" in p]
    assert len(marks) == (1 if marked else 0)
    if marks:
        assert marks[0] is out[-1]
    # Marks aside, the body is the same whether or not the client marked it (a mark that
    # moves on changes nothing else).
    unmarked_content = [{"type": kind, "text": p, "extra": k} for k, p in enumerate(pieces)]
    assert unmarked(out) == written_content(api, body_of(api, unmarked_content))


@settings(max_examples=60, deadline=None)
@given(
    api=st.sampled_from(["chat", "responses"]),
    parts=st.lists(texts, min_size=1, max_size=4),
    edits=st.lists(st.integers(min_value=0, max_value=3), max_size=4),
)
def test_a_system_message_keeps_its_parts(api: Api, parts: list[str], edits: list[int]) -> None:
    """A canonical system text (spans replaced within lines, a block at the end) is cut back
    into the client's parts."""
    kind = PART_TYPE[api]
    content = [{"type": kind, "text": p, "extra": i} for i, p in enumerate(parts)]
    entry: dict[str, Any] = {"role": "developer" if api == "responses" else "system"}
    entry["content"] = content
    if api == "responses":
        entry["type"] = "message"
    key = "input" if api == "responses" else "messages"
    body = {"model": "m", key: [entry, user_entry(api, "hi")]}
    view = read_view(body, api)
    assert view.system == "\n".join(parts)
    changed = list(parts)
    for k in edits:  # a span within a line of part k replaced
        if k < len(changed):
            head, _, tail = changed[k].partition("\n")
            changed[k] = f"<<v{k}>>{head[1:]}" + (f"\n{tail}" if tail else "")
    changed[-1] = f"{changed[-1]}\n\n{BLOCK}"
    out = write_view(view, "\n".join(changed), view.messages, None)
    written = out[key][0]["content"]
    assert [p["text"] for p in written] == changed
    assert [p["extra"] for p in written] == list(range(len(parts)))
    assert all(p["type"] == kind for p in written)

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachepilot.messages import (
    ImagePart,
    Message,
    PairingError,
    ReasoningPart,
    TextPart,
    ToolCall,
    check_pairing,
    content_hash,
    message_keys,
    pairing_issues,
)


def _call(cid: str, name: str = "bash") -> ToolCall:
    return ToolCall(id=cid, name=name, arguments='{"command": "ls"}')


def test_roles_and_tool_fields_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown message role"):
        Message(role="robot", content="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tool_call_id"):
        Message(role="tool", content="x")
    with pytest.raises(ValueError, match="only assistant"):
        Message(role="user", content="x", tool_calls=(_call("a"),))


def test_text_joins_text_parts_only() -> None:
    m = Message(
        role="assistant",
        content=(
            ReasoningPart("thinking"),
            TextPart("a"),
            ImagePart("data:image/png;base64,AA"),
            TextPart("b"),
        ),
    )
    assert m.text == "a\nb"
    assert Message(role="user", content="plain").parts == (TextPart("plain"),)
    assert Message(role="user", content="").parts == ()


def test_lists_are_frozen_to_tuples() -> None:
    m = Message(role="assistant", content=[TextPart("x")], tool_calls=[_call("a")])  # type: ignore[arg-type]
    assert isinstance(m.content, tuple)
    assert isinstance(m.tool_calls, tuple)


def test_parsed_arguments_tolerates_bad_json() -> None:
    assert ToolCall("a", "t", '{"x": 1}').parsed_arguments() == {"x": 1}
    assert ToolCall("a", "t", "not json").parsed_arguments() == {}
    assert ToolCall("a", "t", "[1, 2]").parsed_arguments() == {}


_text = st.text(max_size=40)
_parts = st.lists(
    st.one_of(
        _text.map(TextPart),
        _text.map(lambda t: ImagePart("data:image/png;base64," + t.encode().hex(), "image/png")),
        st.builds(ReasoningPart, _text, st.none() | _text),
    ),
    max_size=4,
).map(tuple)
_messages = st.one_of(
    st.builds(Message, role=st.sampled_from(["system", "user"]), content=_text | _parts),
    st.builds(
        Message,
        role=st.just("assistant"),
        content=_text | _parts,
        tool_calls=st.lists(st.builds(ToolCall, _text, _text, _text), max_size=3).map(tuple),
    ),
    st.builds(
        Message,
        role=st.just("tool"),
        content=_text,
        tool_call_id=_text.filter(bool),
        name=st.none() | _text,
    ),
)


@given(_messages)
def test_dict_round_trip_is_exact(message: Message) -> None:
    assert Message.from_dict(message.to_dict()) == message


@given(st.lists(_messages, max_size=12), st.lists(_messages, max_size=6))
def test_appending_never_changes_earlier_keys(head: list[Message], tail: list[Message]) -> None:
    assert message_keys(head + tail)[: len(head)] == message_keys(head)


@given(st.lists(_messages, max_size=12))
def test_keys_are_unique_and_deterministic(messages: list[Message]) -> None:
    keys = message_keys(messages)
    assert len(set(keys)) == len(keys)
    assert keys == message_keys(list(messages))


def test_framework_id_wins_and_equal_messages_get_ordinals() -> None:
    a = Message(role="user", content="hi")
    keys = message_keys([a, a, Message(role="user", content="hi", id="m-7")])
    assert keys[0].endswith(":0") and keys[1].endswith(":1")
    assert keys[0].rsplit(":", 1)[0] == keys[1].rsplit(":", 1)[0]
    assert keys[2] == "id:m-7"
    assert content_hash(a) == content_hash(Message(role="user", content="hi", id="other"))


def test_valid_pairing_passes() -> None:
    history = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(_call("a"), _call("b"))),
        Message(role="tool", content="1", tool_call_id="b"),
        Message(role="tool", content="2", tool_call_id="a"),
        Message(role="assistant", content="done"),
    ]
    check_pairing(history, allow_pending_tail=False)


def test_pairing_violations_are_named() -> None:
    orphan = [
        Message(role="user", content="x"),
        Message(role="tool", content="1", tool_call_id="z"),
    ]
    assert [i.kind for i in pairing_issues(orphan)] == ["orphan_result"]

    unanswered = [
        Message(role="assistant", tool_calls=(_call("a"),)),
        Message(role="user", content="next"),
    ]
    issue = pairing_issues(unanswered)[0]
    assert (issue.kind, issue.index, issue.call_id) == ("unanswered_call", 0, "a")

    duplicate = [
        Message(role="assistant", tool_calls=(_call("a"),)),
        Message(role="tool", content="1", tool_call_id="a"),
        Message(role="tool", content="1", tool_call_id="a"),
    ]
    assert [i.kind for i in pairing_issues(duplicate)] == ["duplicate_result"]

    interleaved = [
        Message(role="assistant", tool_calls=(_call("a"),)),
        Message(role="assistant", content="oops"),
        Message(role="tool", content="1", tool_call_id="a"),
    ]
    kinds = sorted(i.kind for i in pairing_issues(interleaved))
    assert kinds == ["orphan_result", "unanswered_call"]


def test_pending_tail_is_allowed_only_on_request() -> None:
    tail = [Message(role="user", content="x"), Message(role="assistant", tool_calls=(_call("a"),))]
    assert pairing_issues(tail) == []
    with pytest.raises(PairingError, match="unanswered_call"):
        check_pairing(tail, allow_pending_tail=False)


@given(st.lists(_messages, max_size=10), st.lists(_messages, max_size=5), st.integers(0, 4))
def test_key_tracker_matches_message_keys(
    head: list[Message], tail: list[Message], cut: int
) -> None:
    from cachepilot.messages import KeyTracker

    tracker = KeyTracker()
    assert tracker.keys(head) == message_keys(head)
    grown = head + tail
    assert tracker.keys(grown) == message_keys(grown)
    shrunk = grown[cut:]  # not an extension: recomputed from scratch
    assert tracker.keys(shrunk) == message_keys(shrunk)


def test_reused_framework_ids_still_get_unique_keys() -> None:
    call = ToolCall("c1", "bash", "{}")
    history = [
        Message(role="assistant", tool_calls=(call,), id="event-37"),
        Message(role="tool", content="out", tool_call_id="c1", id="event-37"),
        Message(role="user", content="next", id="event-37"),
    ]
    keys = message_keys(history)
    assert keys == ["id:event-37", "id:event-37#1", "id:event-37#2"]
    assert message_keys(history[:2]) == keys[:2]


def test_ids_that_look_like_reuses_never_collide() -> None:
    history = [Message(role="user", content=str(n), id=i) for n, i in enumerate(["x", "x", "x#1"])]
    keys = message_keys(history)
    assert len(set(keys)) == 3

"""The session memory of a growing transcript, extended from an earlier prefix's memory, is
the memory built from the first message (`cachepilot.memory.prefix_memo`)."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.memory import SessionMemory
from cachepilot.memory.prefix_memo import SessionMemories, _Kept
from cachepilot.messages import Message, ToolCall

_COMMANDS = (
    "pytest tests/test_{n}.py -q",
    "cat src/module_{n}.py",
    "sed -n 1,40p src/app_{n}.py",
    "git commit -am 'fix {n}'",
    "python -c 'import pkg_{n}'",
    "grep -rn handler_{n} src",
)
_OUTPUTS = (
    "===== 2 failed, {n} passed in 0.51s =====\nFAILED tests/test_{n}.py::test_it",
    'Traceback (most recent call last):\n  File "src/app_{n}.py", line 3\nValueError: bad {n}',
    "def handler_{n}(request):\n    return Response({n})",
    "[main abc{n}f0] fix {n}\n 1 file changed",
    "Exit code 1\nerror: cannot open src/missing_{n}.py",
    "Python 3.11.{n}\nOn branch feature-{n}",
    "",
)


def _exchange(step: int, command: int, output: int, n: int) -> list[Message]:
    call = ToolCall(
        id=f"call_{step}",
        name="bash",
        arguments='{"command": "' + _COMMANDS[command].format(n=n).replace("'", "\\'") + '"}',
    )
    return [
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", _OUTPUTS[output].format(n=n), tool_call_id=f"call_{step}", name="bash"),
    ]


_steps = st.lists(
    st.tuples(
        st.integers(0, len(_COMMANDS) - 1),
        st.integers(0, len(_OUTPUTS) - 1),
        st.integers(0, 6),
        st.booleans(),
    ),
    min_size=1,
    max_size=30,
)


def _transcript(steps: list[tuple[int, int, int, bool]]) -> list[Message]:
    messages = [Message("user", "Fix the failing handler in src/app_1.py.")]
    for step, (command, output, n, user_turn) in enumerate(steps):
        messages += _exchange(step, command, output, n)
        if user_turn:
            messages.append(Message("user", f"Now also check handler_{n} and report."))
    return messages


def _dump(memory: SessionMemory) -> dict[str, Any]:
    return memory.model_dump(mode="json")


@settings(max_examples=60, deadline=None)
@given(_steps, st.lists(st.integers(1, 200), min_size=1, max_size=5))
def test_an_extended_memory_is_the_memory_built_from_the_start(
    steps: list[tuple[int, int, int, bool]], cuts: list[int]
) -> None:
    messages = _transcript(steps)
    memories = SessionMemories()
    for cut in sorted({min(c, len(messages)) for c in cuts}):
        prefix = messages[:cut]
        assert _dump(memories.of(prefix)) == _dump(SessionMemory.from_messages(prefix))
    # The same transcript again: the kept memory, equal to a fresh one.
    assert _dump(memories.of(messages)) == _dump(SessionMemory.from_messages(messages))


def test_a_growing_transcript_is_extended_and_equal_copies_match_too() -> None:
    steps = [(i % len(_COMMANDS), i % len(_OUTPUTS), i, i % 7 == 0) for i in range(40)]
    messages = _transcript(steps)
    memories = SessionMemories()
    for cut in (21, 41, 61, len(messages)):
        assert _dump(memories.of(messages[:cut])) == _dump(
            SessionMemory.from_messages(messages[:cut])
        )
    assert memories.extended == 3
    # Equal messages that are other objects (a transcript read again from the wire) match.
    again = [Message(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id,
                     name=m.name) for m in messages]  # fmt: skip
    assert _dump(memories.of(again)) == _dump(SessionMemory.from_messages(again))
    assert memories.extended == 3


def test_a_memory_a_cap_trimmed_is_built_again_from_the_start() -> None:
    # 130 distinct commands: the command cap (100 by default) drops some between the cuts.
    steps = [(0, 2, i, False) for i in range(130)]
    messages = _transcript(steps)
    memories = SessionMemories()
    for cut in (121, 181, 241, len(messages)):
        built = SessionMemory.from_messages(messages[:cut])
        assert _dump(memories.of(messages[:cut])) == _dump(built)
    assert memories.extended == 1  # 121 -> 181 only: later ones trimmed


def test_a_kept_memory_holds_no_message_alive() -> None:
    memories = SessionMemories()
    messages = _transcript([(1, 2, 3, False)] * 3)
    memories.of(messages)
    del messages
    gc.collect()
    fresh = _transcript([(1, 2, 4, False)] * 3)
    assert _dump(memories.of(fresh)) == _dump(SessionMemory.from_messages(fresh))
    assert memories.extended == 0


def test_looking_up_a_kept_memory_never_compares_memories(monkeypatch: Any) -> None:
    # Two entries for one transcript (two threads built it at once): finding the one used
    # must go by identity under the lock, not by comparing whole memories.
    messages = _transcript([(1, 2, 3, False)] * 4)
    memories = SessionMemories()
    first, second = memories.of(messages), SessionMemory.from_messages(messages)
    refs = memories._kept[0].refs
    memories._kept.append(_Kept(refs, second))

    def refuse(self: SessionMemory, other: object) -> bool:
        raise AssertionError("a kept memory was compared with another")

    monkeypatch.setattr(SessionMemory, "__eq__", refuse)
    assert memories.of(messages) is second  # the newest entry, found as it is
    assert [id(e.memory) for e in memories._kept] == [id(first), id(second)]

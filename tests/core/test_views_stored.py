"""The stored view of a tool result wins over the one a process holds: after loading a
state another process saved, every process shows the view that state names; a view made
while the archive was down is kept only while it stays down."""

from __future__ import annotations

import hashlib
from typing import Any

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall


class SwitchableStore(InMemoryArtifactStore):
    """An archive that can be taken down (puts fail) and brought back."""

    down = False

    def put(self, *args: Any, **kwargs: Any) -> str:
        if self.down:
            raise ConnectionError("the archive is down")
        return super().put(*args, **kwargs)


def _output(n: int) -> str:
    return "\n".join(
        f"src/m_{n}_{i}.c:{i}: warning: {hashlib.sha256(f'{n}/{i}'.encode()).hexdigest()}"
        for i in range(300)
    )


def _transcript(outputs: int) -> list[Message]:
    messages = [Message("system", "You build things."), Message("user", "Build it.")]
    for n in range(outputs):
        call = ToolCall(f"c{n}", "bash", f'{{"command": "make t{n}"}}')
        messages += [Message("assistant", "", tool_calls=(call,)),
                     Message("tool", _output(n), tool_call_id=f"c{n}")]  # fmt: skip
    return messages


def _copy(messages: list[Message]) -> list[Message]:
    """The same transcript as new objects (as a new request body parses to)."""
    return [Message(m.role, m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id)
            for m in messages]  # fmt: skip


def _shown(pilot: CachePilot, messages: list[Message], index: int = 3) -> str:
    text = pilot.reduce_results(_copy(messages), "t")[index].content
    assert isinstance(text, str)
    return text


def test_a_state_saved_elsewhere_wins_over_the_view_this_process_holds() -> None:
    shared = SwitchableStore()
    mine = CachePilot(Config(), store=shared)
    messages = _transcript(1)
    shared.down = True
    preview = _shown(mine, messages)  # the archive down: a preview, nothing archived
    assert "recall(" not in preview and len(preview) < len(_output(0))
    shared.down = False
    other = CachePilot(Config(), store=shared)
    stub = _shown(other, messages)  # another process, archive up: a stub with its ref
    assert 'recall(ref="' in stub and stub != preview
    mine.load_state("t", other.export_state("t"))
    assert _shown(mine, messages) == stub


def test_a_view_made_while_the_archive_was_down_is_kept_until_it_is_back() -> None:
    store = SwitchableStore()
    pilot = CachePilot(Config(), store=store)
    messages = _transcript(1)
    store.down = True
    preview = _shown(pilot, messages)
    for _ in range(3):  # the same bytes while it is down, reduced once
        assert _shown(pilot, messages) == preview
    assert pilot.state("t").archive_failures == 1
    store.down = False
    longer = _transcript(2)  # a new output archives: the archive is back
    assert 'recall(ref="' in _shown(pilot, longer, 5)
    stub = _shown(pilot, longer)  # the preview is made again, now with its original kept
    assert 'recall(ref="' in stub
    ref = stub.split('recall(ref="', 1)[1][:12]
    assert "m_0_150" in pilot.recall(ref, thread="t", grep="m_0_150")

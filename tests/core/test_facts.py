from __future__ import annotations

from cachepilot.memory.facts import FactIndex, extract_candidates, view_text
from cachepilot.messages import Message, ToolCall


def _transcript() -> list[Message]:
    return [
        Message(role="user", content="Fix the bug in src/app/main.py please"),
        Message(
            role="assistant", tool_calls=(ToolCall("c1", "bash", '{"command": "grep -rn foo"}'),)
        ),
        Message(
            role="tool",
            tool_call_id="c1",
            name="bash",
            content="src/app/db_pool.py:212: MAX_POOL_SIZE = 48213\nsrc/app/main.py:3: import x",
        ),
        Message(
            role="assistant",
            content="The limit MAX_POOL_SIZE is 48213 in src/app/db_pool.py; main.py is fine.",
            tool_calls=(ToolCall("c2", "read_file", '{"path": "src/app/db_pool.py"}'),),
        ),
    ]


def test_candidates_cover_paths_identifiers_numbers_and_quotes() -> None:
    found = extract_candidates('open src/x/y.py then call load_config() got 12345 and "some value"')
    assert {"src/x/y.py", "load_config", "12345", "some value"} <= found
    assert "then" not in found


def test_facts_come_from_tool_outputs_only() -> None:
    index = FactIndex(_transcript())
    facts = {f.text for f in index.needed_at(3)}
    assert {"MAX_POOL_SIZE", "48213", "src/app/db_pool.py"} <= facts
    # The user named src/app/main.py before any tool did: not a tool-derived fact.
    assert "src/app/main.py" not in facts
    assert all(f.source_index == 2 for f in index.needed_at(3))
    assert index.needed_at(1) == []
    assert index.total == len(index.needed_at(3))


def test_view_text_sees_tool_arguments() -> None:
    text = view_text("sys", _transcript()[:2])
    assert "grep -rn foo" in text and text.startswith("sys")

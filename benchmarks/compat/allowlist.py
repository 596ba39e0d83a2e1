"""Expected differences: host tests that assert exactly what cachepilot changes by design.

Each entry is a host test (node id, `*` and `?` wildcards allowed) that checks the exact tool
list or the exact request a model receives, with a one-line reason. Nothing else belongs here:
a test that fails for any other reason is a regression to fix.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import NamedTuple

__all__ = ["ALLOWED", "Allowed", "reason"]


class Allowed(NamedTuple):
    """One expected difference."""

    framework: str
    nodeid: str
    why: str
    positions: tuple[str, ...] = ("first", "last")


_AGENTS = "tests/unit_tests/agents"
_TOOL_LIST = "asserts the exact tool list; the registered `recall` tool is in it"
_BYTES = "replays a vcr cassette of the exact request; `recall` and the tool order change it"
_DRAWING = "snapshot of the graph drawing; the tools node lists `recall`"

ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "langchain",
        f"{_AGENTS}/middleware/core/test_tools.py::test_model_request_tools_are_base_tools",
        _TOOL_LIST,
    ),
    Allowed(
        "langchain",
        f"{_AGENTS}/middleware/core/test_tools.py::test_tools_preserved_across_multiple_middleware",
        _TOOL_LIST,
    ),
    Allowed(
        "langchain",
        f"{_AGENTS}/middleware/implementations/test_tool_selection.py::"
        "TestMalformedSelectionResponse::test_on_parsing_failure_all_ignores_max_tools",
        _TOOL_LIST,
    ),
    Allowed(
        "langchain",
        f"{_AGENTS}/middleware/implementations/test_tool_selection.py::"
        "TestLLMToolSelectorBasic::test_sync_basic_selection",
        "asserts the exact tool order the selector chose; tools reach the model sorted by name",
        ("first",),
    ),
    Allowed("langchain", f"{_AGENTS}/test_response_format_integration.py::*", _BYTES),
    Allowed("langchain", f"{_AGENTS}/middleware/core/test_diagram.py::*", _DRAWING),
    Allowed(
        "langchain",
        f"{_AGENTS}/middleware/core/test_decorators.py::*graph_snapshot*",
        _DRAWING,
    ),
    Allowed(
        "langchain",
        f"{_AGENTS}/middleware/core/test_framework.py::test_jump_to_is_ephemeral",
        "a tool-less agent: any registered middleware tool adds a tools node, which routes an "
        "after_model jump_to LangChain ignores without one; recall=False keeps the graph",
    ),
)


def reason(framework: str, nodeid: str, position: str) -> str | None:
    """Why this test may fail injected, or None when it must not."""
    for entry in ALLOWED:
        if (
            entry.framework == framework
            and position in entry.positions
            and fnmatchcase(nodeid, entry.nodeid)
        ):
            return entry.why
    return None

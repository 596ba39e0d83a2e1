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


# The Agents SDK suite (`openai-agents` sdist). `[[]` is a literal `[` in these patterns.
_RECALL_OFFERED = "asserts the exact tool list a model receives; `recall` is offered to it"

ALLOWED += (
    Allowed(
        "agents",
        "tests/sandbox/test_run_cwd.py::test_python_skill_uses_absolute_root_from_nested_workdir",
        "asserts the exact system prompt; the volatile sandbox path is moved out of it",
    ),
    Allowed(
        "agents",
        "tests/sandbox/test_runtime.py::test_runner_merges_sandbox_instructions_and_tools",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/sandbox/test_runtime.py::"
        "test_sandbox_mcp_names_remain_distinct_from_conditional_handoffs[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/sandbox/test_runtime.py::test_start_hooks_control_sandbox_mcp_filters[[]True-*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/sandbox/test_runtime.py::test_start_hooks_refresh_sandbox_application_tools[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_agent_tool_enablement_snapshot.py::"
        "test_runner_exposes_evaluated_tools_when_enablement_changes_configuration[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_start_hook_tool_concurrency.py::"
        "test_model_wait_does_not_release_agent_configuration_ownership[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_start_hook_tool_concurrency.py::"
        "test_shared_agent_with_context_enablement_can_run_concurrently[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_start_hook_tool_concurrency.py::"
        "test_surviving_run_can_update_tools_after_harmless_overlap[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_start_hook_tools.py::test_start_hooks_update_model_tools_and_dispatch[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_agent_runner.py::test_run_warns_and_keeps_last_duplicate_function_tool[[]*",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_agent_runner.py::test_run_warns_once_for_repeated_source_agent_name",
        _RECALL_OFFERED,
    ),
    Allowed(
        "agents",
        "tests/test_cancel_streaming.py::test_cancel_before_streaming",
        "counts closes of the provider the SDK makes for a run without a run config; with the "
        "plugin's run config a run makes its provider at its first model call, so a run "
        "cancelled before it starts makes and closes none",
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

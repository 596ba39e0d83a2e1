"""The host test suites the compatibility harness runs: where they are and what they need."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SUITES", "Suite"]


@dataclass(frozen=True, slots=True)
class Suite:
    """One framework's own test suite, run from its sdist.

    Attributes:
        name: the `--framework` value.
        dist: the distribution whose installed version is fetched.
        test_paths: folders or files of the sdist that hold the tests.
        tools: the test tools to install, at the versions the sdist's `uv.lock` pins
            (`pytest-timeout` bounds a test that hangs with cachepilot injected).
        inject: the pytest plugin module that adds cachepilot.
        select: when set, only test files whose text matches it are run (files that never
            start a run cannot change under an injection that only touches runs).
        src_dir: a folder of the sdist to put first on `PYTHONPATH` (the package under test
            is then imported from the sdist itself, as its tests expect).
        positions: the middleware positions that mean something for this framework.
        exclude: sdist-relative folders never run (they need services or hardware).
        deselect: node id prefixes never run (slow, and they start no run).
        ci_paths: the files `--subset ci` runs (see benchmarks/compat/README.md).
    """

    name: str
    dist: str
    test_paths: tuple[str, ...]
    tools: tuple[str, ...]
    inject: str
    select: re.Pattern[str] | None = None
    src_dir: str | None = None
    positions: tuple[str, ...] = ("first", "last")
    exclude: tuple[str, ...] = field(default_factory=tuple)
    deselect: tuple[str, ...] = field(default_factory=tuple)
    ci_paths: tuple[str, ...] = field(default_factory=tuple)

    def files(self, root: Path) -> list[str]:
        """The test arguments for pytest, relative to the sdist root."""
        if self.select is None:
            return list(self.test_paths)
        chosen: list[str] = []
        for base in self.test_paths:
            for path in sorted((root / base).rglob("test_*.py")):
                rel = path.relative_to(root).as_posix()
                if any(rel.startswith(f"{skip}/") for skip in self.exclude):
                    continue
                if self.select.search(path.read_text(encoding="utf-8", errors="replace")):
                    chosen.append(rel)
        return chosen


LANGCHAIN = Suite(
    name="langchain",
    dist="langchain",
    test_paths=("tests/unit_tests/agents",),
    tools=(
        "pytest",
        "pytest-asyncio",
        "pytest-mock",
        "pytest-xdist",
        "pytest-timeout",
        "pytest-socket",
        "syrupy",
        "toml",
        "blockbuster",
        "langchain-tests",
    ),
    inject="inject_langchain",
)

AGENTS = Suite(
    name="agents",
    dist="openai-agents",
    test_paths=("tests",),
    tools=(
        "pytest",
        "pytest-asyncio",
        "pytest-mock",
        "pytest-xdist",
        "pytest-timeout",
        "inline-snapshot",
        "fakeredis",
        "aiosqlite",
        "sqlalchemy",
        "greenlet",
        "fastapi",
    ),
    inject="inject_agents",
    select=re.compile(r"Runner\.run|\.run_streamed\(|AgentRunner\(|\.as_tool\("),
    src_dir="src",
    # The Agents SDK has no middleware list: its run config, hooks and session compose in one
    # documented order, so there is one injected run.
    positions=("last",),
    exclude=("tests/extensions/sandbox", "tests/realtime", "tests/voice"),
    deselect=(
        # Cross-process locking and subprocess tests: slow, and none of them starts a run.
        "tests/extensions/memory/test_advanced_sqlite_session.py::test_branch_allocation_is_"
        "serialized_across_processes",
        "tests/extensions/memory/test_advanced_sqlite_session.py::test_concurrent_structure_"
        "table_claims_leave_one_coherent_owner",
        "tests/extensions/memory/test_advanced_sqlite_session.py::test_pop_item_claim_is_"
        "unique_across_processes",
        "tests/test_trace_processor.py::test_tracing_atexit_cleanup_",
        "tests/mcp/test_mcp_pagination_integration.py",
    ),
    # Where the plugin acts (runs, tools, hooks, sessions, streaming, guardrails, handoffs,
    # models), within the CI budget: see benchmarks/compat/README.md.
    ci_paths=(
        "tests/test_agent_runner.py",
        "tests/test_agent_runner_streamed.py",
        "tests/test_run_config.py",
        "tests/test_max_turns.py",
        "tests/test_agent_as_tool.py",
        "tests/test_start_hook_tools.py",
        "tests/test_start_hook_tool_concurrency.py",
        "tests/test_tool_guardrails.py",
        "tests/test_run_hooks.py",
        "tests/test_agent_hooks.py",
        "tests/test_global_hooks.py",
        "tests/test_agent_llm_hooks.py",
        "tests/memory/test_session.py",
        "tests/test_cancel_streaming.py",
        "tests/test_stream_events.py",
        "tests/test_guardrails.py",
        "tests/test_runner_guardrail_resume.py",
        "tests/test_handoff_history_duplication.py",
        "tests/models/test_openai_responses.py",
        "tests/models/test_openai_chatcompletions.py",
        "tests/test_prompt_cache_key.py",
        "tests/test_scripted_model.py",
    ),
)

SUITES: dict[str, Suite] = {suite.name: suite for suite in (LANGCHAIN, AGENTS)}

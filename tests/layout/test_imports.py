"""The source tree's layering: no import cycles, none dodged by a lazy or type-only import
(DESIGN §3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from layout_graph import (
    OURS,
    ROOT,
    Kind,
    find_cycle,
    import_graph,
    imports_of,
    modules,
    path_exists,
    resolve,
)


def test_the_graph_is_read_from_the_tree() -> None:
    graph = import_graph()
    assert "cachepilot.pilot.facade" in graph
    assert "cachepilot.pilot.prepare" in graph["cachepilot.pilot.facade"]


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# --------------------------------------------------------------------------------------------
# Imports that hide a cycle: a lazy import (inside a function) or a type-only one (under
# `TYPE_CHECKING`) of a module that imports this one back. The dependency is there all the
# same; the modules are split so that it points one way.


def _hidden_cycles(kind: Kind, known: dict[str, Path]) -> list[str]:
    """`a -> b` for every import of `kind` in `a` of a project module `b` that reaches `a`
    back through imports that run (at import time or lazily)."""
    running = import_graph(("module", "function"))
    found: list[str] = []
    for name, path in known.items():
        for item in imports_of(name, path):
            target = resolve(item.name, known)
            if item.kind != kind or target is None or target == name:
                continue
            if path_exists(running, target, name):
                found.append(f"{name}:{item.line} -> {target}")
    return sorted(found)


def test_no_lazy_import_dodges_a_cycle() -> None:
    assert _hidden_cycles("function", modules()) == []


def test_no_type_only_import_hides_a_cycle() -> None:
    # E.g. a plugin's pieces naming the plugin class for their `owner` argument: they say
    # what they need of it with a protocol of their own instead.
    assert _hidden_cycles("type", modules()) == []


def test_the_agents_plugins_pieces_do_not_name_the_plugin() -> None:
    # The pieces say what they need of `CachePilotAgents` with protocols of their own.
    known = modules()
    naming = sorted(
        f"{name}:{item.line} ({item.kind})"
        for name, path in known.items()
        if name.startswith("cachepilot_agents.") and name != "cachepilot_agents.plugin"
        for item in imports_of(name, path)
        if resolve(item.name, known) == "cachepilot_agents.plugin"
    )
    assert naming == []


def test_the_hidden_cycle_checks_see_lazy_and_type_only_imports(tmp_path: Path) -> None:
    a, b, c = (tmp_path / f"{n}.py" for n in "abc")
    a.write_text("import cachepilot.b\n", encoding="utf-8")
    b.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from cachepilot.a import A\n"
        "def f():\n    from cachepilot import c\n",
        encoding="utf-8",
    )
    c.write_text("def g():\n    import cachepilot.b\n", encoding="utf-8")
    known = {"cachepilot.a": a, "cachepilot.b": b, "cachepilot.c": c}
    kinds = [(i.name, i.kind) for i in imports_of("cachepilot.b", b) if i.name.startswith(OURS)]
    assert kinds == [("cachepilot.a.A", "type"), ("cachepilot.c", "function")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("layout_graph.modules", lambda: known)
        assert _hidden_cycles("type", known) == ["cachepilot.b:3 -> cachepilot.a"]
        assert _hidden_cycles("function", known) == [
            "cachepilot.b:5 -> cachepilot.c",
            "cachepilot.c:2 -> cachepilot.b",
        ]


# Lazy imports of other packages: only of optional or heavy dependencies (an extra, or a
# package whose import costs the CLI's start-up), each named here with why.
LAZY_ALLOWED = {
    "PIL": "the `images` extra",
    "httpx": "the `proxy` extra",
    "starlette": "the `proxy` extra",
    "uvicorn": "the `proxy` extra",
    "opentelemetry": "the `otel` extra",
    "openai": "`cachepilot optimize` only; heavy to import",
    "tiktoken": "encodings load on first count; heavy to import",
    "platformdirs": "the cache directory is looked up on first use only",
    "matplotlib": "the bench's `plot` extra",
    "rich": "the bench's console output; heavy to import",
    "langchain_openai": "the `langchain` extra of the LangGraph plugin",
    "langchain_anthropic": "the bench's `anthropic` extra",
    "langsmith": "optional: LangSmith tracing, when installed",
    "ormsgpack": "LangGraph's checkpoint serializer, read only by `cachepilot inspect`",
    "sqlalchemy": "optional: the SQL state and artifact stores (`cachepilot[postgres]`)",
    "redis": "optional: the Redis state and artifact stores (`cachepilot[redis]`)",
    "headroom": "the bench's Headroom peer, installed only where it runs",
}


def lazy_external_imports(known: dict[str, Path]) -> list[str]:
    """`module: package` for every lazy import of a package outside the project and stdlib."""
    return sorted(
        {
            f"{name}: {top}"
            for name, path in known.items()
            for item in imports_of(name, path)
            if item.kind == "function"
            and resolve(item.name, known) is None
            and (top := _top(item.module)) not in sys.stdlib_module_names
            and not top.startswith(OURS)
        }
    )


def test_lazy_imports_of_other_packages_are_optional_ones() -> None:
    found = lazy_external_imports(modules())
    assert found, "the lazy imports are read"
    assert [f for f in found if f.split(": ")[1] not in LAZY_ALLOWED] == []


# --------------------------------------------------------------------------------------------
# The two wings (DESIGN §3): the product imports no agent framework (core) and no measurement.

CORE = "cachepilot"
PRODUCT = ("cachepilot", "cachepilot_langgraph", "cachepilot_agents")
FRAMEWORKS = ("langchain", "langgraph", "agents")
MAX_LINES = 800


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def external_imports(path: Path) -> set[str]:
    """Absolute module names every runtime import of a module names (lazy imports too)."""
    return {
        item.module
        for item in imports_of("_", path)
        if item.kind != "type" and not item.module.startswith(".")
    }


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def framework_imports(known: dict[str, Path]) -> list[tuple[str, str]]:
    """(core module, imported name) for every core import of an agent framework."""
    return sorted(
        (module, name)
        for module, path in known.items()
        if _in_package(module, CORE)
        for name in external_imports(path)
        if _top(name).startswith(FRAMEWORKS)
    )


def bench_imports(known: dict[str, Path]) -> list[tuple[str, str]]:
    """(product module, imported name) for every product import of the measurement package."""
    return sorted(
        (module, name)
        for module, path in known.items()
        if _top(module) in PRODUCT
        for name in external_imports(path)
        if _top(name) == "cachepilot_bench"
    )


def test_core_imports_no_agent_framework() -> None:
    known = modules()
    assert "cachepilot.diagnose.metrics" in known and "cachepilot.diagnose.inspect" in known
    assert framework_imports(known) == []


def test_the_product_imports_no_measurement_code() -> None:
    known = modules()
    assert "cachepilot_bench.harness" in known  # the bench is in the tree, and looked past
    assert bench_imports(known) == []


def test_the_import_checks_see_lazy_and_nested_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import langchain_core\n"
        "def f():\n    from agents.tracing import custom_span\n"
        "    import cachepilot_bench.replay\n",
        encoding="utf-8",
    )
    known = {"cachepilot.m": module, "cachepilot_agents.m": module}
    assert framework_imports(known) == [("cachepilot.m", "agents.tracing")]
    assert bench_imports(known) == [
        ("cachepilot.m", "cachepilot_bench.replay"),
        ("cachepilot_agents.m", "cachepilot_bench.replay"),
    ]


def test_no_module_passes_the_size_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in modules().values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}

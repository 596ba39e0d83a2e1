"""The source tree's layering: no import cycles (DESIGN §3)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "packages").glob("*/src"))
OURS = ("cachepilot", "cachepilot_langgraph", "cachepilot_agents", "cachepilot_bench")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for src in SOURCES:
        for path in src.rglob("*.py"):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Runtime imports anywhere in the module (imports only a type checker runs are left out)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports at run time."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = _package_of(name, path).split(".")
                    base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    targets.append(child if child in modules else base)
            for target in targets:
                known = target
                while known and known not in modules:
                    known = known.rpartition(".")[0]
                if known and known != name and known.startswith(OURS):
                    graph[name].add(known)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, first == last), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_graph_is_read_from_the_tree() -> None:
    graph = import_graph()
    assert "cachepilot.pilot" in graph
    assert "cachepilot.prepare" in graph["cachepilot.pilot"]


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# --------------------------------------------------------------------------------------------
# The two wings (DESIGN §3): the product imports no agent framework (core) and no measurement.

CORE = "cachepilot"
PRODUCT = ("cachepilot", "cachepilot_langgraph", "cachepilot_agents")
FRAMEWORKS = ("langchain", "langgraph", "agents")
MAX_LINES = 800


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def external_imports(path: Path) -> set[str]:
    """Absolute names every runtime import of a module names (lazy imports in functions too)."""
    names: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif node.level == 0 and node.module:
            names.add(node.module)
    return names


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def framework_imports(modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(core module, imported name) for every core import of an agent framework."""
    return sorted(
        (module, name)
        for module, path in modules.items()
        if _in_package(module, CORE)
        for name in external_imports(path)
        if _top(name).startswith(FRAMEWORKS)
    )


def bench_imports(modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(product module, imported name) for every product import of the measurement package."""
    return sorted(
        (module, name)
        for module, path in modules.items()
        if _top(module) in PRODUCT
        for name in external_imports(path)
        if _top(name) == "cachepilot_bench"
    )


def test_core_imports_no_agent_framework() -> None:
    modules = _modules()
    assert "cachepilot.metrics" in modules and "cachepilot.inspect_state" in modules
    assert framework_imports(modules) == []


def test_the_product_imports_no_measurement_code() -> None:
    modules = _modules()
    assert "cachepilot_bench.harness" in modules  # the bench is in the tree, and looked past
    assert bench_imports(modules) == []


def test_the_import_checks_see_lazy_and_nested_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import langchain_core\n"
        "def f():\n    from agents.tracing import custom_span\n"
        "    import cachepilot_bench.replay\n",
        encoding="utf-8",
    )
    modules = {"cachepilot.m": module, "cachepilot_agents.m": module}
    assert framework_imports(modules) == [("cachepilot.m", "agents.tracing")]
    assert bench_imports(modules) == [
        ("cachepilot.m", "cachepilot_bench.replay"),
        ("cachepilot_agents.m", "cachepilot_bench.replay"),
    ]


def test_no_module_passes_the_size_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in _modules().values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}

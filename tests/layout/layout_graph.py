"""The source tree's imports, read with the AST: where each import sits decides its kind.

- `module`: runs when the module is imported (top level, or inside a class or a plain `if`/`try`).
- `function`: runs when a function runs (a lazy import).
- `type`: under `if TYPE_CHECKING:`, seen only by a type checker.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "OURS",
    "ROOT",
    "Import",
    "Kind",
    "find_cycle",
    "import_graph",
    "imports_of",
    "modules",
    "path_exists",
    "resolve",
]

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "packages").glob("*/src"))
OURS = ("cachepilot", "cachepilot_langgraph", "cachepilot_agents", "cachepilot_bench")

Kind = Literal["module", "function", "type"]


@dataclass(frozen=True, slots=True)
class Import:
    """One imported absolute name (`from a.b import c` gives `a.b.c`) and where it sits."""

    name: str
    """The absolute dotted name (the module, or `module.attribute` for `from` imports)."""
    module: str
    """The module the statement imports from (`a.b` above)."""
    kind: Kind
    line: int


def modules() -> dict[str, Path]:
    """Every project module (dotted name -> file)."""
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


def _walk(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, Kind]]:
    stack: list[tuple[ast.AST, Kind]] = [(tree, "module")]
    while stack:
        node, kind = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend((child, "type") for child in node.body)
            stack.extend((child, kind) for child in node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, kind
            continue
        inner: Kind = kind
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inner = "type" if kind == "type" else "function"
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


@functools.lru_cache(maxsize=4096)
def _imports_cached(module: str, path: Path, stamp: float) -> tuple[Import, ...]:
    return tuple(_read_imports(module, path))


def imports_of(module: str, path: Path) -> list[Import]:
    """Every import of one module, with absolute names (relative imports resolved)."""
    return list(_imports_cached(module, path, path.stat().st_mtime))


def _read_imports(module: str, path: Path) -> list[Import]:
    found: list[Import] = []
    for node, kind in _walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, a.name, kind, node.lineno) for a in node.names)
            continue
        base = node.module or ""
        if node.level:
            package = _package_of(module, path).split(".")
            base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
        found.extend(Import(f"{base}.{a.name}", base, kind, node.lineno) for a in node.names)
    return sorted(found, key=lambda i: (i.line, i.name))


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The project module `name` refers to (a module, or an attribute of one), or None."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name if name and name.startswith(OURS) else None


def import_graph(kinds: tuple[Kind, ...] = ("module",)) -> dict[str, set[str]]:
    """module -> the project modules it imports, counting imports of the given kinds."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for item in imports_of(name, path):
            target = resolve(item.name, known)
            if item.kind in kinds and target is not None and target != name:
                graph[name].add(target)
    return graph


def path_exists(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    """Whether `goal` is reachable from `start` (a module reaches itself)."""
    seen: set[str] = set()
    pending = [start]
    while pending:
        node = pending.pop()
        if node == goal:
            return True
        if node in seen:
            continue
        seen.add(node)
        pending.extend(graph.get(node, ()))
    return False


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

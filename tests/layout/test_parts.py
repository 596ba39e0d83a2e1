"""The core's parts and their arrows: which part of `cachepilot` may import which
(docs/architecture.md, DESIGN §3).

A part is a package of the core (`cachepilot.maintenance`, `cachepilot.recall`, ...) or one of
the few modules at its top level (`cachepilot.messages`, `cachepilot.config`, ...). `PARTS`
names every part with the parts it may import; every import counts, lazy and type-only ones
too, since each is a dependency all the same. A new import across parts is a design decision:
add the arrow here, in the package's docstring and in docs/architecture.md, or move the code.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from layout_graph import ROOT, find_cycle, imports_of, modules, resolve

CORE = "cachepilot"
CORE_DIR = ROOT / "packages" / "core" / "src" / "cachepilot"
TOP_LEVEL_LIMIT = 12

PARTS: dict[str, frozenset[str]] = {
    "__init__": frozenset({"artifacts", "convert", "messages", "pilot", "usage"}),
    "_encodings": frozenset(),
    "artifacts": frozenset({"refs"}),
    "audit": frozenset(
        {"canonical", "diagnose", "messages", "pricing", "sim", "tokens", "usage", "wire"}
    ),
    "canonical": frozenset({"messages", "support"}),
    "cli": frozenset({"audit", "compress", "diagnose", "proxy", "support"}),
    "compress": frozenset(
        {"artifacts", "fold", "memory", "messages", "reduce", "refs", "support", "tokens"}
    ),
    "config": frozenset({"canonical", "maintenance", "reduce", "sim", "tokens"}),
    "convert": frozenset({"audit", "messages", "wire"}),
    "diagnose": frozenset(
        {
            "artifacts",
            "canonical",
            "messages",
            "pilot",
            "plan",
            "sim",
            "state",
            "support",
            "tokens",
            "usage",
            "wire",
        }
    ),
    "fold": frozenset({"artifacts", "memory", "messages", "plan", "reduce", "support", "tokens"}),
    "guard": frozenset({"audit"}),
    "lifecycle": frozenset({"messages", "reduce", "support"}),
    "maintenance": frozenset(
        {"fold", "lifecycle", "messages", "plan", "pricing", "reduce", "support", "tokens"}
    ),
    "memory": frozenset({"messages", "support", "tokens"}),
    "messages": frozenset({"support"}),
    "metrics": frozenset({"diagnose"}),
    "pilot": frozenset(
        {
            "artifacts",
            "canonical",
            "compress",
            "config",
            "fold",
            "lifecycle",
            "maintenance",
            "memory",
            "messages",
            "plan",
            "pricing",
            "recall",
            "reduce",
            "refs",
            "sim",
            "support",
            "tokens",
            "usage",
        }
    ),
    "plan": frozenset({"messages", "reduce", "refs", "support"}),
    "pricing": frozenset({"usage"}),
    "proxy": frozenset(
        {
            "artifacts",
            "canonical",
            "diagnose",
            "messages",
            "pilot",
            "recall",
            "sim",
            "state",
            "support",
            "tokens",
            "usage",
            "wire",
        }
    ),
    "recall": frozenset({"artifacts", "reduce", "refs"}),
    "redact": frozenset({"support"}),
    "reduce": frozenset({"memory", "messages", "refs", "support"}),
    "refs": frozenset(),
    "sim": frozenset({"messages", "pricing", "support", "tokens", "usage"}),
    "state": frozenset(),
    "support": frozenset(),
    "testing": frozenset({"audit"}),
    "tokens": frozenset({"_encodings", "messages", "support"}),
    "usage": frozenset(),
    "wire": frozenset({"messages", "plan", "sim", "usage"}),
}
"""Every part of the core -> the parts it may import (`__init__` is the package's facade)."""

SHIMS = {
    "guard": "cachepilot.audit.guard",
    "metrics": "cachepilot.diagnose.metrics",
    "redact": "cachepilot.support.redact",
}
"""Documented paths of modules that moved: re-export modules, nothing else."""


def part_of(module: str) -> str | None:
    """The part a core module belongs to (None outside the core)."""
    if module == CORE:
        return "__init__"
    if not module.startswith(CORE + "."):
        return None
    return module.split(".")[1]


def part_imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """part -> the parts its modules import (every kind of import)."""
    found: dict[str, set[str]] = {}
    for name, path in known.items():
        source = part_of(name)
        if source is None:
            continue
        found.setdefault(source, set())
        for item in imports_of(name, path):
            target = resolve(item.name, known)
            target_part = part_of(target) if target else None
            if target_part is not None and target_part != source:
                found[source].add(target_part)
    return found


def forbidden_imports(known: dict[str, Path], rules: dict[str, frozenset[str]]) -> list[str]:
    """`module:line -> imported module` for every import across parts the rules do not allow."""
    found: list[str] = []
    for name, path in known.items():
        source = part_of(name)
        if source is None:
            continue
        for item in imports_of(name, path):
            target = resolve(item.name, known)
            target_part = part_of(target) if target else None
            if target_part is None or target_part == source:
                continue
            if target_part not in rules.get(source, frozenset()):
                found.append(f"{name}:{item.line} -> {target}")
    return sorted(found)


def test_every_part_of_the_tree_has_rules() -> None:
    found = set(part_imports(modules()))
    assert "pilot" in found and "maintenance" in found and "support" in found
    assert found == set(PARTS), "name a new part in PARTS (and its docstring), or drop an old one"


def test_parts_import_only_the_parts_they_may() -> None:
    assert forbidden_imports(modules(), PARTS) == []


def test_the_rules_have_no_cycle() -> None:
    graph = {part: set(allowed) for part, allowed in PARTS.items()}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_rules_name_only_parts() -> None:
    assert {target for allowed in PARTS.values() for target in allowed} <= set(PARTS)


def test_the_part_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    low, high = tmp_path / "low.py", tmp_path / "high.py"
    low.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from cachepilot.pilot.facade import CachePilot\n",
        encoding="utf-8",
    )
    high.write_text("def f():\n    from cachepilot.support.low import x\n", encoding="utf-8")
    known = {"cachepilot.support.low": low, "cachepilot.pilot.facade": high}
    assert forbidden_imports(known, PARTS) == [
        "cachepilot.support.low:3 -> cachepilot.pilot.facade"
    ]
    assert part_imports(known) == {"support": {"pilot"}, "pilot": {"support"}}


def test_at_most_a_dozen_modules_at_the_top_level() -> None:
    top = sorted(p.stem for p in CORE_DIR.glob("*.py") if p.stem != "__init__")
    assert len(top) <= TOP_LEVEL_LIMIT, top


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def test_every_package_docstring_names_its_part_and_its_arrows() -> None:
    wrong: list[str] = []
    for init in sorted(CORE_DIR.glob("*/__init__.py")):
        part = init.parent.name
        text = " ".join(_docstring(init).split())
        allowed = sorted(PARTS[part])
        named = ", ".join(f"`{p}`" for p in allowed) if allowed else "no other part"
        if f"Part `{part}` of the core" not in text or f"May import: {named};" not in text:
            wrong.append(part)
    assert wrong == []


def test_the_documented_paths_of_moved_modules_only_reexport() -> None:
    for old, new in SHIMS.items():
        path = CORE_DIR / f"{old}.py"
        body = ast.parse(path.read_text(encoding="utf-8")).body
        kinds = {type(node).__name__ for node in body}
        assert kinds <= {"Expr", "ImportFrom", "Assign"}, (old, kinds)
        shim, real = importlib.import_module(f"cachepilot.{old}"), importlib.import_module(new)
        assert sorted(shim.__all__) == sorted(real.__all__)
        for name in real.__all__:
            assert getattr(shim, name) is getattr(real, name), (old, name)


def test_the_documented_import_paths_still_import() -> None:
    # docs/diagnostics.md, docs/operations.md, docs/benchmark.md, packages/core/README.md
    from cachepilot.diagnose import explain
    from cachepilot.guard import assert_cache_stable
    from cachepilot.metrics import Metrics, OTelSink, langsmith_metadata
    from cachepilot.pricing import storage_cost
    from cachepilot.redact import install_logging
    from cachepilot.state import MemoryStateStore, SQLiteStateStore

    assert callable(explain) and callable(assert_cache_stable) and callable(install_logging)
    assert callable(storage_cost) and callable(langsmith_metadata)
    assert Metrics.__name__ == "Metrics" and OTelSink.__name__ == "OTelSink"
    assert MemoryStateStore.__module__ == SQLiteStateStore.__module__ == "cachepilot.state.base"
    testing = importlib.import_module("cachepilot.testing")
    assert testing.__name__ == "cachepilot.testing"


def architecture_rows() -> dict[str, int]:
    """part -> its row in the drawing of docs/architecture.md (`row N  a · b · c`)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("row "):
            continue
        number, _, names = line[4:].strip().partition(" ")
        names = names.split("  ")[0].strip()  # after two spaces: a comment
        for name in names.split(" · "):
            part = "__init__" if name.startswith("cachepilot") else name.strip()
            assert part not in rows, f"{part} drawn twice"
            rows[part] = int(number)
    return rows


def test_the_architecture_drawing_shows_every_part_below_its_importers() -> None:
    rows = architecture_rows()
    assert set(rows) == set(PARTS)
    upward = [
        f"{part} (row {rows[part]}) -> {target} (row {rows[target]})"
        for part, allowed in PARTS.items()
        for target in allowed
        if rows[target] >= rows[part]
    ]
    assert upward == []

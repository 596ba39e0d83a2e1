"""Public surfaces only: no module imports a framework's private name, except the one guarded
module per plugin (`cachepilot_agents._sdk_private`, `cachepilot_langgraph._framework_private`)
that holds every such touch with its fallback."""

from __future__ import annotations

import ast
from pathlib import Path

from layout_graph import imports_of, modules

GUARDED = {
    "cachepilot_agents": "cachepilot_agents._sdk_private",
    "cachepilot_langgraph": "cachepilot_langgraph._framework_private",
}
FRAMEWORKS = ("agents", "langchain", "langchain_core", "langgraph", "openai")
_INTERNAL_PARTS = ("run_internal", "internal")


def _is_framework(name: str) -> bool:
    top = name.split(".", 1)[0]
    return top in FRAMEWORKS or top.startswith(("langchain_", "langgraph_"))


def _private(name: str) -> bool:
    """A dotted name with a private part (`_x`, not a dunder) or an internal package."""
    return any(
        (part.startswith("_") and not part.startswith("__")) or part in _INTERNAL_PARTS
        for part in name.split(".")
    )


def _dynamic_lookups(path: Path) -> list[str]:
    """`importlib.import_module("x._y")`-style lookups of private framework modules."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "." in node.value
            and " " not in node.value
            and _is_framework(node.value)
            and _private(node.value)
        ):
            found.append(node.value)
    return found


def private_imports(known: dict[str, Path]) -> list[str]:
    """`module: name` for every private framework name a module names outside its guard."""
    found: set[str] = set()
    for module, path in known.items():
        if module in GUARDED.values():
            continue
        for item in imports_of(module, path):
            if _is_framework(item.name) and _private(item.name):
                found.add(f"{module}: {item.name}")
        found.update(f"{module}: {name}" for name in _dynamic_lookups(path))
    return sorted(found)


def test_no_private_framework_name_outside_the_guarded_modules() -> None:
    known = modules()
    assert set(GUARDED.values()) <= set(known)
    assert private_imports(known) == []


def test_the_guarded_modules_hold_the_private_names() -> None:
    known = modules()
    held = {
        guard: _dynamic_lookups(known[guard])
        + [i.name for i in imports_of(guard, known[guard]) if _private(i.name)]
        for guard in GUARDED.values()
    }
    assert "agents.run_internal.agent_tool_configuration" in held["cachepilot_agents._sdk_private"]
    assert "langgraph._internal._constants" in held["cachepilot_langgraph._framework_private"]


def test_the_check_sees_private_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from agents.usage import _response_usage_to_usage\n"
        "from agents.usage import Usage\n"
        "def f():\n    from langgraph._internal._constants import CONF\n"
        "    import agents.run_internal.run_loop\n"
        "X = importlib.import_module('langgraph._internal._constants')\n",
        encoding="utf-8",
    )
    assert private_imports({"cachepilot_agents.m": module}) == [
        "cachepilot_agents.m: agents.run_internal.run_loop",
        "cachepilot_agents.m: agents.usage._response_usage_to_usage",
        "cachepilot_agents.m: langgraph._internal._constants",
        "cachepilot_agents.m: langgraph._internal._constants.CONF",
    ]

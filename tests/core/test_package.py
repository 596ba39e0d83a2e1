"""Package-level contracts: core stays light, plugins import, everything is typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cachepilot

HEAVY = ("langchain", "langchain_core", "langgraph", "agents", "openai")


def test_core_never_imports_a_framework() -> None:
    code = (
        "import sys, cachepilot, cachepilot.pilot, cachepilot.bench, cachepilot.sim, "
        "cachepilot.traces, cachepilot.cli, cachepilot.lifecycle, cachepilot.memory; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_and_type_markers() -> None:
    assert {"CachePilot", "Config", "Message", "Usage"} <= set(cachepilot.__all__)
    for name in ("cachepilot", "cachepilot_langgraph", "cachepilot_agents"):
        module = __import__(name)
        assert (Path(module.__file__).parent / "py.typed").is_file(), name

"""Package-level contracts: core stays light, plugins import, everything is typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cachepilot

HEAVY = ("langchain", "langchain_core", "langgraph", "agents", "openai")


def test_core_never_imports_a_framework() -> None:
    # The command's parser included: it loads the bench's subcommands through entry points.
    code = (
        "import sys, cachepilot, cachepilot.pilot.facade, cachepilot.sim, cachepilot.cli, "
        "cachepilot.lifecycle, cachepilot.memory, cachepilot.diagnose.metrics, "
        "cachepilot.diagnose.inspect; "
        "cachepilot.cli._build_parser(); "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_and_type_markers() -> None:
    assert {"CachePilot", "Config", "Message", "Usage"} <= set(cachepilot.__all__)
    for name in ("cachepilot", "cachepilot_langgraph", "cachepilot_agents", "cachepilot_bench"):
        module = __import__(name)
        assert (Path(module.__file__).parent / "py.typed").is_file(), name


def test_core_quickstart_example_runs() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "core_quickstart.py"
    out = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, check=True, timeout=300
    )
    lines = out.stdout.splitlines()
    plain = float(lines[0].split("$")[1].split(",")[0])
    ours = float(lines[1].split("$")[1].split(",")[0])
    assert ours < plain / 5
    assert "[recall " in out.stdout  # the recall answer's header

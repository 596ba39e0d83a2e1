"""Maintainer tool: re-capture the test and lint outputs the demo session shows.

Run ``uv run python -m cachepilot_bench.demo_workload._capture`` from a source checkout after
changing the shipped project or the session script. It plays the session, and for every
``pytest`` / ``ruff`` command writes the workspace as edited so far to a temporary folder,
runs the real command there (with colours, as in a terminal) and stores the output under
``data/outputs`` with an entry in ``captured.json``. Machine-specific text (the temporary
path, interpreter and plugin versions) is replaced by the fictional machine's values, so the
files stay the same wherever they are captured, apart from timings and object addresses.

Not used at run time: `tools.bash` only reads what this wrote.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cachepilot_bench.demo_workload.generate import record_demo_session
from cachepilot_bench.demo_workload.tools import DEMO_CWD, DemoToolState

__all__ = ["capture", "main"]

_OUTPUTS = Path(__file__).parent / "data" / "outputs"
_FAKE_PLATFORM = "platform linux -- Python 3.12.3, pytest-8.3.5, pluggy-1.5.0"
_FAKE_PYTHON = f"{DEMO_CWD}/.venv/bin/python3"


def _normalize(text: str, workdir: str) -> str:
    text = text.replace(workdir, DEMO_CWD)
    text = re.sub(
        r"platform \w+ -- Python [\d.]+, pytest-[\d.]+, pluggy-[\d.]+( -- \S+)?",
        lambda m: _FAKE_PLATFORM + (f" -- {_FAKE_PYTHON}" if m.group(1) else ""),
        text,
    )
    # Third-party plugins are not loaded; show the one the fictional project installs.
    text = re.sub(
        r"^((?:rootdir|configfile|testpaths): .*\n)(?!(?:configfile|testpaths): )",
        r"\1plugins: cov-5.0.0\n",
        text,
        count=1,
        flags=re.MULTILINE,
    )
    return text.replace(sys.prefix, f"{DEMO_CWD}/.venv")


def _argv(words: list[str]) -> list[str]:
    flags = ["--color=yes", "-p", "no:cacheprovider"]
    if words[0] == "pytest":
        # -P: like the `pytest` script, do not put the working directory on sys.path, so
        # the package is only importable once it is "installed".
        return [sys.executable, "-P", "-m", "pytest", *flags, *words[1:]]
    if words[:3] == ["python", "-m", "pytest"]:
        return [sys.executable, "-m", "pytest", *flags, *words[3:]]
    if words[0] == "ruff":
        return [sys.executable, "-m", "ruff", *words[1:], "--no-cache"]
    raise ValueError(f"no real runner for {shlex.join(words)!r}")


def capture(outputs: Path = _OUTPUTS) -> list[dict[str, Any]]:
    """Play the session, run its test and lint commands for real, write the outputs.

    Returns:
        The manifest entries written to ``captured.json``.
    """
    for old in outputs.glob("*.log"):
        if old.name.startswith(("pytest_", "ruff_")):
            old.unlink()
    runs: list[dict[str, Any]] = []
    seen: dict[tuple[str, bool, str], dict[str, Any]] = {}

    def run_for_real(command: str, state: DemoToolState) -> tuple[str, int]:
        key = (command, state.installed, json.dumps(state.tree_digest()))
        if key not in seen:
            seen[key] = _run_real(command, state, outputs, len(runs) + 1)
            runs.append(seen[key])
        entry = seen[key]
        return (outputs / entry["output"]).read_text(encoding="utf-8"), int(entry["exit_code"])

    record_demo_session(DemoToolState(command_runner=run_for_real))
    manifest = {
        "note": (
            "Real pytest/ruff runs of the shipped project as edited by the demo session, "
            "written by `python -m cachepilot_bench.demo_workload._capture`; tree = sha256[:16] of "
            "each .py/.toml file of the workspace at the time of the run."
        ),
        "runs": runs,
    }
    (outputs / "captured.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    return runs


def _run_real(command: str, state: DemoToolState, outputs: Path, number: int) -> dict[str, Any]:
    words = shlex.split(command)
    with tempfile.TemporaryDirectory(prefix="cachepilot-demo-") as workdir:
        for rel, text in state.files.items():
            path = Path(workdir, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "COLUMNS": "100",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": workdir if state.installed else "",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        proc = subprocess.run(
            _argv(words), cwd=workdir, env=env, capture_output=True, text=True, check=False
        )
        text = _normalize(proc.stdout + proc.stderr, workdir)
    name = f"{words[0]}_{number:02d}.log"
    (outputs / name).write_text(text, encoding="utf-8")
    return {
        "command": command,
        "installed": state.installed,
        "tree": state.tree_digest(),
        "output": name,
        "exit_code": proc.returncode,
    }


def main() -> None:
    """Capture and print one line per run."""
    for run in capture():
        print(f"{run['output']:<16} exit {run['exit_code']}  {run['command']}")


if __name__ == "__main__":
    main()

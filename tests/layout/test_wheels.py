"""The product's wheels hold no measurement code: no bench, trace, replay or demo module."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {
    "cachepilot": "cachepilot",
    "cachepilot-langgraph": "cachepilot_langgraph",
    "cachepilot-openai-agents": "cachepilot_agents",
}
# A path part naming measurement code (`cachepilot_agents/tracing.py` is the product's own).
MEASUREMENT = re.compile(r"bench|traces|demo|replay|calibrat|memory_eval|synthetic|peers")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    out = tmp_path_factory.mktemp("wheels")
    found: dict[str, list[str]] = {}
    for package, module in PRODUCT.items():
        subprocess.run(
            [uv, "build", "--wheel", "--package", package, "--out-dir", str(out), "--quiet"],
            cwd=ROOT,
            check=True,
            timeout=300,
            capture_output=True,
        )
        (wheel,) = out.glob(f"{package.replace('-', '_')}-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            found[module] = [
                f"{name}\n{archive.read(name).decode('utf-8')}" if name.endswith(".py") else name
                for name in archive.namelist()
            ]
    return found


@pytest.mark.parametrize("module", sorted(PRODUCT.values()))
def test_the_wheel_holds_no_measurement_code(wheels: dict[str, list[str]], module: str) -> None:
    entries = wheels[module]
    names = [entry.split("\n", 1)[0] for entry in entries]
    assert f"{module}/__init__.py" in names
    assert [n for n in names if MEASUREMENT.search(n)] == []
    importing = [
        entry.split("\n", 1)[0]
        for entry in entries
        if re.search(r"^\s*(from|import) cachepilot_bench\b", entry, re.MULTILINE)
    ]
    assert importing == []


def test_the_pattern_flags_measurement_paths() -> None:
    for name in (
        "cachepilot/bench/harness.py",
        "cachepilot/traces/openhands.py",
        "cachepilot/sim/replay.py",
        "cachepilot_langgraph/demo.py",
        "cachepilot/sim/calibrate.py",
    ):
        assert MEASUREMENT.search(name), name
    assert not MEASUREMENT.search("cachepilot_agents/tracing.py")

"""Distributions: license in every wheel and sdist, metadata, each package's own README, the
encoding files shipped with the core."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "cachepilot": ROOT / "packages" / "core",
    "cachepilot_langgraph": ROOT / "packages" / "langgraph_plugin",
    "cachepilot_openai_agents": ROOT / "packages" / "openai_agents_plugin",
    "cachepilot_bench": ROOT / "packages" / "bench",
}


def test_each_package_carries_the_repository_license() -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License")
    for folder in PACKAGES.values():
        assert (folder / "LICENSE").read_text(encoding="utf-8") == license_text, folder


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--all-packages", "--out-dir", str(out), "--quiet"],
        cwd=ROOT,
        check=True,
        timeout=600,
        capture_output=True,
    )
    return out


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_wheel_and_sdist_contents_and_metadata(dist: Path, name: str) -> None:
    (wheel,) = dist.glob(f"{name}-*.whl")
    (sdist,) = dist.glob(f"{name}-*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        files = archive.namelist()
        (meta_name,) = [f for f in files if f.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(meta_name).decode("utf-8"))
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files)
    with tarfile.open(sdist) as archive:
        assert any(m.name.endswith("/LICENSE") for m in archive.getmembers())
    assert metadata["License-Expression"] == "MIT"
    assert "LICENSE" in metadata.get_all("License-File", [])
    classifiers = metadata.get_all("Classifier", [])
    assert (
        "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.11" in classifiers
    )
    readme = (PACKAGES[name] / "README.md").read_text(encoding="utf-8")
    assert metadata.get_payload().strip() == readme.strip()
    assert "See the repository README" not in readme and len(readme) > 1_000
    requires = metadata.get_all("Requires-Dist", [])
    if name == "cachepilot":
        assert "cachepilot/_encodings/o200k_base.tiktoken" in files
        assert "cachepilot/_encodings/cl100k_base.tiktoken" in files
        assert any(f.endswith("licenses/src/cachepilot/_encodings/NOTICE.md") for f in files)
    else:
        assert any(
            r.replace(" ", "") in ("cachepilot<0.2,>=0.1", "cachepilot>=0.1,<0.2") for r in requires
        ), requires

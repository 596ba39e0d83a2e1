"""Fetch a framework's sdist from the package index and build the venv its tests run in.

The venv holds the workspace's locked runtime packages (the cachepilot packages editable, the
framework at the version the workspace has) plus the suite's test tools at the versions the
sdist's own `uv.lock` pins, constrained by the workspace lock so that nothing under test moves.
The workspace's own environment and lock are never touched.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

from suites import Suite

__all__ = ["IndexUnreachable", "build_venv", "fetch_sdist", "installed_version", "pip_command"]

logger = logging.getLogger(__name__)

_PIP_TIMEOUT = 300
_INSTALL_TIMEOUT = 900


class IndexUnreachable(RuntimeError):
    """The package index could not be reached (or has no sdist of that version)."""


def installed_version(dist: str) -> str:
    """The version of `dist` in the environment running the harness (the workspace's)."""
    return importlib.metadata.version(dist)


def pip_command() -> list[str]:
    """A pip to download with: this interpreter's, else one on PATH."""
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, check=False
    )
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    python3 = shutil.which("python3")
    if python3:
        return [python3, "-m", "pip"]
    raise IndexUnreachable("no pip found to download the sdists with")


def uv_command() -> list[str]:
    """The uv to build venvs with."""
    found = shutil.which("uv")
    if found:
        return [found]
    return [sys.executable, "-m", "uv"]


def _safe_members(archive: tarfile.TarFile, dest: Path) -> list[tarfile.TarInfo]:
    """Archive members that stay inside `dest` (no absolute paths, no `..`, no links out)."""
    root = dest.resolve()
    kept = []
    for member in archive.getmembers():
        target = (dest / member.name).resolve()
        if not target.is_relative_to(root) or member.issym() or member.islnk():
            continue
        kept.append(member)
    return kept


def fetch_sdist(dist: str, version: str, cache: Path) -> Path:
    """Download `dist==version` as an sdist (once) and return its extracted folder.

    Raises:
        IndexUnreachable: pip could not download it.
    """
    downloads = cache / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    stem = f"{dist.replace('-', '_').lower()}-{version}"
    archives = [p for p in downloads.glob("*.tar.gz") if p.name.lower() == f"{stem}.tar.gz"]
    if not archives:
        command = [
            *pip_command(),
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"{dist}=={version}",
            "--dest",
            str(downloads),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=_PIP_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise IndexUnreachable(f"pip download {dist}=={version} timed out") from exc
        archives = [p for p in downloads.glob("*.tar.gz") if p.name.lower() == f"{stem}.tar.gz"]
        if done.returncode != 0 or not archives:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise IndexUnreachable(f"pip download {dist}=={version} failed: {' | '.join(tail)}")
    archive = archives[0]
    target = cache / "src" / stem
    if not (target / "pyproject.toml").exists():
        staging = cache / "src" / f".{stem}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(staging, members=_safe_members(tar, staging), filter="data")
        inner = [p for p in staging.iterdir() if p.is_dir()]
        if len(inner) != 1:
            raise RuntimeError(f"unexpected layout in {archive.name}")
        shutil.rmtree(target, ignore_errors=True)
        inner[0].rename(target)
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _locked_versions(sdist: Path) -> dict[str, str]:
    """Package versions pinned by the sdist's own `uv.lock` (empty when it has none)."""
    lock = sdist / "uv.lock"
    if not lock.exists():
        return {}
    data = tomllib.loads(lock.read_text(encoding="utf-8"))
    versions: dict[str, str] = {}
    for package in data.get("package", []):
        name, version = package.get("name"), package.get("version")
        if isinstance(name, str) and isinstance(version, str):
            versions.setdefault(name.lower(), version)
    return versions


def _workspace_pins(workspace: Path) -> str:
    """The workspace lock as requirements (cachepilot packages editable, no dev tools)."""
    done = subprocess.run(
        [
            *uv_command(),
            "export",
            "--frozen",
            "--no-hashes",
            "--no-dev",
            "--no-header",
            "--no-annotate",
        ],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=True,
        timeout=_PIP_TIMEOUT,
    )
    return done.stdout


def build_venv(suite: Suite, sdist: Path, workspace: Path, cache: Path) -> Path:
    """The venv `suite`'s tests run in (rebuilt only when its inputs changed); its python."""
    venv = cache / f"venv-{suite.name}"
    python = venv / "bin" / "python"
    pins = _workspace_pins(workspace)
    locked = _locked_versions(sdist)
    tools = [f"{t}=={locked[t]}" if t in locked else t for t in suite.tools]
    stamp_text = "\n".join([sys.version, pins, *tools])
    stamp = hashlib.sha256(stamp_text.encode()).hexdigest()
    stamp_file = venv / ".compat-stamp"
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    logger.info("building %s", venv)
    shutil.rmtree(venv, ignore_errors=True)
    uv = uv_command()
    subprocess.run(
        [*uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        check=True,
        timeout=_INSTALL_TIMEOUT,
    )
    requirements = cache / f"requirements-{suite.name}.txt"
    constraints = cache / f"constraints-{suite.name}.txt"
    requirements.write_text(pins, encoding="utf-8")
    constraints.write_text(
        "".join(line + "\n" for line in pins.splitlines() if not line.startswith("-e")),
        encoding="utf-8",
    )
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    for args in (
        ["-r", str(requirements)],
        ["-c", str(constraints), *tools],
    ):
        try:
            subprocess.run(
                [*uv, "pip", "install", "--quiet", *args],
                cwd=workspace,
                env=env,
                check=True,
                timeout=_INSTALL_TIMEOUT,
            )
        except subprocess.CalledProcessError as exc:
            raise IndexUnreachable(f"installing the {suite.name} test venv failed") from exc
    stamp_file.write_text(stamp)
    return python

"""Installing the real clients into the suite's scratch cache, never into the project's lock.

npm clients go into one `npm/` folder (`npm install` of the pinned versions); each Python
client gets its own virtual environment made with `uv` (its dependencies would clash with the
project's and with each other's). A stamp file records what is installed, so a second run
reuses it. An unreachable registry raises `RegistryUnreachableError` (the suite skips).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

__all__ = [
    "AIDER",
    "CLAUDE_CODE",
    "CODEX",
    "GEMINI_CLI",
    "MINI_SWE_AGENT",
    "NPM_PACKAGES",
    "OPENCODE",
    "PYDANTIC_AI",
    "VENVS",
    "InstallError",
    "RegistryUnreachableError",
    "install_npm",
    "install_venv",
]

CLAUDE_CODE = "2.1.332"
CODEX = "0.171.0"
OPENCODE = "1.18.33"
GEMINI_CLI = "0.61.0"
MINI_SWE_AGENT = "2.4.6"
AIDER = "0.86.2"
PYDANTIC_AI = "2.68.0"
NPM_PACKAGES = {
    "@anthropic-ai/claude-code": CLAUDE_CODE,
    "@openai/codex": CODEX,
    "opencode-ai": OPENCODE,
    "@google/gemini-cli": GEMINI_CLI,
}
"""Claude Code 2.1 ships its native binary in a per-platform optional dependency; the
`claude` bin of the main package starts it."""
VENVS = {
    "mini-swe-agent": [f"mini-swe-agent=={MINI_SWE_AGENT}"],
    "aider": [f"aider-chat=={AIDER}"],
    "pydantic-ai": [f"pydantic-ai-slim[openai,anthropic]=={PYDANTIC_AI}"],
}
"""Per Python client: the requirements of its own virtual environment."""


class InstallError(RuntimeError):
    """A client could not be installed."""


class RegistryUnreachableError(InstallError):
    """The package registry could not be reached (the suite skips)."""


def _tail(text: str, limit: int = 3000) -> str:
    return text[-limit:]


_INSTALL = threading.Lock()
"""One install at a time (clients run side by side and share the install folders)."""


def _npm_reachable() -> bool:
    try:
        done = subprocess.run(
            ["npm", "view", f"@anthropic-ai/claude-code@{CLAUDE_CODE}", "version"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and CLAUDE_CODE in done.stdout


def install_npm(cache: Path) -> Path:
    """The npm clients' bin folder, installing the pinned versions when missing."""
    with _INSTALL:
        return _install_npm(cache)


def _install_npm(cache: Path) -> Path:
    root = cache / "npm"
    bins = root / "node_modules" / ".bin"
    stamp = root / "installed.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == NPM_PACKAGES and bins.is_dir():
        return bins
    if shutil.which("npm") is None:
        raise InstallError("npm is not installed")
    if not _npm_reachable():
        raise RegistryUnreachableError("the npm registry cannot be reached")
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text('{"name": "cachepilot-real-clients", "private": true}\n')
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"]
        + [f"{name}@{version}" for name, version in NPM_PACKAGES.items()],
        cwd=root,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise InstallError(f"npm install failed: {_tail(done.stderr)}")
    stamp.write_text(json.dumps(NPM_PACKAGES))
    return bins


def install_venv(cache: Path, name: str) -> Path:
    """The python of client `name`'s own venv (`VENVS`), installing it when missing."""
    with _INSTALL:
        return _install_venv(cache, name, VENVS[name])


def _install_venv(cache: Path, name: str, requirements: list[str]) -> Path:
    venv = cache / name
    python = venv / "bin" / "python"
    stamp = venv / "installed.txt"
    wanted = "\n".join(requirements)
    if stamp.is_file() and stamp.read_text() == wanted and python.is_file():
        return python
    uv = shutil.which("uv")
    if uv is None:
        raise InstallError("uv is not installed")
    steps = [
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        [uv, "pip", "install", "--quiet", "--python", str(python), *requirements],
    ]
    for step in steps:
        done = subprocess.run(step, check=False, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            message = _tail(done.stderr)
            if any(s in message for s in ("Failed to fetch", "dns error", "Could not connect")):
                raise RegistryUnreachableError(f"PyPI cannot be reached: {message[-300:]}")
            raise InstallError(f"installing {name} failed: {message}")
    stamp.write_text(wanted)
    return python

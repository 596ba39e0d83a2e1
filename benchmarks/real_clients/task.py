"""The coding task every client runs: a scratch repository and what it must look like after.

The repository holds a 150 KB build log whose one error names a timeout that is too small, a
3,000-line settings module, and a check script. The task: list the files, read the log, read
the module, grep for the setting, fix it, run the check, answer. The scripted model
(`scripted.py`) drives the steps; the real client executes them on these files.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

__all__ = [
    "EDIT_NEW",
    "EDIT_OLD",
    "FINAL_ANSWER",
    "LOG_PATH",
    "MODULE_PATH",
    "PROMPT",
    "STEPS",
    "git_init",
    "make_repo",
    "snapshot",
]

LOG_PATH = "build.log"
MODULE_PATH = "src/app/limits.py"
CHECK_PATH = "tests/check.py"
EDIT_OLD = "REQUEST_TIMEOUT = 5"
EDIT_NEW = "REQUEST_TIMEOUT = 30"
STEPS = ("list", "log", "read", "grep", "edit", "run")
"""Tool steps in order; the final answer follows the last one."""
FINAL_ANSWER = (
    "Fixed: REQUEST_TIMEOUT in src/app/limits.py was 5 s, below the 30 s minimum the build "
    "log reports; it is now 30 and tests/check.py passes."
)
PROMPT = (
    "The build log in this repository reports an error. Find the setting it is about, fix it, "
    "run tests/check.py and tell me what you changed."
)
_TIMEOUT_LINE = 1500
_IGNORED = (".git", "__pycache__", ".codex", ".claude", ".aider.tags.cache.v4")
"""Client state folders (aider's tag cache, SQLite, differs byte-wise between runs)."""


def _build_log() -> str:
    lines: list[str] = []
    i = 0
    while sum(len(x) + 1 for x in lines) < 150_000:
        i += 1
        if i == 1711:
            lines.append(
                f"[{i:05d}] ERROR config check: REQUEST_TIMEOUT=5 in {MODULE_PATH} is below "
                "the minimum of 30 seconds"
            )
        elif i % 250 == 0:
            lines.append(f"[{i:05d}] warning: module_{i % 89:02d} uses a deprecated flag -O1")
        else:
            lines.append(f"[{i:05d}] CC src/app/module_{i % 97:02d}.c -o build/m{i:05d}.o ... ok")
    return "\n".join(lines) + "\n"


def _module() -> str:
    lines = ['"""Limits of the app (generated)."""', ""]
    for n in range(3, 3001):
        if n == _TIMEOUT_LINE:
            lines.append(EDIT_OLD)
        else:
            lines.append(f"LIMIT_{n:04d} = {n * 7 % 1000}")
    return "\n".join(lines) + "\n"


_CHECK = """\
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))
from app import limits

if limits.REQUEST_TIMEOUT >= 30:
    print(f"check passed: REQUEST_TIMEOUT={limits.REQUEST_TIMEOUT}")
else:
    print(f"check failed: REQUEST_TIMEOUT={limits.REQUEST_TIMEOUT} < 30")
    sys.exit(1)
"""


def make_repo(root: Path) -> Path:
    """Write the task's files under `root` (created) and return it."""
    files = {
        "README.md": "# app\n\nA small app. Settings live in src/app/limits.py.\n",
        LOG_PATH: _build_log(),
        MODULE_PATH: _module(),
        "src/app/__init__.py": "",
        CHECK_PATH: _CHECK,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


GIT_DATE = "2026-01-05T09:00:00+00:00"
"""Author and commit date of the scratch repository's first commit (the same in every run, so
both runs see the same history)."""


def git_init(root: Path) -> None:
    """Make `root` a git repository with one commit of its files (a client must see this
    repository, never the one the suite runs from)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
        "GIT_AUTHOR_DATE": GIT_DATE,
        "GIT_COMMITTER_DATE": GIT_DATE,
    }
    for command in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "Initial commit"],
    ):
        subprocess.run(command, cwd=root, env=env, check=True, capture_output=True)


def snapshot(root: Path) -> dict[str, str]:
    """Digest of every task file under `root` (client state folders left out)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not any(part in _IGNORED for part in rel.parts):
            out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out

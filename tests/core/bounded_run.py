"""Run a snippet in a fresh interpreter with a time limit: a runaway (a regex or a pass that
never returns while holding the interpreter lock) fails the test instead of hanging it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

__all__ = ["run_bounded"]


def run_bounded(code: str, timeout: float = 60.0, memory_mb: int | None = 2_048) -> str:
    """Run `code` with this interpreter; its stdout. Fails the test on a timeout or an error.

    `memory_mb` caps the child's address space, so a blow-up fails fast instead of swapping.
    """
    preexec = None
    if memory_mb is not None and sys.platform.startswith("linux"):
        import resource

        limit = memory_mb * 1024 * 1024

        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            preexec_fn=preexec,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish within {timeout:g} s")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout

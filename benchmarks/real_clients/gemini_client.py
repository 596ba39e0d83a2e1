"""Gemini CLI: `gemini -p --yolo` on the Gemini API (`generateContent`, `countTokens`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from client_base import TIMEOUT, ClientRun, Restart, json_run, quiet_env, tail
from install import install_npm
from task import PROMPT

__all__ = ["run_gemini_cli"]

_GEMINI_SETTINGS = {
    # `-p` needs the auth type named in 0.61 ("Invalid auth method selected" otherwise).
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
}


def run_gemini_cli(cache: Path, root: str, repo: Path, home: Path, _restart: Restart) -> ClientRun:
    """`gemini -p --yolo` with GOOGLE_GEMINI_BASE_URL, a dummy key and its settings."""
    bins = install_npm(cache)
    env = quiet_env(home)
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(_GEMINI_SETTINGS))
    env.update(GOOGLE_GEMINI_BASE_URL=root, GEMINI_API_KEY="gm-dummy", GEMINI_CLI_NO_RELAUNCH="1")
    done = subprocess.run(
        [
            str(bins / "gemini"),
            "-p",
            PROMPT,
            "--yolo",
            "--skip-trust",
            "-m",
            "gemini-2.5-flash",
            "--output-format",
            "json",
        ],
        cwd=repo,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    log = tail(done.stdout + done.stderr)
    return json_run(done.returncode, done.stdout, log, answer="response", error="error")

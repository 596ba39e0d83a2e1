"""OpenCode (`opencode run`) on the task, on an OpenAI-compatible provider or on Anthropic.

OpenCode 1.18 ships a native binary per platform (npm optional dependencies of `opencode-ai`,
installed with the other npm clients by `install.py`). Its settings come from
`OPENCODE_CONFIG_CONTENT` (a JSON config): one provider pointed at the base URL, its model the
default, every tool allowed without asking (`permission`), sharing and auto-update off. A
private `HOME` / `XDG_*` keeps its state, logs and the provider packages it fetches from npm
at first use (`@ai-sdk/openai-compatible`, `@ai-sdk/anthropic`) out of the user's folders;
`OPENCODE_DISABLE_MODELS_FETCH` keeps it from downloading the model catalogue.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from client_base import LONG_TIMEOUT, TIMEOUT, ClientRun, Restart, quiet_env, tail
from install import install_npm
from long_session import LONG_PROMPT
from task import PROMPT

__all__ = ["PROVIDERS", "opencode", "opencode_config"]

PROVIDERS = ("openai", "anthropic")


def opencode_config(provider: str, root: str) -> dict[str, Any]:
    """OpenCode's config for `provider` (`openai`: an OpenAI-compatible provider on Chat
    Completions; `anthropic`: its Anthropic provider) at base `root`. The models' windows are
    given (the catalogue it would download says the same): OpenCode compacts by them."""
    if provider == "anthropic":
        providers = {
            "anthropic": {
                "options": {"baseURL": f"{root}/v1", "apiKey": "sk-ant-dummy"},
                "models": {
                    "claude-sonnet-4-5": {
                        "name": "Claude Sonnet 4.5",
                        "limit": {"context": 200_000, "output": 32_000},
                    }
                },
            }
        }
        model = "anthropic/claude-sonnet-4-5"
    else:
        providers = {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{root}/v1", "apiKey": "sk-dummy"},
                "models": {
                    "gpt-5.4-mini": {
                        "name": "GPT-5.4 mini",
                        "limit": {"context": 400_000, "output": 128_000},
                    }
                },
            }
        }
        model = "scripted/gpt-5.4-mini"
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": providers,
        "model": model,
        "small_model": model,
        "enabled_providers": list(providers),
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "share": "disabled",
        "autoupdate": False,
    }


def opencode(
    provider: str, *, long: bool = False
) -> Callable[[Path, str, Path, Path, Restart], ClientRun]:
    """A runner of `opencode run` on `provider` (one of `PROVIDERS`); `long` runs the long
    session (`long_session.py`) at OpenCode's defaults (it prunes and compacts by the model's
    200 K window)."""
    if provider not in PROVIDERS:
        raise ValueError(f"unknown OpenCode provider {provider!r}; known: {', '.join(PROVIDERS)}")

    def run(cache: Path, root: str, repo: Path, home: Path, _restart: Restart) -> ClientRun:
        bins = install_npm(cache)
        env = quiet_env(home)
        env.update(
            XDG_DATA_HOME=str(home / ".local" / "share"),
            XDG_CACHE_HOME=str(home / ".cache"),
            XDG_STATE_HOME=str(home / ".local" / "state"),
            OPENCODE_CONFIG_CONTENT=json.dumps(opencode_config(provider, root)),
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
            OPENCODE_DISABLE_SHARE="1",
            # No ~/.claude skills or CLAUDE.md from the machine (the home is private anyway).
            OPENCODE_DISABLE_CLAUDE_CODE="1",
        )
        done = subprocess.run(
            [str(bins / "opencode"), "run", "--format", "json", LONG_PROMPT if long else PROMPT],
            cwd=repo,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            # Its first run fetches the provider package from npm.
            timeout=LONG_TIMEOUT if long else TIMEOUT * 2,
            stdin=subprocess.DEVNULL,
        )
        return ClientRun(done.returncode, _answer(done.stdout), log=tail(done.stdout + done.stderr))

    return run


def _answer(stdout: str) -> str:
    """The text of the last assistant message in `opencode run --format json`'s events."""
    texts: list[str] = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        part = event.get("part") if isinstance(event, dict) else None
        if isinstance(part, dict) and part.get("type") == "text" and part.get("text"):
            texts.append(str(part["text"]))
    return texts[-1].strip() if texts else ""

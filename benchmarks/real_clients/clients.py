"""The real clients: installing them into the scratch cache and running them on the task.

Pinned versions (`CLAUDE_CODE`, `CODEX`, `GEMINI_CLI`, `MINI_SWE_AGENT`) are installed once into
`.cache/real_clients/` (ignored by git): npm packages with `npm install`, mini-swe-agent into
its own virtual environment with `uv`, never into the project's lock. Each runner gets a base
URL (the scripted upstream or the proxy in front of it), the scratch repository and a private
home folder, and returns what the client did: exit status, final answer, output tails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import agent_loop
from task import PROMPT

__all__ = [
    "CLAUDE_CODE",
    "CLIENTS",
    "CODEX",
    "GEMINI_CLI",
    "MINI_SWE_AGENT",
    "Client",
    "ClientRun",
    "InstallError",
    "RegistryUnreachableError",
]

CLAUDE_CODE = "2.0.50"
CODEX = "0.171.0"
GEMINI_CLI = "0.61.0"
MINI_SWE_AGENT = "2.4.6"
TIMEOUT = 240


class InstallError(RuntimeError):
    """A client could not be installed."""


class RegistryUnreachableError(InstallError):
    """The package registry could not be reached (the suite skips)."""


@dataclass(slots=True)
class ClientRun:
    """What one client run did."""

    returncode: int
    answer: str
    executed: list[tuple[str, str]] = field(default_factory=list)
    """Tool calls the client reported running (the in-process loops only)."""
    log: str = ""
    """Tail of the client's output, for failure messages."""


@dataclass(frozen=True, slots=True)
class Client:
    """One real client."""

    name: str
    api: str
    """`anthropic`, `chat`, `responses` or `gemini`: the wire format it speaks."""
    plan: str
    """Key of its tool plan in `scripted.PLANS`."""
    needs: str
    """`npm`, `pypi` (its own venv) or `project` (the project's environment)."""
    run: Callable[[Path, str, Path, Path], ClientRun]
    """`(cache, base root URL, repo, home) -> ClientRun`."""
    profile: str | None = None
    """Provider cache profile of the upstream and the proxy (None: the API's default)."""


def _tail(text: str, limit: int = 3000) -> str:
    return text[-limit:]


def _registry_reachable() -> bool:
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


_INSTALL = threading.Lock()
"""One install at a time (clients run side by side and share the install folders)."""


def install_npm(cache: Path) -> Path:
    """The npm clients' bin folder, installing the pinned versions when missing."""
    with _INSTALL:
        return _install_npm(cache)


def _install_npm(cache: Path) -> Path:
    root = cache / "npm"
    bins = root / "node_modules" / ".bin"
    stamp = root / "installed.json"
    wanted = {
        "@anthropic-ai/claude-code": CLAUDE_CODE,
        "@openai/codex": CODEX,
        "@google/gemini-cli": GEMINI_CLI,
    }
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted and bins.is_dir():
        return bins
    if shutil.which("npm") is None:
        raise InstallError("npm is not installed")
    if not _registry_reachable():
        raise RegistryUnreachableError("the npm registry cannot be reached")
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text('{"name": "cachepilot-real-clients", "private": true}\n')
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"]
        + [f"{name}@{version}" for name, version in wanted.items()],
        cwd=root,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise InstallError(f"npm install failed: {_tail(done.stderr)}")
    stamp.write_text(json.dumps(wanted))
    return bins


def install_mini_swe_agent(cache: Path) -> Path:
    """The python of mini-swe-agent's own venv, installing the pinned version when missing."""
    with _INSTALL:
        return _install_mini_swe_agent(cache)


def _install_mini_swe_agent(cache: Path) -> Path:
    venv = cache / "mini-swe-agent"
    python = venv / "bin" / "python"
    stamp = venv / "installed.txt"
    if stamp.is_file() and stamp.read_text() == MINI_SWE_AGENT and python.is_file():
        return python
    uv = shutil.which("uv")
    if uv is None:
        raise InstallError("uv is not installed")
    steps = [
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            f"mini-swe-agent=={MINI_SWE_AGENT}",
        ],
    ]
    for step in steps:
        done = subprocess.run(step, check=False, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise InstallError(f"installing mini-swe-agent failed: {_tail(done.stderr)}")
    stamp.write_text(MINI_SWE_AGENT)
    return python


def _quiet_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), NO_COLOR="1")
    return env


def run_claude_code(cache: Path, root: str, repo: Path, home: Path) -> ClientRun:
    """`claude -p` with ANTHROPIC_BASE_URL, a dummy key and nonessential traffic off."""
    bins = install_npm(cache)
    env = _quiet_env(home)
    env.update(
        ANTHROPIC_BASE_URL=root,
        ANTHROPIC_API_KEY="sk-ant-dummy",
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_BUG_COMMAND="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        BASH_MAX_OUTPUT_LENGTH="200000",
    )
    done = subprocess.run(
        [
            str(bins / "claude"),
            "-p",
            PROMPT,
            "--output-format",
            "json",
            # Root may not skip permissions: allow exactly the task's tools instead.
            "--allowedTools",
            "Bash,Read,Edit,Grep",
        ],
        cwd=repo,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    answer = ""
    try:
        result = json.loads(done.stdout)
        answer = str(result.get("result", ""))
        if result.get("is_error"):
            return ClientRun(1, answer, log=_tail(done.stdout + done.stderr))
    except ValueError:
        pass
    return ClientRun(done.returncode, answer, log=_tail(done.stdout + done.stderr))


_GEMINI_SETTINGS = {
    # `-p` needs the auth type named in 0.61 ("Invalid auth method selected" otherwise).
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
}


def run_gemini_cli(cache: Path, root: str, repo: Path, home: Path) -> ClientRun:
    """`gemini -p --yolo` with GOOGLE_GEMINI_BASE_URL, a dummy key and its settings."""
    bins = install_npm(cache)
    env = _quiet_env(home)
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
    answer = ""
    try:
        result = json.loads(done.stdout)
        answer = str(result.get("response", ""))
        if result.get("error"):
            return ClientRun(1, answer, log=_tail(done.stdout + done.stderr))
    except ValueError:
        pass
    return ClientRun(done.returncode, answer, log=_tail(done.stdout + done.stderr))


def run_codex(cache: Path, root: str, repo: Path, home: Path) -> ClientRun:
    """`codex exec` with a custom model provider on the Responses API."""
    bins = install_npm(cache)
    env = _quiet_env(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    env.update(CODEX_HOME=str(codex_home), CACHEPILOT_DUMMY_KEY="sk-dummy")
    last = home / "last-message.txt"
    provider = (
        f'{{name="scripted", base_url="{root}/v1", env_key="CACHEPILOT_DUMMY_KEY", '
        'wire_api="responses", request_max_retries=0, stream_max_retries=0}'
    )
    done = subprocess.run(
        [
            str(bins / "codex"),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-c",
            f"model_providers.scripted={provider}",
            "-c",
            "model_provider=scripted",
            "-c",
            "analytics.enabled=false",
            "-m",
            "gpt-5.5",
            "--output-last-message",
            str(last),
            PROMPT,
        ],
        cwd=repo,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    answer = last.read_text(encoding="utf-8").strip() if last.is_file() else ""
    return ClientRun(done.returncode, answer, log=_tail(done.stdout + done.stderr))


_MINI_DRIVER = textwrap.dedent(
    """\
    import json, sys
    from pathlib import Path
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import builtin_config_dir
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    base_url, repo, prompt, out = sys.argv[1:5]
    config = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())
    agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}
    model_config = dict(config.get("model") or {})
    model_config.update(
        model_name="openai/gpt-5.4-mini",
        model_kwargs={
            **(model_config.get("model_kwargs") or {}),
            "api_base": base_url,
            "api_key": "sk-dummy",
            "drop_params": True,
        },
        cost_tracking="ignore_errors",
    )
    environment = {**(config.get("environment") or {}), "cwd": repo}
    model, env = LitellmModel(**model_config), LocalEnvironment(**environment)
    agent = DefaultAgent(model, env, **agent_config)
    result = agent.run(prompt)
    Path(out).write_text(json.dumps(result))
    """
)


def run_mini_swe_agent(cache: Path, root: str, repo: Path, home: Path) -> ClientRun:
    """mini-swe-agent's default agent on litellm (Chat Completions, tool calling)."""
    python = install_mini_swe_agent(cache)
    env = _quiet_env(home)
    env.update(MSWEA_COST_TRACKING="ignore_errors", MSWEA_CONFIGURED="true", LITELLM_LOG="ERROR")
    driver = home / "mini_driver.py"
    driver.write_text(_MINI_DRIVER)
    out = home / "mini-result.json"
    done = subprocess.run(
        [str(python), str(driver), f"{root}/v1", str(repo), PROMPT, str(out)],
        cwd=repo,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    answer, code = "", done.returncode
    if out.is_file():
        result = json.loads(out.read_text())
        answer = str(result.get("submission", "")).strip()
        if result.get("exit_status") != "Submitted":
            code = code or 1
    return ClientRun(code, answer, log=_tail(done.stdout + done.stderr))


def _in_process(
    loop: Callable[[str, Path, str], agent_loop.LoopResult], suffix: str
) -> Callable[[Path, str, Path, Path], ClientRun]:
    def run(_cache: Path, root: str, repo: Path, _home: Path) -> ClientRun:
        try:
            result = loop(root + suffix, repo, PROMPT)
        except Exception as exc:  # the client's own error is the finding
            return ClientRun(1, "", log=f"{type(exc).__name__}: {exc}")
        return ClientRun(0, result.answer, executed=result.executed)

    return run


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client("claude-code", "anthropic", "claude-code", "npm", run_claude_code),
        Client("claude-code-parallel", "anthropic", "claude-code-parallel", "npm", run_claude_code),
        Client(
            "claude-code-1h",
            "anthropic",
            "claude-code",
            "npm",
            run_claude_code,
            profile="anthropic-1h",
        ),
        Client("codex", "responses", "codex", "npm", run_codex),
        Client("codex-parallel", "responses", "codex-parallel", "npm", run_codex),
        Client("mini-swe-agent", "chat", "mini-swe-agent", "pypi", run_mini_swe_agent),
        Client("gemini-cli", "gemini", "gemini-cli", "npm", run_gemini_cli),
        Client(
            "openai-chat",
            "chat",
            "python-parallel",
            "project",
            _in_process(agent_loop.run_chat, "/v1"),
        ),
        Client(
            "openai-responses",
            "responses",
            "python",
            "project",
            _in_process(agent_loop.run_responses, "/v1"),
        ),
        Client(
            "anthropic-python",
            "anthropic",
            "python-parallel",
            "project",
            _in_process(agent_loop.run_anthropic, ""),
        ),
    )
}

"""The real clients: each runner runs one client on the task of `task.py`.

Each runner gets the scratch cache (clients are installed there by `install.py`), a base URL
(the scripted upstream or the proxy in front of it), the scratch repository and a private home
folder, and returns what the client did: exit status, final answer, output tails. Per-client
settings (environment variables, settings files) are set and explained in its runner.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import agent_loop
from aider_client import aider
from client_base import (
    LONG_TIMEOUT,
    TIMEOUT,
    Client,
    ClientRun,
    Restart,
    json_run,
    quiet_env,
    tail,
)
from gemini_client import run_gemini_cli
from install import install_npm, install_venv
from long_session import LONG_PROMPT
from opencode_client import PROVIDERS, opencode
from pydantic_ai_client import SETUPS, pydantic_ai
from task import PROMPT

__all__ = ["CLIENTS", "Client", "ClientRun", "Restart"]


def claude_code(
    bash_max: int | None, *, long: bool = False, subagents: bool = False
) -> Callable[[Path, str, Path, Path, Restart], ClientRun]:
    """A runner of `claude -p`; `bash_max` sets how much Bash output it sends inline (None: its
    default, 30,000 characters, past which it saves the output to a file and sends a 2 KB
    preview with the path); `subagents` also allows its `Agent` tool (`subagents.py`)."""

    def run(cache: Path, root: str, repo: Path, home: Path, _restart: Restart) -> ClientRun:
        if long:  # a 200 K window (its default model has 1 M), so the long session compacts
            return run_claude_code(
                cache,
                root,
                repo,
                home,
                bash_max=bash_max,
                prompt=LONG_PROMPT,
                model="claude-sonnet-4-5",
                timeout=LONG_TIMEOUT,
            )
        tools = "Bash,Read,Edit,Grep" + (",Agent" if subagents else "")
        return run_claude_code(cache, root, repo, home, bash_max=bash_max, tools=tools)

    return run


def run_claude_code(
    cache: Path,
    root: str,
    repo: Path,
    home: Path,
    *,
    bash_max: int | None,
    prompt: str = PROMPT,
    model: str | None = None,
    timeout: int = TIMEOUT,
    tools: str = "Bash,Read,Edit,Grep",
) -> ClientRun:
    """`claude -p` with ANTHROPIC_BASE_URL, a dummy key and nonessential traffic off; `tools`
    are the tools it may use without asking."""
    bins = install_npm(cache)
    env = quiet_env(home)
    env.update(
        ANTHROPIC_BASE_URL=root,
        ANTHROPIC_API_KEY="sk-ant-dummy",
        # Its settings, sessions and saved tool outputs stay in the private home.
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_BUG_COMMAND="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    if model is not None:
        # The window it compacts by (the upstream does not refuse long prompts, so it must
        # know): the long session's 200 K.
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(LONG_WINDOW)
    if bash_max is not None:
        # 2.1 reads the inline cap from its settings (`bashOutputMaxChars`, clamped to
        # 4,000-128,000); `BASH_MAX_OUTPUT_LENGTH` alone only sizes the read-back window.
        settings = home / ".claude" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({"bashOutputMaxChars": bash_max}))
        env["BASH_MAX_OUTPUT_LENGTH"] = str(bash_max)
    done = subprocess.run(
        [
            str(bins / "claude"),
            "-p",
            prompt,
            "--output-format",
            "json",
            # Root may not skip permissions: allow exactly the task's tools instead.
            "--allowedTools",
            tools,
            *(["--model", model] if model else []),
        ],
        cwd=repo,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    log = tail(done.stdout + done.stderr)
    return json_run(done.returncode, done.stdout, log, answer="result", error="is_error")


def run_codex(cache: Path, root: str, repo: Path, home: Path, _restart: Restart) -> ClientRun:
    """`codex exec` with a custom model provider on the Responses API."""
    bins = install_npm(cache)
    env = quiet_env(home)
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
    return ClientRun(done.returncode, answer, log=tail(done.stdout + done.stderr))


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


def run_mini_swe_agent(
    cache: Path, root: str, repo: Path, home: Path, _restart: Restart
) -> ClientRun:
    """mini-swe-agent's default agent on litellm (Chat Completions, tool calling)."""
    python = install_venv(cache, "mini-swe-agent")
    env = quiet_env(home)
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
    return ClientRun(code, answer, log=tail(done.stdout + done.stderr))


def _in_process(
    loop: Callable[[str, Path, str], agent_loop.LoopResult], suffix: str
) -> Callable[[Path, str, Path, Path, Restart], ClientRun]:
    def run(_cache: Path, root: str, repo: Path, _home: Path, _restart: Restart) -> ClientRun:
        try:
            result = loop(root + suffix, repo, PROMPT)
        except Exception as exc:  # the client's own error is the finding
            return ClientRun(1, "", log=f"{type(exc).__name__}: {exc}")
        return ClientRun(0, result.answer, executed=result.executed)

    return run


CLAUDE_CODE_PROBES = ("messages.1.role: Input should be 'user' or 'assistant'",)
LARGE_BASH = 128_000
LONG_WINDOW = 200_000
"""The context window of the long sessions' model (claude-sonnet-4-5)."""
SHORT_COST_CAP = 1.005
"""A client that caps its own outputs, at its defaults: a short session costs at most 0.5 %
more through the proxy than straight."""
"""Inline Bash output of the larger-outputs variant (Claude Code's maximum); its plan prints
the last 120,000 characters of the log, which hold the error, so they reach the model whole."""

CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client(
            "claude-code",
            "anthropic",
            "claude-code",
            "npm",
            claude_code(None),
            probes=CLAUDE_CODE_PROBES,
            cost_cap=SHORT_COST_CAP,
        ),
        Client(
            "claude-code-large",
            "anthropic",
            "claude-code-large",
            "npm",
            claude_code(LARGE_BASH),
            probes=CLAUDE_CODE_PROBES,
            full=True,  # CI: claude-code-parallel has the same larger outputs
        ),
        Client(
            "claude-code-parallel",
            "anthropic",
            "claude-code-large-parallel",
            "npm",
            claude_code(LARGE_BASH),
            probes=CLAUDE_CODE_PROBES,
        ),
        Client(
            "claude-code-subagents",
            "anthropic",
            "claude-code-subagents",
            "npm",
            claude_code(LARGE_BASH, subagents=True),
            probes=CLAUDE_CODE_PROBES,
            full=True,  # two conversations in one run; CI: claude-code-parallel
        ),
        Client(
            "claude-code-1h",
            "anthropic",
            "claude-code-large",
            "npm",
            claude_code(LARGE_BASH),
            profile="anthropic-1h",
            probes=CLAUDE_CODE_PROBES,
            full=True,
        ),
        Client("codex", "responses", "codex", "npm", run_codex),
        Client("codex-parallel", "responses", "codex-parallel", "npm", run_codex, full=True),
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
        *(
            Client(
                f"pydantic-ai-{setup}",
                "anthropic" if setup == "anthropic" else "chat" if setup == "chat" else "responses",
                "python",
                "pypi",
                pydantic_ai(setup),
                full=setup != "responses-previous",  # CI: the stateful one
            )
            for setup in SETUPS
        ),
        *(
            Client(
                f"opencode-{provider}",
                "anthropic" if provider == "anthropic" else "chat",
                "opencode" if provider == "anthropic" else "opencode-patch",
                "npm",
                opencode(provider),
                cost_cap=SHORT_COST_CAP,
                full=True,  # not in the CI set (docs/real-clients.md)
            )
            for provider in PROVIDERS
        ),
        Client(
            "claude-code-long",
            "anthropic",
            "long-claude-code",
            "npm",
            claude_code(None, long=True),
            task="long",
            probes=CLAUDE_CODE_PROBES,
        ),
        Client(
            "opencode-long",
            "anthropic",
            "long-opencode",
            "npm",
            opencode("anthropic", long=True),
            task="long",
        ),
        Client("aider-openai", "chat", "aider", "pypi", aider("openai"), task="aider"),
        Client(
            "aider-anthropic",
            "anthropic",
            "aider",
            "pypi",
            aider("anthropic"),
            task="aider",
            full=True,  # CI: aider-openai runs the same session
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

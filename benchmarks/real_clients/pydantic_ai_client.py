"""pydantic-ai on the task: its `Agent` with the task's tools, in its own virtual environment.

The driver (`DRIVER`) runs in pydantic-ai's venv (`install.py`), imports the suite's
`agent_loop.execute` for the tools (the same five tools as the SDK loops, so the scripted model
drives it with the `python` plan) and writes the final output and the tool calls it ran to a
JSON file. Four setups, as users configure it:

- `chat`: `OpenAIChatModel` (Chat Completions).
- `responses`: `OpenAIResponsesModel`, the whole history resent on every request.
- `responses-previous`: `OpenAIResponsesModel` with `openai_previous_response_id="auto"`, the
  stateful mode: each request sends only the new items and names the response it follows.
- `anthropic`: `AnthropicModel` with its cache settings (`anthropic_cache_instructions`,
  `anthropic_cache_tool_definitions`, `anthropic_cache_messages`).
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

from client_base import TIMEOUT, ClientRun, Restart, json_run, quiet_env, tail
from install import install_venv
from task import PROMPT

__all__ = ["SETUPS", "pydantic_ai"]

SETUPS = ("chat", "responses", "responses-previous", "anthropic")

DRIVER = textwrap.dedent(
    """\
    import json, sys
    from pathlib import Path

    suite, setup, base, repo, prompt, out = sys.argv[1:7]
    sys.path.insert(0, suite)
    from agent_loop import SYSTEM, execute
    from pydantic_ai import Agent

    root = Path(repo)
    if setup == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
        from pydantic_ai.providers.anthropic import AnthropicProvider

        model = AnthropicModel(
            "claude-sonnet-4-5",
            provider=AnthropicProvider(base_url=base, api_key="sk-ant-dummy"),
        )
        settings = AnthropicModelSettings(
            anthropic_cache_instructions=True,
            anthropic_cache_tool_definitions=True,
            anthropic_cache_messages=True,
        )
    else:
        from pydantic_ai.models.openai import (
            OpenAIChatModel,
            OpenAIResponsesModel,
            OpenAIResponsesModelSettings,
        )
        from pydantic_ai.providers.openai import OpenAIProvider

        provider = OpenAIProvider(base_url=base + "/v1", api_key="sk-dummy")
        if setup == "chat":
            model, settings = OpenAIChatModel("gpt-5.4-mini", provider=provider), None
        else:
            model = OpenAIResponsesModel("gpt-5.4-mini", provider=provider)
            settings = OpenAIResponsesModelSettings()
            if setup == "responses-previous":
                settings = OpenAIResponsesModelSettings(openai_previous_response_id="auto")

    agent = Agent(model, instructions=SYSTEM, model_settings=settings, retries=0)
    executed = []

    def call(name, **kwargs):
        arguments = json.dumps(kwargs)
        executed.append([name, arguments])
        return execute(root, name, arguments)

    @agent.tool_plain
    def list_files() -> str:
        \"\"\"List the repository's files.\"\"\"
        return call("list_files")

    @agent.tool_plain
    def read_file(path: str) -> str:
        \"\"\"Read a file.\"\"\"
        return call("read_file", path=path)

    @agent.tool_plain
    def grep(pattern: str, path: str) -> str:
        \"\"\"Search files for a regular expression (line numbers shown).\"\"\"
        return call("grep", pattern=pattern, path=path)

    @agent.tool_plain
    def edit_file(path: str, old: str, new: str) -> str:
        \"\"\"Replace one exact occurrence of `old` with `new` in a file.\"\"\"
        return call("edit_file", path=path, old=old, new=new)

    @agent.tool_plain
    def run(command: str) -> str:
        \"\"\"Run a shell command in the repository.\"\"\"
        return call("run", command=command)

    result = agent.run_sync(prompt)
    Path(out).write_text(json.dumps({"output": result.output, "executed": executed}))
    """
)


def pydantic_ai(setup: str) -> Callable[[Path, str, Path, Path, Restart], ClientRun]:
    """A runner of pydantic-ai in `setup` (one of `SETUPS`)."""
    if setup not in SETUPS:
        raise ValueError(f"unknown pydantic-ai setup {setup!r}; known: {', '.join(SETUPS)}")

    def run(cache: Path, root: str, repo: Path, home: Path, _restart: Restart) -> ClientRun:
        python = install_venv(cache, "pydantic-ai")
        env = quiet_env(home)
        driver = home / "pydantic_ai_driver.py"
        driver.write_text(DRIVER)
        out = home / "pydantic-ai-result.json"
        suite = str(Path(__file__).resolve().parent)
        done = subprocess.run(
            [str(python), str(driver), suite, setup, root, str(repo), PROMPT, str(out)],
            cwd=repo,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        if not out.is_file():
            return ClientRun(done.returncode or 1, "", log=tail(done.stdout + done.stderr))
        log = tail(done.stdout + done.stderr)
        run = json_run(done.returncode, out.read_text(), log, answer="output")
        run.answer = run.answer.strip()
        return run

    return run

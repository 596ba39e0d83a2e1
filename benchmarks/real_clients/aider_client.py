"""aider on four edit turns: no tools, the chat files and repo map sent as messages.

aider (its own venv, `install.py`) runs through its scripting interface (`Coder.create` and
`coder.run(message)`, what its CLI's chat loop calls) with the settings its CLI derives from the
flags a user passes: `--model openai/gpt-4.1`, or `--model anthropic/claude-sonnet-4-20250514
--cache-prompts` (prompt caching on, the repo map refreshed only when the files change). The
session: `src/app/limits.py` added to the chat, edit turns 1 and 2, the proxy restarted in
place (same port and store), edit turn 3; then a second session of aider (a new process) one
calendar day later makes edit 4. aider prints the date into its system prompt
(`- Current date: ...` from `aider.coders.base_coder.datetime`); the driver shifts that
module's clock by one day for the second session, so its requests must carry the new date.

The scripted model (`AiderModel`) answers each edit turn with a SEARCH/REPLACE block built from
what the request shows: the line it must change is searched in the request's text, so a request
that lost the file gets an answer whose SEARCH part cannot apply. aider's side calls (commit
messages from its weak model) get a fixed one-line answer.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from client_base import TIMEOUT, ClientRun, Restart, quiet_env, tail
from install import install_venv
from task import MODULE_PATH

from cachepilot.messages import Message
from cachepilot.sim.render import Request
from cachepilot.wire import Api

__all__ = [
    "EDITS",
    "AiderModel",
    "aider",
    "applied_edits",
    "is_edit_request",
    "request_date",
]

EDITS: tuple[tuple[str, int], ...] = (
    ("LIMIT_0100", 9001),
    ("LIMIT_1200", 9002),
    ("LIMIT_2300", 9003),
    ("LIMIT_2900", 9004),
)
"""(setting, new value) of each edit turn, in order."""
TURNS: tuple[tuple[int, ...], ...] = ((0, 1), (2,), (3,))
"""Edit turns per stretch: before the restart, after it, the second session."""
COMMIT_MESSAGE = "Update limits"
_ASK = re.compile(r"Edit (\d): set (LIMIT_\d{4}) to (\d+) in " + re.escape(MODULE_PATH))
MODELS = {
    "openai": "openai/gpt-4.1",
    "anthropic": "anthropic/claude-sonnet-4-20250514",
}


def prompt(k: int) -> str:
    """The user's message of edit turn `k`."""
    name, value = EDITS[k]
    return f"Edit {k + 1}: set {name} to {value} in {MODULE_PATH}. Keep everything else."


def applied_edits(module_text: str) -> int:
    """How many of the edits the module shows."""
    return sum(f"\n{name} = {value}\n" in module_text for name, value in EDITS)


def _system_text(body: Mapping[str, Any]) -> str:
    parts: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts.extend(str(b.get("text", "")) for b in system if isinstance(b, Mapping))
    for message in body.get("messages") or []:
        if isinstance(message, Mapping) and message.get("role") == "system":
            content = message.get("content")
            parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


def is_edit_request(body: Mapping[str, Any]) -> bool:
    """Whether `body` is one of aider's edit turns (its system prompt asks for SEARCH/REPLACE
    blocks; the commit-message calls do not)."""
    return "SEARCH/REPLACE" in _system_text(body)


def request_date(body: Mapping[str, Any]) -> str | None:
    """The `- Current date:` the model reads in the request, if any: the date aider put in
    its system prompt or, where the proxy replaced it by a placeholder (`{{date_1}}`), the
    value the request gives that placeholder (`{{date_1}} = 2026-11-28`)."""
    found = re.search(r"Current date: (\d{4}-\d{2}-\d{2}|\{\{\w+\}\})", _system_text(body))
    if found is None:
        return None
    value = found.group(1)
    if not value.startswith("{{"):
        return value
    given = re.findall(re.escape(value) + r" = (\d{4}-\d{2}-\d{2})", json.dumps(body))
    return given[-1] if given else None


@dataclass(slots=True)
class AiderModel:
    """A `Responder` for `ReplayProvider` playing the edit turns."""

    replies: list[str] = field(default_factory=list)
    """`edit k`, `blind k` (the line was not in view) or `side`, per reply."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, api: Api, body: Mapping[str, Any], request: Request) -> Message:
        """The reply to one model request."""
        if not is_edit_request(body):
            return self._reply("side", COMMIT_MESSAGE)
        last_user = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
        ask = _ASK.search(last_user)
        if ask is None:
            return self._reply("side", "Ok.")
        k, name, value = int(ask.group(1)), ask.group(2), ask.group(3)
        seen = "\n".join(m.text for m in request.messages) + "\n" + (request.system or "")
        line = re.search(rf"^{name} = (\d+)$", seen, re.MULTILINE)
        if line is None:
            # The file is not in view: the model can only guess, and aider will refuse the edit.
            text = (
                f"{MODULE_PATH}\n```python\n<<<<<<< SEARCH\n{name} = ?\n=======\n"
                f"{name} = {value}\n>>>>>>> REPLACE\n```\n"
            )
            return self._reply(f"blind {k}", text)
        text = (
            f"I'll set {name} to {value}.\n\n{MODULE_PATH}\n```python\n<<<<<<< SEARCH\n"
            f"{name} = {line.group(1)}\n=======\n{name} = {value}\n>>>>>>> REPLACE\n```\n"
        )
        return self._reply(f"edit {k}", text)

    def _reply(self, what: str, text: str) -> Message:
        with self._lock:
            self.replies.append(what)
        return Message("assistant", text)


DRIVER = textwrap.dedent(
    """\
    import datetime as _dt, json, os, sys, time
    from pathlib import Path

    api, root, repo, model_name, turns, days, control = sys.argv[1:8]
    os.chdir(repo)
    if api == "anthropic":
        os.environ["ANTHROPIC_API_KEY"] = "sk-ant-dummy"
        os.environ["ANTHROPIC_API_BASE"] = root
    else:
        os.environ["OPENAI_API_KEY"] = "sk-dummy"
        os.environ["OPENAI_API_BASE"] = root + "/v1"
    from aider.coders import Coder, base_coder
    from aider.io import InputOutput
    from aider.models import Model

    class _Later(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return _dt.datetime.now(tz) + _dt.timedelta(days=int(days))

    base_coder.datetime = _Later  # aider's date source for its system prompt
    cache = api == "anthropic"
    io = InputOutput(yes=True, pretty=False, fancy_input=False)
    coder = Coder.create(
        main_model=Model(model_name),
        io=io,
        fnames=[sys.argv[8]],
        cache_prompts=cache,  # --cache-prompts
        map_refresh="files" if cache else "auto",  # what the CLI sets with --cache-prompts
        stream=True,
    )
    control = Path(control)
    for n, stretch in enumerate(json.loads(turns)):
        if n:
            (control / "paused").write_text(str(n))
            while not (control / f"resume-{n}").exists():  # the suite restarts the proxy
                time.sleep(0.1)
        for message in stretch:
            coder.run(with_message=message)
    """
)


def aider(api: str) -> Callable[[Path, str, Path, Path, Restart], ClientRun]:
    """A runner of aider's session on `api` (`openai` or `anthropic`)."""
    if api not in MODELS:
        raise ValueError(f"unknown aider setup {api!r}; known: {', '.join(MODELS)}")

    def run(cache: Path, root: str, repo: Path, home: Path, restart: Restart) -> ClientRun:
        python = install_venv(cache, "aider")
        env = quiet_env(home)
        # No network at run time: litellm's bundled model prices, no analytics or update check.
        env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", AIDER_ANALYTICS="false")
        driver = home / "aider_driver.py"
        driver.write_text(DRIVER)
        # aider commits each edit: git needs an identity in the private home.
        (home / ".gitconfig").write_text("[user]\n\tname = dev\n\temail = dev@example.com\n")
        # A fresh (empty) model-info cache: aider then takes litellm's bundled metadata
        # instead of downloading its price list at start.
        prices = home / ".aider" / "caches" / "model_prices_and_context_window.json"
        prices.parent.mkdir(parents=True, exist_ok=True)
        prices.write_text("{}")
        logs: list[str] = []
        code = 0
        sessions = [
            ([[prompt(k) for k in TURNS[0]], [prompt(k) for k in TURNS[1]]], 0),
            ([[prompt(k) for k in TURNS[2]]], 1),
        ]
        for s, (stretches, days) in enumerate(sessions):
            control = home / f"control-{s}"
            control.mkdir(parents=True, exist_ok=True)
            command = [
                str(python),
                str(driver),
                api,
                root,
                str(repo),
                MODELS[api],
                json.dumps(stretches),
                str(days),
                str(control),
                MODULE_PATH,
            ]
            process = subprocess.Popen(
                command,
                cwd=repo,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            reader = threading.Thread(target=lambda p=process: logs.append(p.stdout.read()))
            reader.start()
            deadline = time.monotonic() + TIMEOUT
            resumed = 0
            while process.poll() is None and time.monotonic() < deadline:
                paused = control / "paused"
                if paused.exists() and int(paused.read_text() or 0) > resumed:
                    resumed += 1
                    restart()  # the proxy restarts between the stretches of one session
                    (control / f"resume-{resumed}").write_text("go")
                time.sleep(0.1)
            if process.poll() is None:
                process.kill()
            reader.join()
            code = code or (process.wait() or 0)
            (home / f"aider-{s}.log").write_text(logs[-1] if logs else "")
        module = (repo / MODULE_PATH).read_text(encoding="utf-8")
        answer = f"{applied_edits(module)} of {len(EDITS)} edits applied"
        return ClientRun(code, answer, log=tail("\n".join(logs)))

    return run

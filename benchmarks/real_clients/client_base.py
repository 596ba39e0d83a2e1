"""What every runner shares: the client's description, what a run did, a quiet environment."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "LONG_TIMEOUT",
    "TIMEOUT",
    "Client",
    "ClientRun",
    "Restart",
    "json_run",
    "quiet_env",
    "tail",
]

TIMEOUT = 240
LONG_TIMEOUT = 2400
"""Seconds a long session may take (64 steps, compactions, a loaded machine)."""

Restart = Callable[[], None]
"""Restarts the proxy in place (same port and store; a no-op in the straight run)."""


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
    run: Callable[[Path, str, Path, Path, Restart], ClientRun]
    """`(cache, base root URL, repo, home, restart) -> ClientRun`."""
    profile: str | None = None
    """Provider cache profile of the upstream and the proxy (None: the API's default)."""
    task: str = "fix"
    """What the client does and how it is judged: `fix` (the tool task of `task.py`),
    `aider` (the four edit turns of `aider_client.py`, a proxy restart, a second session),
    `long` (the 64-step session of `long_session.py`, only with `--long`)."""
    probes: tuple[str, ...] = ()
    """Refusals the client provokes on purpose and recovers from (the same in both runs):
    Claude Code 2.1 first sends its environment notes as a `system` message and, refused
    with the provider's wording, resends them in the user turn."""
    cost_cap: float | None = None
    """Most the proxied run may cost, as a multiple of the straight run's bill (the clients
    that cap their own outputs: a short session costs at most 0.5 % more through the proxy)."""
    full: bool = False
    """Only with `--full` (the heaviest variants; CI runs a representative set)."""


def tail(text: str, limit: int = 3000) -> str:
    return text[-limit:]


def quiet_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), NO_COLOR="1")
    return env


def json_run(
    returncode: int, text: str, log: str, *, answer: str, error: str | None = None
) -> ClientRun:
    """The run of a client that reports one JSON object (`text`): its answer under `answer`,
    the tool calls it ran under `executed`, and a failure when `error` is set in it (the exit
    status alone does not say so). Text that is no JSON object leaves the answer empty."""
    try:
        result = json.loads(text)
    except ValueError:
        result = None
    if not isinstance(result, dict):
        return ClientRun(returncode, "", log=log)
    reply = str(result.get(answer) or "")
    executed = result.get("executed")
    calls = [(str(n), str(a)) for n, a in executed] if isinstance(executed, list) else []
    failed = error is not None and bool(result.get(error))
    return ClientRun(1 if failed else returncode, reply, executed=calls, log=log)

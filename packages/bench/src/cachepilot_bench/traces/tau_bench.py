"""tau-bench historical trajectories: a JSON list of `{task_id, trial, reward, info, traj}`.

Each entry is one session (`<id>#task<task_id>-trial<trial>`); `traj` holds OpenAI-chat
messages (system policy first, native `tool_calls`, `tool` results). The file has no tool
schemas and no usage. tau-bench names these files `<model>-<env>.json`: the model is taken
from that name when it ends in a known environment.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cachepilot_bench.traces._common import (
    CallInfo,
    Item,
    TraceError,
    as_dict,
    build_session,
    openai_content,
    openai_message_item,
    read_json,
    unique_ids,
)
from cachepilot_bench.traces.session import Session

__all__ = ["FORMAT", "load"]

logger = logging.getLogger(__name__)

FORMAT = "tau-bench"
_ENVS = ("airline", "retail")


def _model_env(path: Path) -> tuple[str | None, str | None]:
    stem = path.stem
    for env in _ENVS:
        if stem.endswith(f"-{env}") and len(stem) > len(env) + 1:
            return stem[: -len(env) - 1], env
    return None, None


def _items(traj: list[Any], model: str | None) -> list[Item]:
    items: list[Item] = []
    info = CallInfo(model=model) if model else None
    names: dict[str, str] = {}
    for raw in traj:
        message = as_dict(raw)
        item = openai_message_item(message, openai_content(message.get("content")), names, info)
        if item is not None:
            items.append(item)
    return items


def load(path: Path, rel: str) -> list[Session]:
    """Load a tau-bench results file (one session per task run).

    Raises:
        TraceError: when the file is not a list of runs with a `traj`.
    """
    data = read_json(path)
    if not isinstance(data, list):
        raise TraceError("not a tau-bench results list")
    runs = [r for r in data if isinstance(r, dict) and isinstance(r.get("traj"), list)]
    if not runs:
        raise TraceError("no run with a 'traj' list")
    model, env = _model_env(path)
    ids = unique_ids(rel, [f"task{r.get('task_id')}-trial{r.get('trial', 0)}" for r in runs])
    sessions: list[Session] = []
    for session_id, run in zip(ids, runs, strict=True):
        meta: dict[str, Any] = {
            "task_id": run.get("task_id"),
            "trial": run.get("trial"),
            "reward": run.get("reward"),
        }
        if env:
            meta["env"] = env
        session = build_session(
            session_id=session_id,
            source=FORMAT,
            items=_items(run["traj"], model),
            path=path,
            model=model,
            meta=meta,
        )
        if session is not None:
            sessions.append(session)
    return sessions

"""Populations inside a trace source, and fidelity intervals per population.

Leaving a whole source out never shows a second population of the same source: other users
or projects of one agent, another version of it, another run of the same tasks. Where the
trace metadata tells them apart, `population` names a session's group inside its source:

* Claude Code: the interactive session it belongs to (sub-agents with their parent), one
  user's project at one time;
* mini-swe-agent and OpenHands: the repository of the task (`django__django-13012`:
  `django`);
* SWE-agent: the collection the trajectory comes from (`demonstrations/ctf`, the replays of
  one task under several agent configurations `demonstrations/replay`, `tests`);
* tau-bench: the trial (each trial reruns every task: another run of the same agent);
* anything else: the folder of the trace file.

A chained session (continuous mode) belongs to the group most of its traces belong to.
`bootstrap_interval` resamples the sessions of a group to give its visible fidelity an
interval: a group of three sessions says less than a group of fifty.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachepilot_bench.harness import SessionResult
from cachepilot_bench.traces.session import Session

__all__ = [
    "BOOTSTRAP_LEVEL",
    "BOOTSTRAP_ROUNDS",
    "GroupRow",
    "bootstrap_interval",
    "chained_groups",
    "group_rows",
    "per_group",
    "population",
]

BOOTSTRAP_ROUNDS = 1000
"""Resamples per interval (the work is rounds × sessions of the group)."""
BOOTSTRAP_LEVEL = 0.9
"""Two-sided coverage of the interval."""
_SEED = 38


def _repo(instance_id: object) -> str | None:
    if not isinstance(instance_id, str) or "__" not in instance_id:
        return None
    repo = instance_id.split("__", 1)[1].rsplit("-", 1)[0]
    return repo or None


def population(session: Session) -> str:
    """The group of `session` inside its source (see the module docstring)."""
    meta = session.meta
    uuid = meta.get("session_uuid")
    if session.source == "claude-code" and isinstance(uuid, str):
        return "session-" + uuid[:8]
    repo = _repo(meta.get("instance_id"))
    if repo is not None:
        return repo
    if session.source == "tau-bench" and isinstance(meta.get("trial"), int):
        return f"trial{meta['trial']}"
    path = session.id.split("#", 1)[0]
    parts = path.split("/")
    if session.source == "swe-agent":
        if "demonstrations" in parts:
            at = parts.index("demonstrations")
            # A folder under demonstrations/ (not the file itself); the replays of one task
            # under several agent configurations are one population.
            folder = parts[at + 1] if at + 1 < len(parts) - 1 else ""
            folder = "replay" if folder.startswith("replay__") else folder
            return f"demonstrations/{folder}" if folder else "demonstrations"
        if "tests" in parts:
            return "tests"
    return "/".join(parts[1:-1]) or "."


def chained_groups(sessions: Iterable[Session], members: Mapping[str, str]) -> dict[str, str]:
    """Session id → group for (possibly chained) sessions: a chain takes the group most of
    its traces have (`members`: trace id → group, from `population` before chaining; ties go
    to the earliest trace)."""
    out: dict[str, str] = {}
    for session in sessions:
        chained = session.meta.get("chained")
        if isinstance(chained, list) and chained:
            votes = Counter(members.get(str(i), "?") for i in chained)
            best = max(votes.values())
            out[session.id] = next(
                members.get(str(i), "?") for i in chained if votes[members.get(str(i), "?")] == best
            )
        else:
            out[session.id] = members.get(session.id) or population(session)
    return out


def bootstrap_interval(
    pairs: Sequence[tuple[int, int]],
    *,
    rounds: int = BOOTSTRAP_ROUNDS,
    level: float = BOOTSTRAP_LEVEL,
    seed: int = _SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of sum(visible) / sum(needed), resampling sessions
    (`pairs`: one (visible, needed) per session). Deterministic for equal inputs.

    Raises:
        ValueError: on no pairs, rounds < 1 or a level outside (0, 1).
    """
    if not pairs:
        raise ValueError("no sessions to resample")
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    if not 0.0 < level < 1.0:
        raise ValueError("level must be within (0, 1)")
    rng = random.Random(seed)
    n = len(pairs)
    values: list[float] = []
    for _ in range(rounds):
        seen = needed = 0
        for _ in range(n):
            visible, need = pairs[rng.randrange(n)]
            seen += visible
            needed += need
        values.append(seen / needed if needed else 1.0)
    values.sort()
    tail = (1.0 - level) / 2
    low = values[min(len(values) - 1, int(tail * len(values)))]
    high = values[min(len(values) - 1, int((1.0 - tail) * len(values)))]
    return low, high


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One strategy on one population."""

    source: str
    group: str
    sessions: int
    cost_ratio: float
    """Input cost × vanilla on the group's sessions (pooled)."""
    fidelity_visible: float
    low: float
    """Lower end of the bootstrap interval of `fidelity_visible`."""
    high: float
    facts_needed: int


def _fidelity_pair(result: SessionResult) -> tuple[int, int]:
    main = [c for c in result.calls if c.kind == "call"]
    return sum(c.facts_visible for c in main), sum(c.facts_needed for c in main)


def group_rows(
    results: Sequence[SessionResult],
    baseline: Sequence[SessionResult],
    groups: Mapping[str, str],
) -> list[GroupRow]:
    """Per (source, group): cost × the baseline's and visible fidelity with its interval
    (`groups`: session id → group; sessions without one are the group `?`)."""
    base: dict[str, float] = {
        r.session_id: sum(c.input_cost_usd for c in r.calls) for r in baseline
    }
    buckets: dict[tuple[str, str], list[SessionResult]] = {}
    for result in results:
        key = (result.source, groups.get(result.session_id, "?"))
        buckets.setdefault(key, []).append(result)
    rows: list[GroupRow] = []
    for (source, group), members in sorted(buckets.items()):
        ours = sum(c.input_cost_usd for r in members for c in r.calls)
        theirs = sum(base.get(r.session_id, 0.0) for r in members)
        pairs = [_fidelity_pair(r) for r in members]
        needed = sum(n for _, n in pairs)
        visible = sum(v for v, _ in pairs)
        low, high = bootstrap_interval(pairs) if needed else (1.0, 1.0)
        rows.append(
            GroupRow(
                source=source,
                group=group,
                sessions=len(members),
                cost_ratio=round(ours / theirs, 4) if theirs else 0.0,
                fidelity_visible=round(visible / needed, 4) if needed else 1.0,
                low=round(low, 4),
                high=round(high, 4),
                facts_needed=needed,
            )
        )
    return rows


def per_group(
    results: Sequence[SessionResult], groups: Mapping[str, str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """`bench --json`'s `per_group`: "source/group" → strategy → input cost, visible and
    recoverable fidelity, the visible fidelity's bootstrap interval and the session count
    (rows shaped like `per_source`, so the held-out rule reads either)."""
    buckets: dict[str, dict[str, list[SessionResult]]] = {}
    for result in results:
        name = f"{result.source}/{groups.get(result.session_id, '?')}"
        buckets.setdefault(name, {}).setdefault(result.strategy, []).append(result)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in sorted(buckets):
        rows: dict[str, dict[str, Any]] = {}
        for strategy, members in buckets[name].items():
            pairs = [_fidelity_pair(r) for r in members]
            needed = sum(n for _, n in pairs)
            main = [c for r in members for c in r.calls if c.kind == "call"]
            recoverable = sum(c.facts_recoverable for c in main)
            low, high = bootstrap_interval(pairs) if needed else (1.0, 1.0)
            rows[strategy] = {
                "input_cost_usd": round(sum(c.input_cost_usd for r in members for c in r.calls), 6),
                "fidelity_visible": round(sum(v for v, _ in pairs) / needed, 4) if needed else 1.0,
                "fidelity_recoverable": round(recoverable / needed, 4) if needed else 1.0,
                "fidelity_interval": [round(low, 4), round(high, 4)],
                "sessions": len(members),
            }
        out[name] = rows
    return out

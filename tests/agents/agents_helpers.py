"""Helpers for the Agents SDK plugin tests (real `Runner`, `ScriptedModel`, SQLite)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agents import RunHooks, set_tracing_disabled

from cachepilot import Config
from cachepilot.maintenance.policy import MaintenanceConfig

set_tracing_disabled(True)


class Clock:
    """A manual clock: every read advances it by `step` seconds."""

    def __init__(self, start: float = 1_700_000_000.0, step: float = 5.0) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def eager_config(**maintenance: Any) -> Config:
    """A config whose maintenance fires within a few dozen small calls (stubs and
    evictions first: folds as large as they were before summaries scaled, so the stubs
    these tests watch reach the model before a fold takes them)."""
    defaults: dict[str, Any] = {
        "prune": True,
        "protect_tool_tokens": 3_000,
        "protect_results": 2,
        "min_prune_tokens": 1_000,
        "fold_protect_tokens": 10_000,
        "fold_min_tokens": 15_000,
        "fold_summary_share": 0.0,
    }
    defaults.update(maintenance)
    return Config(maintenance=MaintenanceConfig(**defaults))


def dumps(item: object) -> str:
    """Canonical JSON of one input item (what byte-identity is judged on)."""
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)


def is_prefix(previous: Sequence[Any], current: Sequence[Any]) -> bool:
    """True when `current` starts with `previous`, item for item."""
    if len(current) < len(previous):
        return False
    return all(dumps(a) == dumps(b) for a, b in zip(previous, current, strict=False))


def pairing_problems(items: Sequence[Any]) -> list[str]:
    """Function calls without exactly one later output, outputs without an earlier call."""
    problems: list[str] = []
    calls: dict[str, int] = {}
    answered: dict[str, int] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            calls[item["call_id"]] = index
        elif item.get("type") == "function_call_output":
            call_id = item["call_id"]
            if call_id not in calls:
                problems.append(f"output {call_id} at {index} has no earlier call")
            answered[call_id] = answered.get(call_id, 0) + 1
    for call_id in calls:
        if answered.get(call_id, 0) != 1:
            problems.append(f"call {call_id} answered {answered.get(call_id, 0)} times")
    return problems


def reasoning_followers(items: Sequence[Any]) -> dict[str, str]:
    """Reasoning item id -> the call id / item id of the item right after it."""
    out: dict[str, str] = {}
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == "reasoning":
            nxt = items[index + 1] if index + 1 < len(items) else None
            if isinstance(nxt, dict):
                out[str(item.get("id"))] = str(nxt.get("call_id") or nxt.get("id"))
            else:
                out[str(item.get("id"))] = "<end>"
    return out


class RecordingHooks(RunHooks[Any]):
    """User hooks that record what they see (the plugin must keep running them)."""

    def __init__(self, probe: Callable[[], int] | None = None) -> None:
        self.llm_starts = 0
        self.llm_ends = 0
        self.tool_ends = 0
        self.epochs_at_call: list[int] = []
        self._probe = probe

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: Any, input_items: Any
    ) -> None:
        self.llm_starts += 1
        if self._probe is not None:
            self.epochs_at_call.append(self._probe())

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.llm_ends += 1

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.tool_ends += 1

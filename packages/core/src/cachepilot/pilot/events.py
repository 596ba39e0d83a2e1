"""Events the pilot reports to the host application (beyond its log lines and notes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LoopEvent", "LoopHook"]


@dataclass(frozen=True, slots=True)
class LoopEvent:
    """The agent called the same tool with the same arguments several times in a row.

    The model also reads a note (and, from `ReduceConfig.loop_stub_after` identical outputs
    on, a stub); the event lets the host act too: stop the run, raise the temperature, ask a
    human, switch models.
    """

    thread: str
    tool: str
    call_id: str
    """The call that extended the run."""
    run: int
    """Identical calls in a row, this one included (at least `ReduceConfig.loop_flag_after`)."""
    same_output: bool
    """Every call of the run returned this same output."""


LoopHook = Callable[[LoopEvent], None]
"""Called once per looping tool result, at ingestion, outside the pilot's lock."""

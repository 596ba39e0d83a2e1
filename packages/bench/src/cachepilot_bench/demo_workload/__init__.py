"""The built-in demo workload: a deterministic two-task coding session.

`build_demo_session()` returns the session `cachepilot bench` replays when no trace is given;
`DEMO_TOOLS` / `run_demo_tool` are the deterministic tools that produced its tool outputs
(from the files under ``data/``), so a real agent can run the same session against the replay
provider.
"""

from __future__ import annotations

from cachepilot_bench.demo_workload.generate import (
    AGENT_SESSION_UUID,
    DEMO_SESSION_ID,
    TASK2_FIRST_CALL,
    build_demo_session,
    call_timestamp,
    volatile_system_prompt,
)
from cachepilot_bench.demo_workload.tools import (
    DEMO_CWD,
    DEMO_TOOL_SCHEMAS,
    DEMO_TOOLS,
    DemoToolState,
    run_demo_tool,
)

__all__ = [
    "AGENT_SESSION_UUID",
    "DEMO_CWD",
    "DEMO_SESSION_ID",
    "DEMO_TOOLS",
    "DEMO_TOOL_SCHEMAS",
    "TASK2_FIRST_CALL",
    "DemoToolState",
    "build_demo_session",
    "call_timestamp",
    "run_demo_tool",
    "volatile_system_prompt",
]

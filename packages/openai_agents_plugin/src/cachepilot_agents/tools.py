"""The `recall` tool: its schema (as an SDK `FunctionTool`) and the answer to one call.

The model wrapper adds this tool to what the model is offered and answers its calls itself;
the SDK never runs it, so no agent needs it in its own tool list.
"""

from __future__ import annotations

import json
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext

from cachepilot import CachePilot
from cachepilot.recall.tool import RECALL_TOOL_DESCRIPTION, RECALL_TOOL_NAME, RECALL_TOOL_PARAMETERS

__all__ = ["answer_recall", "recall_tool"]

_DEFAULT_MAX_CHARS = 20_000


async def answer_recall(pilot: CachePilot, arguments: str, thread: str) -> str:
    """The text a recall call with `arguments` (JSON from the model, untrusted) gets."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return 'recall: the arguments are not valid JSON; call recall(ref="<12 hex>")'
    if not isinstance(args, dict) or not isinstance(args.get("ref"), str):
        return 'recall: a "ref" string is required, e.g. recall(ref="9f2c41d07a1b")'
    lines = args.get("lines")
    grep = args.get("grep")
    max_chars = args.get("max_chars", _DEFAULT_MAX_CHARS)
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 1:
        max_chars = _DEFAULT_MAX_CHARS
    return await pilot.arecall(
        args["ref"],
        lines=lines if isinstance(lines, str) else None,
        grep=grep if isinstance(grep, str) else None,
        max_chars=max_chars,
        thread=thread,
    )


def recall_tool() -> FunctionTool:
    """The `recall` tool as the model is offered it (the SDK never invokes it)."""

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        # Reached only if a framework runs the tool itself: the model wrapper answers recall.
        return "recall: not available here"

    return FunctionTool(
        name=RECALL_TOOL_NAME,
        description=RECALL_TOOL_DESCRIPTION,
        params_json_schema=json.loads(json.dumps(RECALL_TOOL_PARAMETERS)),
        on_invoke_tool=invoke,
        # Optional parameters: strict mode would make them all required and change the schema.
        strict_json_schema=False,
    )

"""A LangGraph `ToolNode` that reduces tool output at ingestion and serves `recall`.

```python
tool_node = cachepilot_tool_node(pilot, tools)  # a real ToolNode, plus the recall tool
builder.add_node("tools", tool_node)
```

It is LangGraph's own `ToolNode` with a `wrap_tool_call` / `awrap_tool_call` interceptor
(`CachePilotToolWrapper`): each result is reduced once, when it arrives, so only the
reduced text reaches graph state and checkpoints (the original is archived and `recall`
returns it). Results are returned as `Command`s that also carry the thread's pilot state
under `"cachepilot"`, so ingestion memory survives checkpoints and resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from cachepilot import CachePilot
from cachepilot.recall.tool import RECALL_TOOL_DESCRIPTION, RECALL_TOOL_NAME
from cachepilot_langgraph._shared import (
    link_of,
    mark_ingested,
    run_thread,
    state_update,
    sync_state,
    tool_output,
    use_graph_store,
    with_content,
)
from cachepilot_langgraph.recall_tool import make_recall_tool
from cachepilot_langgraph.state import PILOT_STATE_KEY

__all__ = ["CachePilotToolWrapper", "cachepilot_tool_node"]

logger = logging.getLogger(__name__)

ToolResult = ToolMessage | Command[Any]


class CachePilotToolWrapper:
    """`ToolNode` interceptor: ingestion-time reduction, recall, pilot state updates.

    Pass `wrap_tool_call` and `awrap_tool_call` to a `ToolNode` that also holds
    `recall_tool` (or use `cachepilot_tool_node`).

    Args:
        pilot: the pilot shared with the graph's node, model wrapper and reducer.
        namespace: prefix of the cachepilot thread (as given to the other components).
        messages_key: the state key holding the messages (the `ToolNode`'s).
        use_graph_store: route artifacts to the graph's `BaseStore` when the pilot has no
            store of its own yet.

    Raises:
        ValueError: on a pilot that is not a `CachePilot` or an empty key.
    """

    def __init__(
        self,
        pilot: CachePilot,
        *,
        namespace: str | None = None,
        messages_key: str = "messages",
        use_graph_store: bool = True,
    ) -> None:
        if not isinstance(pilot, CachePilot):
            raise ValueError(f"pilot must be a CachePilot, not {type(pilot).__name__}")
        if not isinstance(messages_key, str) or not messages_key:
            raise ValueError("messages_key must be a non-empty state key")
        self.pilot = pilot
        self.namespace = namespace
        self.messages_key = messages_key
        self._use_graph_store = use_graph_store
        self.recall_tool: BaseTool = make_recall_tool(pilot, namespace=namespace)

    def _thread(self, request: ToolCallRequest) -> str:
        runtime = request.runtime
        config = getattr(runtime, "config", None) if runtime is not None else None
        thread = run_thread(self.pilot, config, self.namespace)
        if self._use_graph_store and runtime is not None:
            use_graph_store(self.pilot, getattr(runtime, "store", None))
        state = request.state
        persisted = state.get(PILOT_STATE_KEY) if isinstance(state, Mapping) else None
        sync_state(self.pilot, thread, persisted)
        call_id = request.tool_call.get("id")
        if call_id:
            link_of(self.pilot).note_call_ids(thread, [str(call_id)])
        return thread

    def _is_recall(self, request: ToolCallRequest) -> bool:
        tool = request.tool
        if request.tool_call.get("name") != RECALL_TOOL_NAME:
            return False
        return tool is self.recall_tool or (
            tool is not None and tool.description == RECALL_TOOL_DESCRIPTION
        )

    def _found(self, request: ToolCallRequest, result: object) -> list[ToolMessage]:
        """The tool messages of `result` that answer this call."""
        call_id = request.tool_call.get("id")
        if isinstance(result, ToolMessage):
            found = [result]
        elif isinstance(result, Command) and isinstance(result.update, Mapping):
            found = [
                m for m in result.update.get(self.messages_key) or [] if isinstance(m, ToolMessage)
            ]
        else:
            return []
        return [m for m in found if m.tool_call_id == call_id or len(found) == 1]

    def _finish(self, thread: str, result: ToolResult, texts: dict[int, str]) -> ToolResult:
        def fix(message: object) -> object:
            if not isinstance(message, ToolMessage):
                return message
            text = texts.get(id(message))
            return mark_ingested(with_content(message, text) if text is not None else message)

        update = state_update(self.pilot, thread)
        if isinstance(result, ToolMessage):
            return Command(update={self.messages_key: [fix(result)], **update})
        if not isinstance(result, Command) or not isinstance(result.update, Mapping):
            return result
        messages = result.update.get(self.messages_key)
        changed = dict(result.update)
        if isinstance(messages, list):
            changed[self.messages_key] = [fix(m) for m in messages]
        if result.graph is None:
            changed.update(update)  # the parent graph has its own pilot state
        return Command(graph=result.graph, update=changed, resume=result.resume, goto=result.goto)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        """Run the tool, then reduce its output at ingestion (recall results pass as they are)."""
        thread = self._thread(request)
        result = execute(request)
        texts: dict[int, str] = {}
        if not self._is_recall(request):
            name = str(request.tool_call.get("name", ""))
            for message in self._found(request, result):
                texts[id(message)] = self.pilot.ingest(
                    name,
                    request.tool_call.get("args"),
                    tool_output(message),
                    str(message.tool_call_id),
                    thread,
                )
        return self._finish(thread, result, texts)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """Async twin of `wrap_tool_call`."""
        thread = self._thread(request)
        result = await execute(request)
        texts: dict[int, str] = {}
        if not self._is_recall(request):
            name = str(request.tool_call.get("name", ""))
            for message in self._found(request, result):
                texts[id(message)] = await self.pilot.aingest(
                    name,
                    request.tool_call.get("args"),
                    tool_output(message),
                    str(message.tool_call_id),
                    thread,
                )
        return self._finish(thread, result, texts)


def cachepilot_tool_node(
    pilot: CachePilot,
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    namespace: str | None = None,
    messages_key: str = "messages",
    use_graph_store: bool = True,
    **tool_node_kwargs: Any,
) -> ToolNode:
    """A `ToolNode` running `tools` plus `recall`, reducing each result at ingestion.

    Args:
        pilot: the pilot shared with the graph's node, model wrapper and reducer.
        tools: the graph's tools (as for `ToolNode`); `recall` is added unless present.
        namespace: prefix of the cachepilot thread (as given to the other components).
        messages_key: the state key holding the messages.
        use_graph_store: route artifacts to the graph's `BaseStore` when the pilot has no
            store of its own yet.
        **tool_node_kwargs: other `ToolNode` arguments (`name`, `handle_tool_errors`, ...).

    Raises:
        ValueError: when a `wrap_tool_call` is passed (compose it with
            `CachePilotToolWrapper` instead), or on the wrapper's own errors.
    """
    clash = {"wrap_tool_call", "awrap_tool_call"} & set(tool_node_kwargs)
    if clash:
        raise ValueError(
            f"{', '.join(sorted(clash))}: the cachepilot tool node installs its own; build a "
            "ToolNode with CachePilotToolWrapper's methods inside yours instead"
        )
    wrapper = CachePilotToolWrapper(
        pilot, namespace=namespace, messages_key=messages_key, use_graph_store=use_graph_store
    )
    names = {t.name if isinstance(t, BaseTool) else getattr(t, "__name__", "") for t in tools}
    with_recall = [*tools] if RECALL_TOOL_NAME in names else [*tools, wrapper.recall_tool]
    return ToolNode(
        with_recall,
        messages_key=messages_key,
        wrap_tool_call=wrapper.wrap_tool_call,
        awrap_tool_call=wrapper.awrap_tool_call,
        **tool_node_kwargs,
    )

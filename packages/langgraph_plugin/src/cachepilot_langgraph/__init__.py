"""cachepilot for LangGraph and LangChain agents.

* `CachePilotMiddleware`: middleware for `langchain.agents.create_agent` (needs the
  `langchain` extra).
* For hand-built `StateGraph`s: `CachePilotNode` (maintenance node before the model node),
  `CachePilotChatModel` (model wrapper), `cachepilot_tool_node` / `CachePilotToolWrapper`
  (a `ToolNode` that reduces at ingestion and serves `recall`), `cachepilot_messages` (an
  `add_messages` drop-in reducer) and `PilotStateMixin`. See the package README.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachepilot_langgraph.chat_model import CachePilotChatModel
from cachepilot_langgraph.convert import MessageConverter, to_langchain, tool_schema
from cachepilot_langgraph.node import CachePilotNode
from cachepilot_langgraph.persist import persisted_edits
from cachepilot_langgraph.recall_tool import make_recall_tool
from cachepilot_langgraph.reducer import cachepilot_messages
from cachepilot_langgraph.state import (
    PILOT_STATE_KEY,
    PilotStateMixin,
    newest_pilot_state,
    sync_pilot_state,
    thread_of,
)
from cachepilot_langgraph.tool_node import CachePilotToolWrapper, cachepilot_tool_node

if TYPE_CHECKING:
    from cachepilot_langgraph.middleware import CachePilotMiddleware, CachePilotState

__all__ = [
    "PILOT_STATE_KEY",
    "CachePilotChatModel",
    "CachePilotMiddleware",
    "CachePilotNode",
    "CachePilotState",
    "CachePilotToolWrapper",
    "MessageConverter",
    "PilotStateMixin",
    "cachepilot_messages",
    "cachepilot_tool_node",
    "make_recall_tool",
    "newest_pilot_state",
    "persisted_edits",
    "sync_pilot_state",
    "thread_of",
    "to_langchain",
    "tool_schema",
]


def __getattr__(name: str) -> Any:
    # The middleware needs `langchain` (an optional extra): import it on first use.
    if name in ("CachePilotMiddleware", "CachePilotState"):
        from cachepilot_langgraph import middleware

        return getattr(middleware, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

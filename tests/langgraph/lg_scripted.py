"""A scripted chat model for create_agent tests: it serializes every request the way
langchain-openai would send it and prices it with the cache simulator."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai.chat_models.base import _convert_message_to_dict
from pydantic import ConfigDict, PrivateAttr

from cachepilot.messages import Message, ToolCall
from cachepilot.sim import CacheSimulator, Request, get_profile

Responder = Callable[[list[BaseMessage], int], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Answers from `responder(messages, call_index)`; records the wire form of each request."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responder: Any
    _requests: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _usages: list[Any] = PrivateAttr(default_factory=list)
    _sim: CacheSimulator = PrivateAttr(
        default_factory=lambda: CacheSimulator(get_profile("openai-gpt-5.4-mini"))
    )

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._requests

    @property
    def usages(self) -> list[Any]:
        return self._usages

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        schemas = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=schemas, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = kwargs.get("tools") or []
        wire = [_convert_message_to_dict(m) for m in messages]
        self._requests.append({"messages": wire, "tools": tools})
        reply = self.responder(messages, len(self._requests) - 1)
        usage = self._sim.submit(_sim_request(wire, tools), output_tokens=20)
        self._usages.append(usage)
        reply = reply.model_copy(
            update={
                "usage_metadata": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": 20,
                    "total_tokens": usage.input_tokens + 20,
                    "input_token_details": {"cache_read": usage.cached_tokens},
                }
            }
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _sim_request(wire: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Request:
    system = None
    out: list[Message] = []
    for item in wire:
        role = item["role"]
        content = item.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content, sort_keys=True)
        if role in ("system", "developer") and not out:
            system = content
        elif role == "tool":
            out.append(Message(role="tool", content=content, tool_call_id=item["tool_call_id"]))
        elif role == "assistant":
            calls = tuple(
                ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in item.get("tool_calls") or ()
            )
            out.append(Message(role="assistant", content=content, tool_calls=calls))
        else:
            out.append(Message(role="user", content=content))
    return Request(system=system, messages=out, tools=tools)


def wire_prefix_extends(prev: dict[str, Any], cur: dict[str, Any]) -> bool:
    """True when `cur` resends `prev` byte for byte (tools, then messages) and adds to it."""
    if json.dumps(prev["tools"], sort_keys=False) != json.dumps(cur["tools"], sort_keys=False):
        return False
    n = len(prev["messages"])
    return cur["messages"][:n] == prev["messages"]


@pytest.fixture
def scripted() -> Callable[[Responder], ScriptedChatModel]:
    return lambda responder: ScriptedChatModel(responder=responder)


def system_of(messages: list[BaseMessage]) -> str | None:
    for m in messages:
        if isinstance(m, SystemMessage):
            return str(m.content)
    return None


REF = re.compile(r'recall\(ref="([0-9a-f]{12})"')


def command_log(command: str, lines: int = 400) -> str:
    # Irregular lines (digests), so only the size gate can shorten them.
    return "\n".join(
        f"{command}: step {i:05d} {hashlib.sha256(f'{command}{i}'.encode()).hexdigest()}"
        for i in range(lines)
    )


@tool
def run_command(command: str) -> str:
    """Run a shell command and return its output."""
    return command_log(command)


@tool
def read_note(name: str) -> str:
    """Read a short note."""
    return f"note {name}: the answer is {len(name) * 3}"


@tool
def flaky(kind: str) -> Any:
    """A tool that misbehaves."""
    if kind == "raise":
        raise RuntimeError("tool exploded")
    if kind == "bytes":
        return b"\xff\xfe binary \x00 junk"
    if kind == "none":
        return None
    return "x" * 300_000


TOOLS = [run_command, read_note, flaky]


def tool_call(name: str, args: dict[str, Any], i: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}],
    )


def last_tool(messages: Sequence[BaseMessage]) -> ToolMessage | None:
    for m in reversed(messages):
        if isinstance(m, ToolMessage):
            return m
    return None


def coding_responder(
    n_calls: int, recall_at: int | None = None, junk: Sequence[str] = ()
) -> Callable[[list[BaseMessage], int], AIMessage]:
    """A 'model' that runs commands, recalls one shortened output, then answers."""

    def respond(messages: list[BaseMessage], i: int) -> AIMessage:
        if i < len(junk):
            return tool_call("flaky", {"kind": junk[i]}, i)
        if recall_at is not None and i == recall_at:
            last = last_tool(messages)
            found = REF.search(str(last.content)) if last is not None else None
            assert found, "the shortened output names its ref"
            return tool_call("recall", {"ref": found.group(1), "lines": "1-3"}, i)
        if i < n_calls:
            if i % 5 == 4:
                return tool_call("read_note", {"name": f"n{i}"}, i)
            return tool_call("run_command", {"command": f"make step{i}"}, i)
        return AIMessage(content="done")

    return respond

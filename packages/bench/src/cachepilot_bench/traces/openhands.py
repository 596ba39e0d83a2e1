"""OpenHands evaluation records (`output.jsonl`: one record per line with an event `history`).

Events become messages the way OpenHands' conversation memory builds its prompt:

- the `system` action: the system prompt (`args.content`) and the tool schemas (`args.tools`,
  into `Session.tools`);
- agent actions with `tool_call_metadata`: tool calls. Actions sharing one
  `model_response.id` (parallel calls; their observations may come in between) are merged
  into one assistant message, text from the response, one `ToolCall` per action (id
  `tool_call_id`, arguments as the model wrote them in the response). Usage, model and
  `created` come from that response;
- observations with `tool_call_metadata`: tool results; `run` output gets the shell metadata
  OpenHands appends (prefix/suffix, working directory, exit code);
- the user's `message` action: a user message; the `recall` observation (workspace
  context) a user message rendered approximately like OpenHands' template; other
  observations without a call (e.g. `error`) user messages, as OpenHands sends them.

An action the agent could not parse leaves only an `error` observation in the history: that
model call is invisible here (`metrics.response_latencies` counts it).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.usage import Usage
from cachepilot_bench.traces._common import (
    CallInfo,
    Item,
    TraceError,
    as_dict,
    as_list,
    build_session,
    iso_to_unix,
    join_content,
    openai_content,
    read_json,
    read_jsonl,
    unique_ids,
)
from cachepilot_bench.traces.session import Session

__all__ = ["FORMAT", "load"]

logger = logging.getLogger(__name__)

FORMAT = "openhands"
_SILENT_OBSERVATIONS = frozenset(
    {"agent_state_changed", "null", "user_rejected", "agent_condensation"}
)


class _Turn:
    """One model response being assembled from its actions."""

    __slots__ = ("calls", "content", "info", "message_id", "response_id")

    def __init__(
        self,
        response_id: str,
        message_id: str,
        content: str | tuple[ContentPart, ...],
        info: CallInfo,
    ):
        self.response_id = response_id
        self.message_id = message_id
        self.content = content
        self.info = info
        self.calls: list[ToolCall] = []

    def message(self) -> Message:
        return Message(
            role="assistant", content=self.content, tool_calls=tuple(self.calls), id=self.message_id
        )


def _response_message(response: dict[str, Any]) -> dict[str, Any]:
    choices = as_list(response.get("choices"))
    return as_dict(as_dict(choices[0]).get("message")) if choices else {}


def _new_turn(event: dict[str, Any], response: dict[str, Any], response_id: str) -> _Turn:
    message = _response_message(response)
    content = openai_content(message.get("content"))
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        rest = content if isinstance(content, tuple) else ((TextPart(content),) if content else ())
        content = (ReasoningPart(reasoning), *rest)
    usage = response.get("usage")
    timestamp = iso_to_unix(response.get("created"))
    model = response.get("model")
    info = CallInfo(
        timestamp=timestamp if timestamp is not None else iso_to_unix(event.get("timestamp")),
        usage=Usage.from_openai_chat(usage) if isinstance(usage, dict) else None,
        model=model if isinstance(model, str) else None,
    )
    return _Turn(response_id, f"event-{event.get('id')}", content, info)


def _arguments(event: dict[str, Any], response: dict[str, Any], call_id: str) -> str:
    for raw_call in as_list(_response_message(response).get("tool_calls")):
        call = as_dict(raw_call)
        if call.get("id") == call_id:
            arguments = as_dict(call.get("function")).get("arguments")
            if isinstance(arguments, str):
                return arguments
            if arguments is not None:
                return json.dumps(arguments, ensure_ascii=False)
    args = {k: v for k, v in as_dict(event.get("args")).items() if k != "thought"}
    return json.dumps(args, ensure_ascii=False)


def _observation_text(event: dict[str, Any]) -> str:
    content = event.get("content")
    text = content if isinstance(content, str) else str(event.get("message") or "")
    if event.get("observation") != "run":
        return text
    meta = as_dict(as_dict(event.get("extras")).get("metadata"))
    text = f"{meta.get('prefix') or ''}{text}{meta.get('suffix') or ''}"
    if meta.get("working_dir"):
        text += f"\n[Current working directory: {meta['working_dir']}]"
    if meta.get("py_interpreter_path"):
        text += f"\n[Python interpreter: {meta['py_interpreter_path']}]"
    exit_code = meta.get("exit_code")
    if isinstance(exit_code, int) and exit_code != -1:
        text += f"\n[Command finished with exit code {exit_code}]"
    return text


def _recall_text(extras: dict[str, Any]) -> str:
    blocks: list[str] = []
    runtime: list[str] = []
    if extras.get("repo_name") or extras.get("repo_directory"):
        runtime.append(
            f"At the user's request, repository {extras.get('repo_name')} has been cloned to "
            f"{extras.get('repo_directory')} in the current working directory."
        )
    if extras.get("repo_instructions"):
        runtime.append(str(extras["repo_instructions"]))
    hosts = as_dict(extras.get("runtime_hosts"))
    if hosts:
        runtime.append(
            "The user has access to the following hosts for accessing a web application,\n"
            "each of which has a corresponding port:\n"
            + "\n".join(f"* {host} (port {port})" for host, port in hosts.items())
        )
    if extras.get("additional_agent_instructions"):
        runtime.append(str(extras["additional_agent_instructions"]))
    if extras.get("date"):
        runtime.append(f"Today's date is {extras['date']} (UTC).")
    if runtime:
        blocks.append("<RUNTIME_INFORMATION>\n" + "\n\n".join(runtime) + "\n</RUNTIME_INFORMATION>")
    for raw_agent in as_list(extras.get("microagent_knowledge")):
        agent = as_dict(raw_agent)
        trigger = agent.get("trigger")
        blocks.append(
            "<EXTRA_INFO>\n"
            "The following information has been included based on a keyword match for "
            f'"{trigger}".\n'
            "It may or may not be relevant to the user's request.\n\n"
            f"{agent.get('content', '')}\n</EXTRA_INFO>"
        )
    return "\n\n".join(blocks)


def _record_session(record: dict[str, Any], session_id: str, path: Path) -> Session | None:
    items: list[Item | _Turn] = []
    tools: list[dict[str, Any]] = []
    last_turn: _Turn | None = None
    for event in as_list(record.get("history")):
        if not isinstance(event, dict):
            continue
        action = event.get("action")
        observation = event.get("observation")
        metadata = as_dict(event.get("tool_call_metadata"))
        call_id = metadata.get("tool_call_id")
        event_id = f"event-{event.get('id')}"
        if action == "system":
            args = as_dict(event.get("args"))
            tools = [t for t in as_list(args.get("tools")) if isinstance(t, dict)]
            text = (
                args.get("content")
                if isinstance(args.get("content"), str)
                else event.get("message")
            )
            items.append((Message(role="system", content=str(text or ""), id=event_id), None))
        elif action is not None and call_id:
            response = as_dict(metadata.get("model_response"))
            response_id = str(response.get("id") or event_id)
            if last_turn is None or last_turn.response_id != response_id:
                last_turn = _new_turn(event, response, response_id)
                items.append(last_turn)
            last_turn.calls.append(
                ToolCall(
                    id=str(call_id),
                    name=str(metadata.get("function_name") or action),
                    arguments=_arguments(event, response, str(call_id)),
                )
            )
        elif action == "message":
            args = as_dict(event.get("args"))
            text = (
                args.get("content")
                if isinstance(args.get("content"), str)
                else event.get("message")
            )
            if event.get("source") == "agent":
                last_turn = None
                items.append(
                    (
                        Message(role="assistant", content=str(text or ""), id=event_id),
                        CallInfo(timestamp=iso_to_unix(event.get("timestamp"))),
                    )
                )
            else:
                parts: list[ContentPart] = [TextPart(str(text or ""))]
                parts.extend(ImagePart(url=str(u)) for u in as_list(args.get("image_urls")) if u)
                items.append((Message(role="user", content=join_content(parts), id=event_id), None))
        elif observation is not None:
            if observation == "recall":
                text = _recall_text(as_dict(event.get("extras")))
                if text:
                    items.append((Message(role="user", content=text, id=event_id), None))
            elif call_id:
                name = str(metadata.get("function_name") or observation)
                items.append(
                    (
                        Message(
                            role="tool",
                            content=_observation_text(event),
                            tool_call_id=str(call_id),
                            name=name,
                            id=event_id,
                        ),
                        None,
                    )
                )
            elif observation not in _SILENT_OBSERVATIONS:
                text = _observation_text(event)
                if observation == "error":
                    text += "\n[Error occurred in processing last action]"
                items.append((Message(role="user", content=text, id=event_id), None))
    flat: list[Item] = [(e.message(), e.info) if isinstance(e, _Turn) else e for e in items]
    llm = as_dict(as_dict(record.get("metadata")).get("llm_config"))
    meta: dict[str, Any] = {}
    if record.get("instance_id"):
        meta["instance_id"] = record["instance_id"]
    if record.get("error"):
        meta["error"] = record["error"]
    latencies = as_list(as_dict(record.get("metrics")).get("response_latencies"))
    if latencies:
        meta["recorded_responses"] = len(latencies)
    model = llm.get("model")
    return build_session(
        session_id=session_id,
        source=FORMAT,
        items=flat,
        path=path,
        tools=tools,
        model=model if isinstance(model, str) else None,
        meta=meta,
    )


def _records(path: Path) -> list[dict[str, Any]]:
    data: Any
    if path.suffix.lower() == ".jsonl":
        data = read_jsonl(path)
    else:
        try:
            data = read_json(path)
        except TraceError:
            data = read_jsonl(path)
    if isinstance(data, dict):
        data = [data]
    return [r for r in as_list(data) if isinstance(r, dict) and isinstance(r.get("history"), list)]


def load(path: Path, rel: str) -> list[Session]:
    """Load an OpenHands output file (one session per record, id `<rel>#<instance_id>`).

    Raises:
        TraceError: when no record has a `history` list.
    """
    records = _records(path)
    if not records:
        raise TraceError("no OpenHands record with a 'history' list")
    ids = unique_ids(rel, [str(r.get("instance_id") or n) for n, r in enumerate(records)])
    sessions: list[Session] = []
    for session_id, record in zip(ids, records, strict=True):
        session = _record_session(record, session_id, path)
        if session is not None:
            sessions.append(session)
    return sessions

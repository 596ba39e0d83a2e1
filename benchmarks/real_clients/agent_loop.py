"""A small coding agent on the official `openai` and `anthropic` Python clients.

It is the loop a user writes around the SDK: send the history with the tool schemas, run every
tool call the model asks for on the repository, append the results, repeat until the model
answers without a call. Three wire shapes: Chat Completions streamed, Responses (not
streamed, reasoning items resent as received) and Anthropic Messages streamed.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LoopResult", "run_anthropic", "run_chat", "run_responses"]

MAX_TURNS = 20
_SCHEMAS: list[tuple[str, str, dict[str, Any]]] = [
    ("list_files", "List the repository's files.", {}),
    ("read_file", "Read a file.", {"path": {"type": "string"}}),
    (
        "grep",
        "Search files for a regular expression (line numbers shown).",
        {"pattern": {"type": "string"}, "path": {"type": "string"}},
    ),
    (
        "edit_file",
        "Replace one exact occurrence of `old` with `new` in a file.",
        {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
    ),
    ("run", "Run a shell command in the repository.", {"command": {"type": "string"}}),
]


def _parameters(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": sorted(props)}


CHAT_TOOLS = [
    {"type": "function", "function": {"name": n, "description": d, "parameters": _parameters(p)}}
    for n, d, p in _SCHEMAS
]
RESPONSES_TOOLS = [
    {"type": "function", "name": n, "description": d, "parameters": _parameters(p)}
    for n, d, p in _SCHEMAS
]
ANTHROPIC_TOOLS = [
    {"name": n, "description": d, "input_schema": _parameters(p)} for n, d, p in _SCHEMAS
]
SYSTEM = "You are a coding agent. Use the tools to inspect and change the repository."


@dataclass(slots=True)
class LoopResult:
    """What one loop run did."""

    answer: str = ""
    executed: list[tuple[str, str]] = field(default_factory=list)
    """(tool name, arguments JSON) of every tool call run, in order."""


def _inside(root: Path, rel: str) -> Path:
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ValueError(f"path outside the repository: {rel}")
    return path


def execute(root: Path, name: str, arguments: str) -> str:
    """Run one tool call on the repository; errors come back as text, like a real tool."""
    try:
        args = json.loads(arguments or "{}")
        if name == "list_files":
            return "\n".join(
                p.relative_to(root).as_posix() for p in sorted(root.rglob("*")) if p.is_file()
            )
        if name == "read_file":
            return _inside(root, args["path"]).read_text(encoding="utf-8")
        if name == "grep":
            pattern = re.compile(args["pattern"])
            hits = []
            for path in sorted(_inside(root, args.get("path") or ".").rglob("*")):
                if path.is_file():
                    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                        if pattern.search(line):
                            hits.append(f"{path.relative_to(root).as_posix()}:{n}:{line}")
            return "\n".join(hits) or "(no match)"
        if name == "edit_file":
            path = _inside(root, args["path"])
            text = path.read_text(encoding="utf-8")
            if text.count(args["old"]) != 1:
                return f"error: `old` occurs {text.count(args['old'])} times, not once"
            path.write_text(text.replace(args["old"], args["new"]), encoding="utf-8")
            return f"edited {args['path']}"
        if name == "run":
            done = subprocess.run(
                args["command"],
                shell=True,
                cwd=root,
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )
            return f"exit {done.returncode}\n{done.stdout}{done.stderr}"
    except (KeyError, ValueError, OSError, subprocess.SubprocessError) as exc:
        return f"error: {exc}"
    return f"error: unknown tool {name}"


def run_chat(base_url: str, root: Path, prompt: str) -> LoopResult:
    """The loop on `openai` Chat Completions, streamed (with usage)."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="sk-dummy", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompt},
    ]
    out = LoopResult()
    for _ in range(MAX_TURNS):
        stream = client.chat.completions.create(
            model="gpt-5.4-mini",
            messages=messages,  # type: ignore[arg-type]
            tools=CHAT_TOOLS,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for call in delta.tool_calls or []:
                    slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    if call.id:
                        slot["id"] = call.id
                    if call.function and call.function.name:
                        slot["name"] += call.function.name
                    if call.function and call.function.arguments:
                        slot["arguments"] += call.function.arguments
        assistant: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            assistant["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for _, c in sorted(calls.items())
            ]
        messages.append(assistant)
        if not calls:
            out.answer = "".join(text)
            return out
        for _, c in sorted(calls.items()):
            out.executed.append((c["name"], c["arguments"]))
            result = execute(root, c["name"], c["arguments"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    raise RuntimeError("the chat loop did not finish")


def run_responses(base_url: str, root: Path, prompt: str) -> LoopResult:
    """The loop on `openai` Responses (stateless: `store=False`, items resent)."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="sk-dummy", max_retries=0)
    items: list[Any] = [{"role": "user", "content": prompt}]
    out = LoopResult()
    for _ in range(MAX_TURNS):
        response = client.responses.create(
            model="gpt-5.4-mini",
            instructions=SYSTEM,
            input=items,
            tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
            store=False,
            include=["reasoning.encrypted_content"],
        )
        calls = [item for item in response.output if item.type == "function_call"]
        items.extend(item.model_dump(exclude_none=True) for item in response.output)
        if not calls:
            out.answer = response.output_text
            return out
        for call in calls:
            out.executed.append((call.name, call.arguments))
            result = execute(root, call.name, call.arguments)
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": result}
            )
    raise RuntimeError("the responses loop did not finish")


def run_anthropic(base_url: str, root: Path, prompt: str) -> LoopResult:
    """The loop on `anthropic` Messages, streamed, with a cache mark on the last message."""
    from anthropic import Anthropic

    client = Anthropic(base_url=base_url, api_key="sk-ant-dummy", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": prompt}]}
    ]
    out = LoopResult()
    for _ in range(MAX_TURNS):
        # The documented incremental-caching pattern: one mark on the newest user turn.
        sent = [dict(m) for m in messages]
        blocks = [dict(b) for b in sent[-1]["content"]]
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
        sent[-1]["content"] = blocks
        with client.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=4096,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            messages=sent,  # type: ignore[arg-type]
            tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
        ) as stream:
            final = stream.get_final_message()
        content = [block.model_dump(exclude_none=True) for block in final.content]
        messages.append({"role": "assistant", "content": content})
        uses = [b for b in final.content if b.type == "tool_use"]
        if not uses:
            out.answer = "".join(b.text for b in final.content if b.type == "text")
            return out
        results = []
        for use in uses:
            arguments = json.dumps(use.input)
            out.executed.append((use.name, arguments))
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": execute(root, use.name, arguments),
                }
            )
        messages.append({"role": "user", "content": results})
    raise RuntimeError("the anthropic loop did not finish")

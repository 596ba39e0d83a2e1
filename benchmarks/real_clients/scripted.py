"""The scripted model: decides each reply from the request it is sent, like a model would.

It counts which of the task's steps already have a tool result in the request (the step is in
the call id it issued, which every client and the proxy keep) and asks for the next one, so a
client that rewrites, reorders or resends its history, and a proxy that reduces tool outputs,
still get the same next step. When the request offers a `recall` tool (the proxy adds one) and
the build log arrived reduced, it first says a sentence and then calls `recall` on the log's
reference, once (with some plans next to the next step's call, which the client runs): the
reply shapes (text before a recall call, a client call next to it) a proxy must splice back.
Requests without the client's tools are the client's side calls (Claude Code's warm-ups, its
Bash prefix check and its file-path extraction): they get the short answer each one asks for.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from task import EDIT_NEW, EDIT_OLD, FINAL_ANSWER, LOG_PATH, MODULE_PATH, STEPS

from cachepilot.messages import Message, ReasoningPart, ToolCall
from cachepilot.sim.render import Request
from cachepilot.wire import Api

__all__ = ["PLANS", "Plan", "ScriptedModel", "side_answer"]

_STEP_ID = re.compile(r"_cp_s(\d+)$")
_RECALL_ID = re.compile(r"_cp_recall$")
_REF = re.compile(r'recall\(ref="([0-9a-f]{12})"')
_COMMAND = re.compile(r"^Command: (.+)$", re.MULTILINE)
RECALL_TOOL = "recall"
RECALL_PREAMBLE = "The log came back shortened; let me read its error lines in full first."

StepCall = Callable[[str, str], tuple[str, dict[str, Any]]]
"""`(step, repo root) -> (tool name, arguments)`."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How one client's tools express the task's steps."""

    id_prefix: str
    """Call id prefix (`toolu` for Anthropic, `call` for OpenAI)."""
    tools: frozenset[str]
    """Tool names that mark a request as the client's agent turn."""
    step: StepCall
    """The tool call of each step."""
    final: Callable[[str], tuple[str, dict[str, Any]] | None] = lambda _root: None
    """A tool call that ends the run instead of a text answer (mini-swe-agent submits)."""
    reasoning: bool = False
    """Put a reasoning item (with encrypted content) before each reply (Responses)."""
    recall_next: bool = False
    """Call `recall` in one reply with the next step's call (a client call next to recall)
    instead of alone."""
    steps: tuple[str, ...] = STEPS
    """The task steps this conversation does (a sub-agent does some; their call ids keep the
    step's index in `STEPS`)."""
    answer: str = FINAL_ANSWER
    """The text answer after the last step."""
    voice: str = "Next"
    """How the text before each step's call begins (tells conversations apart in a check)."""


_COMMANDS = {
    "list": "ls -R",
    "log": f"cat {LOG_PATH}",
    "read": f"cat {MODULE_PATH}",
    "grep": "grep -rn REQUEST_TIMEOUT src",
    "edit": f"sed -i 's/^{EDIT_OLD}$/{EDIT_NEW}/' {MODULE_PATH}",
    "run": "python3 tests/check.py",
}


LARGE_LOG_COMMAND = f"tail -c 120000 {LOG_PATH}"
"""The log step where a client sends up to 128,000 characters inline (the error is in the last
120,000 characters)."""


def _claude_code(step: str, root: str) -> tuple[str, dict[str, Any]]:
    module = f"{root}/{MODULE_PATH}"
    if step == "read":
        return "Read", {"file_path": module}
    if step == "grep":
        return "Grep", {
            "pattern": "REQUEST_TIMEOUT",
            "path": f"{root}/src",
            "output_mode": "content",
            "-n": True,
        }
    if step == "edit":
        return "Edit", {"file_path": module, "old_string": EDIT_OLD, "new_string": EDIT_NEW}
    return "Bash", {"command": _COMMANDS[step], "description": f"Task step: {step}"}


def _claude_code_large(step: str, root: str) -> tuple[str, dict[str, Any]]:
    if step == "log":
        return "Bash", {"command": LARGE_LOG_COMMAND, "description": "Task step: log"}
    return _claude_code(step, root)


def _opencode(step: str, root: str) -> tuple[str, dict[str, Any]]:
    module = f"{root}/{MODULE_PATH}"
    if step == "read":
        return "read", {"filePath": module}
    if step == "grep":
        return "grep", {"pattern": "REQUEST_TIMEOUT", "path": f"{root}/src"}
    if step == "edit":
        return "edit", {"filePath": module, "oldString": EDIT_OLD, "newString": EDIT_NEW}
    return "bash", {"command": _COMMANDS[step], "description": f"Task step: {step}"}


def _opencode_patch(step: str, root: str) -> tuple[str, dict[str, Any]]:
    """OpenCode offers GPT models `apply_patch` instead of `edit`."""
    if step == "edit":
        patch = (
            f"*** Begin Patch\n*** Update File: {MODULE_PATH}\n@@\n-{EDIT_OLD}\n+{EDIT_NEW}\n"
            "*** End Patch"
        )
        return "apply_patch", {"patchText": patch}
    return _opencode(step, root)


def _codex(step: str, _root: str) -> tuple[str, dict[str, Any]]:
    return "exec_command", {"cmd": _COMMANDS[step], "max_output_tokens": 100000}


def _bash(step: str, _root: str) -> tuple[str, dict[str, Any]]:
    return "bash", {"command": _COMMANDS[step]}


def _python_loop(step: str, _root: str) -> tuple[str, dict[str, Any]]:
    if step == "list":
        return "list_files", {}
    if step == "read":
        return "read_file", {"path": MODULE_PATH}
    if step == "log":  # the log as a command prints it (a file read stays exact)
        return "run", {"command": _COMMANDS["log"]}
    if step == "grep":
        return "grep", {"pattern": "REQUEST_TIMEOUT", "path": "src"}
    if step == "edit":
        return "edit_file", {"path": MODULE_PATH, "old": EDIT_OLD, "new": EDIT_NEW}
    return "run", {"command": _COMMANDS["run"]}


def _gemini_cli(step: str, root: str) -> tuple[str, dict[str, Any]]:
    module = f"{root}/{MODULE_PATH}"
    if step == "read":
        return "read_file", {"file_path": module}
    if step == "grep":
        return "grep_search", {"pattern": "REQUEST_TIMEOUT", "dir_path": f"{root}/src"}
    if step == "edit":
        return "replace", {
            "file_path": module,
            "instruction": "Raise the request timeout to the 30 s minimum the build log names.",
            "old_string": EDIT_OLD,
            "new_string": EDIT_NEW,
        }
    return "run_shell_command", {"command": _COMMANDS[step], "description": f"Task step: {step}"}


def _submit(_root: str) -> tuple[str, dict[str, Any]]:
    return "bash", {
        "command": f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo '{FINAL_ANSWER}'"
    }


PLANS: dict[str, Plan] = {
    "claude-code": Plan("toolu", frozenset({"Bash", "Read", "Edit", "Grep"}), _claude_code),
    "claude-code-large": Plan(
        "toolu", frozenset({"Bash", "Read", "Edit", "Grep"}), _claude_code_large
    ),
    "claude-code-large-parallel": Plan(
        "toolu", frozenset({"Bash", "Read", "Edit", "Grep"}), _claude_code_large, recall_next=True
    ),
    "codex": Plan("call", frozenset({"exec_command"}), _codex, reasoning=True),
    "codex-parallel": Plan(
        "call", frozenset({"exec_command"}), _codex, reasoning=True, recall_next=True
    ),
    "opencode": Plan("toolu", frozenset({"bash", "read", "edit", "grep"}), _opencode),
    "opencode-patch": Plan(
        "call", frozenset({"bash", "read", "apply_patch", "grep"}), _opencode_patch
    ),
    "mini-swe-agent": Plan("call", frozenset({"bash"}), _bash, final=_submit),
    "gemini-cli": Plan(
        "gemini", frozenset({"run_shell_command", "read_file", "replace"}), _gemini_cli
    ),
    "python": Plan("call", frozenset({"list_files", "read_file", "edit_file"}), _python_loop),
    "python-parallel": Plan(
        "call", frozenset({"list_files", "read_file", "edit_file"}), _python_loop, recall_next=True
    ),
}


def _tool_names(api: Api, body: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        declarations = tool.get("functionDeclarations") if api == "gemini" else None
        if isinstance(declarations, list):
            names.update(str(d["name"]) for d in declarations if isinstance(d, Mapping)
                         and "name" in d)  # fmt: skip
            continue
        function = tool.get("function")
        name = function.get("name") if api == "chat" and isinstance(function, Mapping) else None
        name = name or tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def side_answer(request: Request) -> str:
    """What a client's side call asks for: a command's prefix, the paths a command touched."""
    system = request.system or ""
    last = request.messages[-1].text if request.messages else ""
    commands = _COMMAND.findall(last)
    if "prefix detection" in last and commands:
        return commands[-1].split()[0]
    if "Extract any file paths" in system and commands:
        paths = [w for w in commands[-1].split()[1:] if "." in w or "/" in w]
        return "<filepaths>\n" + "\n".join(paths) + "\n</filepaths>"
    return "OK."


@dataclass(slots=True)
class ScriptedModel:
    """A `Responder` for `ReplayProvider` playing the task for one client."""

    plan: Plan
    root: str
    """Absolute path of the scratch repository (Claude Code's file tools want one)."""
    recalls: int = 0
    """Recall calls issued."""
    replies: list[str] = field(default_factory=list)
    """What each reply was (`warmup`, a step name, `recall`, `answer`)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, api: Api, body: Mapping[str, Any], request: Request) -> Message:
        """The reply to one model request."""
        tools = _tool_names(api, body)
        if not self.plan.tools <= tools:
            return self._reply("warmup", Message("assistant", side_answer(request)), api)
        done: set[int] = set()
        recalled = False
        results: dict[str, str] = {}
        for message in request.messages:
            if message.role != "tool" or not message.tool_call_id:
                continue
            found = _STEP_ID.search(message.tool_call_id)
            if found:
                done.add(int(found.group(1)))
                results[message.tool_call_id] = message.text
            elif _RECALL_ID.search(message.tool_call_id):
                recalled = True
        log_id = f"{self.plan.id_prefix}_cp_s{STEPS.index('log')}"
        ref = _REF.search(results.get(log_id, ""))
        step = next(
            (k for k in range(len(STEPS)) if STEPS[k] in self.plan.steps and k not in done), None
        )
        if RECALL_TOOL in tools and ref and not recalled:
            calls = [
                ToolCall(
                    f"{self.plan.id_prefix}_cp_recall",
                    RECALL_TOOL,
                    json.dumps({"ref": ref.group(1), "grep": "ERROR"}),
                )
            ]
            if self.plan.recall_next and step is not None:
                name, args = self.plan.step(STEPS[step], self.root)
                calls.append(ToolCall(f"{self.plan.id_prefix}_cp_s{step}", name, json.dumps(args)))
            reply = Message("assistant", RECALL_PREAMBLE, tuple(calls))
            return self._reply("recall", reply, api)
        if step is None:
            final = self.plan.final(self.root)
            if final is None:
                return self._reply("answer", Message("assistant", self.plan.answer), api)
            name, args = final
            call = ToolCall(f"{self.plan.id_prefix}_cp_final", name, json.dumps(args))
            return self._reply("answer", Message("assistant", "Done.", tool_calls=(call,)), api)
        name, args = self.plan.step(STEPS[step], self.root)
        call = ToolCall(f"{self.plan.id_prefix}_cp_s{step}", name, json.dumps(args))
        text = f"{self.plan.voice}: {STEPS[step]}."
        return self._reply(STEPS[step], Message("assistant", text, tool_calls=(call,)), api)

    def _reply(self, what: str, message: Message, api: Api) -> Message:
        with self._lock:
            self.replies.append(what)
            if what == "recall":
                self.recalls += 1
            n = len(self.replies)
        if self.plan.reasoning and api == "responses" and what != "warmup":
            thought = ReasoningPart(f"Planning the {what} step.", signature=f"enc-{what}-{n:03d}")
            parts: tuple[Any, ...] = (thought, *(message.parts if message.text else ()))
            return Message("assistant", parts, tool_calls=message.tool_calls)
        return message

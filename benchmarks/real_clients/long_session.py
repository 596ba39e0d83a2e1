"""Long scripted sessions: 64 steps, long enough that the client compacts its history itself.

The repository gets 64 log parts of 24,000 characters each (under Claude Code's 30,000-character
inline cap and OpenCode's output cap, so each reaches the model whole when run straight); the
session prints them one per step and edits a setting every 16th step (four edits). That is
about 550 K tokens of tool output, so a client on a 200 K window compacts on its own.

The scripted model (`LongModel`) asks for the next step the request shows undone: a step counts
as done when its tool result is in the request or when a summary the client carried over says
so (`steps completed through sN`: the model writes that line whenever the client asks it to
summarise the conversation, which is how a compacting client keeps its progress). The suite
prices each run from the usage the upstream reports and measures how much of the recent work
the model still sees at the end: of the last 16 parts, how many the final request holds whole.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripted import side_answer
from task import MODULE_PATH

from cachepilot.messages import Message, ToolCall
from cachepilot.sim.render import Request
from cachepilot.wire import Api

__all__ = [
    "LONG_ANSWER",
    "LONG_EDITS",
    "LONG_MODELS",
    "LONG_PROMPT",
    "LONG_STEPS",
    "RECENT",
    "LongModel",
    "is_compaction",
    "long_edits_applied",
    "make_parts",
    "recent_in_view",
]

LONG_STEPS = 64
PART_CHARS = 24_000
EDIT_EVERY = 16
RECENT = 16
"""How many of the last parts the end-of-session view counts."""
LONG_PROMPT = (
    "Review the build logs in logs/ one part at a time, in order (cat each part), and every "
    "16th step raise the setting the log part names in src/app/limits.py. Tell me when done."
)
LONG_ANSWER = f"Reviewed {LONG_STEPS - LONG_STEPS // EDIT_EVERY} log parts; 4 settings raised."
LONG_EDITS = LONG_STEPS // EDIT_EVERY
_DONE = re.compile(r"steps completed through s(\d+)")
_ASKS_SUMMARY = re.compile(
    r"(create|write|provide) a (detailed )?summary of (the|our|this) conversation"
    r"|summari[sz]e (the|our|this) conversation",
    re.IGNORECASE,
)
"""How the clients ask for their compaction summary (Claude Code: "Your task is to create a
detailed summary of the conversation so far")."""
_ASKS_ANCHORED = re.compile(
    r"Create a new anchored summary from the conversation history"
    r"|Construct a new summary that combines both"
)
"""OpenCode 1.18's compaction request: one user message that serializes the history inside
`<conversation>` tags (and a `<prior-summary>` from its last compaction, which carries the
progress line, so that alone does not make it a compacted history)."""
_ASKS_SO_FAR = "What did we do so far?"
"""OpenCode's other compaction form: its history, then this question as the last message."""
_SERIALIZED_DONE = re.compile(r'"description":"Step (\d+)"\}\)\n\[Tool (?:result|error)\]')
"""A step's call followed by its result, as OpenCode serializes history for its summary."""
_STEP_ID = re.compile(r"_cp_l(\d+)$")
_BEGIN = "=== PART {k:02d} BEGIN ==="
_END = "=== PART {k:02d} END ==="


def _edit_setting(k: int) -> str:
    return f"LIMIT_{k + 100:04d}"


def _is_edit(k: int) -> bool:
    return k % EDIT_EVERY == EDIT_EVERY - 1


def make_parts(root: Path) -> None:
    """Write the session's log parts under `root/logs/`."""
    folder = root / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(LONG_STEPS):
        lines = [_BEGIN.format(k=k)]
        n = 0
        while sum(len(x) + 1 for x in lines) < PART_CHARS - 40:
            n += 1
            lines.append(f"[{k:02d}-{n:04d}] CC src/app/unit_{(k * 31 + n) % 211:03d}.c ... ok")
        lines.append(_END.format(k=k))
        (folder / f"part_{k:02d}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def long_edits_applied(module_text: str) -> int:
    """How many of the session's edits the module shows."""
    return sum(
        f"\n{_edit_setting(k)} = {7000 + k}\n" in module_text
        for k in range(LONG_STEPS)
        if _is_edit(k)
    )


def step_command(k: int) -> str:
    """The shell command of step `k`."""
    if _is_edit(k):
        name = _edit_setting(k)
        return f"sed -i 's/^{name} = .*/{name} = {7000 + k}/' {MODULE_PATH}"
    return f"cat logs/part_{k:02d}.log"


def is_compaction(request: Request) -> bool:
    """Whether the client asks the model to summarise the conversation (its compaction): the
    last message is the user's and asks for a summary (OpenCode's anchored-summary request or
    its "What did we do so far?"), and is not a compacted history that carries one (`steps
    completed through`)."""
    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user":
        return False
    if _ASKS_ANCHORED.search(last.text) is not None or last.text.strip() == _ASKS_SO_FAR:
        return True
    if _DONE.search(last.text):
        return False
    return _ASKS_SUMMARY.search(last.text) is not None


def recent_in_view(request: Request) -> int:
    """Of the last `RECENT` printed parts, how many `request` holds whole (both markers in one
    message and the part's length)."""
    printed = [k for k in range(LONG_STEPS) if not _is_edit(k)][-RECENT:]
    texts = [m.text for m in request.messages]
    whole = 0
    for k in printed:
        begin, end = _BEGIN.format(k=k), _END.format(k=k)
        if any(begin in t and end in t and len(t) >= PART_CHARS - 100 for t in texts):
            whole += 1
    return whole


@dataclass(slots=True)
class LongModel:
    """A `Responder` for `ReplayProvider` playing the long session for one client."""

    id_prefix: str
    """Call id prefix (`toolu` for Anthropic, `call` for OpenAI)."""
    tools: frozenset[str]
    """Tool names that mark a request as the client's agent turn."""
    shell: str
    """The client's shell tool (`Bash`, `bash`)."""
    replies: list[str] = field(default_factory=list)
    """Per reply: `s<k>` (a step), `compact`, `side` or `answer`."""
    compactions: int = 0
    final_view: int | None = None
    """`recent_in_view` of the request answered with the final answer."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, api: Api, body: Mapping[str, Any], request: Request) -> Message:
        """The reply to one model request."""
        done = self._done(request)
        if is_compaction(request):
            last = max(done) if done else -1
            text = (
                f"<summary>Reviewing the logs in order: steps completed through s{last}. "
                "Next: the following part.</summary>"
            )
            return self._reply("compact", Message("assistant", text))
        names = {_name(t) for t in body.get("tools") or [] if isinstance(t, Mapping)}
        if not self.tools <= names:
            return self._reply("side", Message("assistant", side_answer(request)))
        step = next((k for k in range(LONG_STEPS) if k not in done), None)
        if step is None:
            with self._lock:
                self.final_view = recent_in_view(request)
            return self._reply("answer", Message("assistant", LONG_ANSWER))
        args = {"command": step_command(step), "description": f"Step {step}"}
        call = ToolCall(f"{self.id_prefix}_cp_l{step}", self.shell, json.dumps(args))
        return self._reply(f"s{step}", Message("assistant", f"Step {step}.", tool_calls=(call,)))

    @staticmethod
    def _done(request: Request) -> set[int]:
        done: set[int] = set()
        for message in request.messages:
            if message.role == "tool" and message.tool_call_id:
                found = _STEP_ID.search(message.tool_call_id)
                if found:
                    done.add(int(found.group(1)))
            for through in _DONE.findall(message.text):
                done.update(range(int(through) + 1))
            if message.role == "user":  # history serialized into a compaction request
                done.update(int(k) for k in _SERIALIZED_DONE.findall(message.text))
        return done

    def _reply(self, what: str, message: Message) -> Message:
        with self._lock:
            self.replies.append(what)
            if what == "compact":
                self.compactions += 1
        return message


def _name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
    return str(name)


LONG_MODELS = {
    "long-claude-code": lambda: LongModel("toolu", frozenset({"Bash"}), "Bash"),
    "long-opencode": lambda: LongModel("toolu", frozenset({"bash"}), "bash"),
}
"""Per long plan: a fresh model for one run."""

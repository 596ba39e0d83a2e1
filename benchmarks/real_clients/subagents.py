"""Claude Code's sub-agents: the task split over two conversations of one client run.

The main conversation lists the files and then, instead of printing the build log itself,
delegates that step to a sub-agent through Claude Code's `Agent` tool; it reads the module,
greps, edits, runs the check and answers as in the one-conversation task. The sub-agent is a
separate conversation of the same run (its own system prompt, its first user message is the
delegated prompt): it prints the last 120,000 characters of the log (recalling the error lines
when the proxy offers `recall` and shortened the log) and returns the error line. Its result
comes back to the main conversation as the `Agent` call's tool result.

`SubagentModel` plays both: a request whose user turn carries the delegated prompt is the
sub-agent's; other requests with the main tools are the main conversation's; requests without
tools are Claude Code's side calls. `conversation_leaks` checks that the proxy keeps the two
apart (DESIGN 2.7: the model reads only its own conversation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scripted import PLANS, Plan, ScriptedModel, side_answer
from task import LOG_PATH, PROMPT

from cachepilot.messages import Message
from cachepilot.sim.render import Request
from cachepilot.wire import Api

__all__ = [
    "AGENT_TOOL",
    "MAIN_MARKERS",
    "SUBAGENT_PROMPT",
    "SUBAGENT_RESULT",
    "SUB_MARKERS",
    "SubagentModel",
    "conversation_leaks",
    "is_subagent_body",
    "split_conversations",
]

AGENT_TOOL = "Agent"
"""Claude Code 2.1's sub-agent tool (`description`, `prompt`, `subagent_type`,
`run_in_background`, ...; its tools list in the requests it sends)."""
SUBAGENT_PROMPT = (
    f"Print the end of {LOG_PATH} (tail -c 120000 {LOG_PATH}) and report its one ERROR line "
    "word for word."
)
SUBAGENT_RESULT = (
    "The build log's error: REQUEST_TIMEOUT=5 in src/app/limits.py is below the minimum of "
    "30 seconds."
)
_MAIN_TOOLS = frozenset({"Bash", "Read", "Edit", "Grep", AGENT_TOOL})
_SUB_PREFIX = "toolu_sub"
_SUB_VOICE = "Sub-agent next"
_RECALL_REF = re.compile(r'ref=\\?"([0-9a-f]{12})\\?"')

MAIN_MARKERS = (
    "toolu_cp_",  # the main conversation's call ids (the sub-agent's are `toolu_sub_cp_`)
    "Next: ",  # the main conversation's step texts
    "LIMIT_0003 = 21",  # the module as the main conversation's Read returns it
    "check passed: REQUEST_TIMEOUT",  # the check's output
    PROMPT[:48],  # the user's task
)
"""Text only the main conversation's own work produces."""
SUB_MARKERS = (
    "toolu_sub_cp_",  # the sub-agent's call ids
    f"{_SUB_VOICE}: ",  # its step texts
    "CC src/app/module_",  # the log lines only the sub-agent prints
    "let me read its error lines in full",  # its recall preamble
)
"""Text only the sub-agent's conversation produces (its result, which Claude Code passes back,
holds none of it)."""


def _delegate(step: str, root: str) -> tuple[str, dict[str, Any]]:
    if step == "log":
        return AGENT_TOOL, {
            "description": "Find the build error",
            "prompt": SUBAGENT_PROMPT,
            "subagent_type": "general-purpose",
            # The next step depends on its result: wait for it (agents run in the background
            # by default).
            "run_in_background": False,
        }
    return PLANS["claude-code"].step(step, root)


MAIN_PLAN = Plan("toolu", _MAIN_TOOLS, _delegate)
"""The main conversation: every step, the log one delegated to a sub-agent."""
SUB_PLAN = Plan(
    _SUB_PREFIX,
    frozenset({"Bash"}),
    PLANS["claude-code-large"].step,
    steps=("log",),
    answer=SUBAGENT_RESULT,
    voice=_SUB_VOICE,
)
"""The sub-agent: prints the log (recalling its error lines if the proxy shortened it) and
returns the error line."""


def _user_texts(body: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for message in body.get("messages") or []:
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(
                str(b.get("text", ""))
                for b in content
                if isinstance(b, Mapping) and b.get("type") == "text"
            )
    return out


def is_subagent_body(body: Mapping[str, Any]) -> bool:
    """Whether an Anthropic request body is the sub-agent's: a user turn's text (never a tool
    result or an assistant's call) carries the delegated prompt."""
    return any(SUBAGENT_PROMPT in text for text in _user_texts(body))


def _tool_names(body: Mapping[str, Any]) -> set[str]:
    return {
        str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, Mapping)
    }  # fmt: skip


def split_conversations(
    bodies: Sequence[Mapping[str, Any]],
) -> dict[str, list[int]]:
    """Indexes of the agent requests of each conversation (`main`, `sub`); side calls (no
    tools) belong to neither."""
    out: dict[str, list[int]] = {"main": [], "sub": []}
    for k, body in enumerate(bodies):
        names = _tool_names(body)
        if is_subagent_body(body) and SUB_PLAN.tools <= names:
            out["sub"].append(k)
        elif MAIN_PLAN.tools <= names:
            out["main"].append(k)
    return out


@dataclass(slots=True)
class SubagentModel:
    """A `Responder` for `ReplayProvider` playing both conversations of the sub-agent task."""

    root: str
    """Absolute path of the scratch repository."""
    main: ScriptedModel = field(init=False)
    sub: ScriptedModel = field(init=False)
    side: int = 0
    """Side calls answered."""

    def __post_init__(self) -> None:
        self.main = ScriptedModel(MAIN_PLAN, self.root)
        self.sub = ScriptedModel(SUB_PLAN, self.root)

    @property
    def recalls(self) -> int:
        """Recall calls issued in either conversation."""
        return self.main.recalls + self.sub.recalls

    def __call__(self, api: Api, body: Mapping[str, Any], request: Request) -> Message:
        """The reply to one model request."""
        names = _tool_names(body)
        if is_subagent_body(body) and SUB_PLAN.tools <= names:
            return self.sub(api, body, request)
        if MAIN_PLAN.tools <= names:
            return self.main(api, body, request)
        self.side += 1
        return Message("assistant", side_answer(request))


def _ref_owners(requests: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """Per recall ref the proxy put into the requests: the conversation of the first request
    that carries it (where the proxy shortened that output)."""
    owners: dict[str, str] = {}
    for name, body in requests:
        for ref in _RECALL_REF.findall(json.dumps(body)):
            owners.setdefault(ref, name)
    return owners


def _by_conversation(
    requests: Sequence[tuple[str, Mapping[str, Any]]],
) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {"main": [], "sub": []}
    for name, body in requests:
        out.setdefault(name, []).append(body)
    return out


def conversation_leaks(
    straight: Sequence[tuple[str, Mapping[str, Any]]],
    proxied: Sequence[tuple[str, Mapping[str, Any]]],
) -> list[str]:
    """Where a proxied request of one conversation carries content of the other that the client
    did not send. Each run is its agent requests in order, as (conversation, body). Content of
    the other conversation: its markers (`MAIN_MARKERS`, `SUB_MARKERS`) and the recall refs
    the proxy issued in it, found in the request but in none of the same conversation's
    straight requests (the client's own)."""
    markers = {"main": MAIN_MARKERS, "sub": SUB_MARKERS}
    owners = _ref_owners(proxied)
    own = {n: [json.dumps(b) for b in bodies] for n, bodies in _by_conversation(straight).items()}
    out: list[str] = []
    for name, bodies in _by_conversation(proxied).items():
        other = "sub" if name == "main" else "main"
        foreign = [*markers[other], *sorted(r for r, n in owners.items() if n == other)]
        for k, body in enumerate(bodies):
            text = json.dumps(body)
            for marker in foreign:
                if marker in text and not any(marker in s for s in own.get(name, ())):
                    out.append(f"{name} request {k} carries {marker!r} of the {other} conversation")
    return out

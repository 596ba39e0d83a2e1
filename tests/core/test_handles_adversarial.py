"""Host pointer lines kept by maintenance stubs and folds, as an adversary writes them:
credentials in a pointer line, and a line of content that only mentions a path."""

from __future__ import annotations

import json

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold import plan_fold
from cachepilot.fold.request import FOLD_HANDLES_INTRO, fold_handles_block
from cachepilot.maintenance.policy import stub_text
from cachepilot.messages import Message, ToolCall, message_keys
from cachepilot.reduce.handles import host_handles

TOKEN = "ghp_R8xQ2vLm9TzK4pW7nY3bC6dF1gH5jK0aS2eU"
# A shell trace (set -x) of a command that saved its output: the line is a "pointer line".
TRACE = (
    f'+ curl -sS -H "Authorization: Bearer {TOKEN}" https://api.github.com/repos/acme/app/runs'
    " -o /tmp/runs.json  # full output saved to /tmp/runs.json"
)


def _transcript(count: int, output: str) -> list[Message]:
    out = [Message(role="user", content="Check the CI runs.", id="m0")]
    for n in range(count):
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"ci {n}"}))
        out.append(Message(role="assistant", content="", tool_calls=(call,), id=f"a{n}"))
        body = "\n".join(f"run {n}-{i}: job build_{i} passed in {i}s" for i in range(120))
        text = f"{output}\n{body}" if n == 0 else body
        out.append(
            Message(role="tool", content=text, tool_call_id=call.id, name="bash", id=f"r{n}")
        )
    return out


def test_a_fold_redacts_credentials_in_the_pointer_lines_it_keeps() -> None:
    # The fold redacts its summary ("credential shapes copied from the folded messages are
    # replaced", fold/plan.py `_finish`), but the handle lines go into the header verbatim,
    # and `_carried_handles` carries them into every later fold.
    messages = _transcript(6, TRACE)
    edit = plan_fold(
        messages,
        message_keys(messages),
        store=InMemoryArtifactStore(),
        thread="t",
        protect_tail_tokens=1_500,
        min_tokens=0,
    )
    assert edit is not None and FOLD_HANDLES_INTRO in edit.text  # the pointer line was kept
    assert TOKEN not in edit.text, "a credential survives in the fold header's pointer line"


def test_a_stub_redacts_credentials_in_the_pointer_lines_it_keeps() -> None:
    # The stub's `keeps` and `reason` are redacted; its handle lines are not.
    message = Message(role="tool", content=f"{TRACE}\nok", tool_call_id="c1", name="bash")
    text = stub_text(
        "stub", message, 900, "0123456789ab", "old", handles=host_handles(message.text)
    )
    assert "/tmp/runs.json" in text  # the pointer line was kept
    assert TOKEN not in text, "a credential survives in the stub's pointer line"


def test_a_fold_does_not_present_a_line_of_a_file_as_the_hosts_saved_output() -> None:
    # A tool output (`cat README.md`) that merely mentions a path: after the fold the model
    # reads "The host saved these folded outputs in full" followed by this line, which is
    # not true (DESIGN §2.7): the folded output is not at /var/log/acme/build.log.
    readme = "## Logging\nBuild logs are written to /var/log/acme/build.log by default.\n"
    message = Message(role="tool", content=readme, tool_call_id="c1", name="read_file")
    assert fold_handles_block([message]) == ""

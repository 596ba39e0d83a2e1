"""Adversarial cases for conversations and current values through the proxy: the real
`openai` and `anthropic` clients, one API key, no thread header, the replay provider as the
upstream."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH
from test_proxy_conversations import (
    ALICE_SECRET,
    BASH,
    READ,
    SETTINGS,
    body_text,
    client,
    read,
)

from cachepilot.messages import Message, ToolCall
from cachepilot.refs import make_ref
from cachepilot.wire.anthropic import MAX_CACHE_MARKS, cache_mark_count
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SHARED = "You are the team's coding assistant.\nRead files before you answer; keep answers short.\n"


def _call(call: ToolCall, content: str = "Reading it.") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        ],
    }


def test_identical_first_requests_then_diverging_users_stay_apart() -> None:
    """Two users send byte-identical first requests (same system prompt, same first
    message), then their conversations diverge: bob never sees alice's output, and his
    recall of her ref answers "not found"."""
    a_call = ToolCall("call_a0", "bash", json.dumps({"command": "./sync-ledger"}))
    b_call = read("call_b0", "settings.conf")
    stolen = ToolCall("call_b1", "recall", json.dumps({"ref": make_ref(ALICE_SECRET)}))
    script = ReplayScript(
        [
            ReplayTurn(Message("assistant", "Reading it.", tool_calls=(a_call,))),
            ReplayTurn(Message("assistant", "Reading it.", tool_calls=(b_call,))),
            ReplayTurn(Message("assistant", "Done.")),
            ReplayTurn(Message("assistant", "Let me look at that.", tool_calls=(stolen,))),
            ReplayTurn(Message("assistant", "Nothing there.")),
        ]
    )
    start: list[dict[str, Any]] = [
        {"role": "system", "content": SHARED},
        {"role": "user", "content": "Please check the project."},
    ]
    alice2 = [*start, _call(a_call), {"role": "tool", "tool_call_id": a_call.id,
                                      "content": ALICE_SECRET}]  # fmt: skip
    bob2 = [*start, _call(b_call), {"role": "tool", "tool_call_id": b_call.id,
                                    "content": SETTINGS}]  # fmt: skip
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for messages in (start, start, alice2, bob2):
            api.chat.completions.create(
                model="m",
                messages=messages,  # type: ignore[arg-type]
                tools=[READ, BASH],  # type: ignore[list-item]
            )
        records = upstream.records
    assert len(records) == 5
    assert make_ref(ALICE_SECRET) in body_text(records[2].body)
    answer = records[4].body["messages"][-1]
    assert answer["role"] == "tool" and "was not found in this conversation" in answer["content"]
    for record in (records[3], records[4]):
        text = body_text(record.body)
        assert "IBAN" not in text and "syncing ledger" not in text


def _budget_system(budget: int) -> str:
    return (
        "You are the build agent.\n"
        f"Remaining budget: {budget} tokens\n"
        "Stop when the budget is spent.\n"
    )


def _last_budget(body: dict[str, Any]) -> str:
    """The budget a reader of `body` takes as current (the system prompt, then the block and
    the update notes in reading order)."""
    texts = [m["content"] for m in body["messages"] if isinstance(m["content"], str)]
    found = ""
    for text in texts:
        for line in text.splitlines():
            if line.startswith("Remaining budget: "):
                found = line.split()[2]
            elif line.startswith("{{learned_1}} = "):
                found = line.split(" = ", 1)[1]
    return found


def test_a_retry_with_a_moved_value_stays_in_its_conversation() -> None:
    """A client retries its last request (a timeout), its system prompt's budget having moved
    meanwhile: still one conversation (its refs recallable), the budget read is current."""
    calls = [ToolCall(f"call_{i}", "bash", json.dumps({"command": f"step {i}"})) for i in range(4)]
    turns = [ReplayTurn(Message("assistant", "Next step.", tool_calls=(c,))) for c in calls]
    script = ReplayScript([*turns[:3], turns[2], turns[3], ReplayTurn(Message("assistant", "Ok."))])
    history: list[dict[str, Any]] = [{"role": "user", "content": "Build it."}]
    budgets = [1200, 1150, 1100, 1050, 1000, 950]
    sent_history: list[list[dict[str, Any]]] = []
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for i, budget in enumerate(budgets):
            if i in (1, 2, 4):  # the previous call answered: its step done
                step = {1: 0, 2: 1, 4: 2}[i]
                history = [
                    *history,
                    _call(calls[step], "Next step."),
                    {"role": "tool", "tool_call_id": calls[step].id, "content": f"ok {step}"},
                ]
            elif i == 5:
                history = [
                    *history,
                    _call(calls[3], "Next step."),
                    {"role": "tool", "tool_call_id": calls[3].id, "content": "ok 3"},
                ]
            # i == 3 retries i == 2's messages with the budget moved
            sent_history.append(history)
            api.chat.completions.create(
                model="m",
                messages=[{"role": "system", "content": _budget_system(budget)}, *history],  # type: ignore[list-item]
                tools=[BASH],  # type: ignore[list-item]
            )
        records = upstream.records
        names = proxy.engine.threads.names()
    assert sent_history[3] == sent_history[2]
    assert [_last_budget(r.body) for r in records] == [str(b) for b in budgets]
    assert len(names) == 1, names


def _marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code's marks: the last two messages' last blocks."""
    out = json.loads(json.dumps(messages))
    for message in out[-2:]:
        content = message["content"]
        if isinstance(content, str):
            content = message["content"] = [{"type": "text", "text": content}]
        content[-1]["cache_control"] = {"type": "ephemeral"}
    return out


def test_notes_on_marked_anthropic_messages_keep_four_marks_and_the_current_value() -> None:
    """A Claude Code shaped session (both system blocks and the last two messages marked)
    whose system prompt's budget moves every call: the notes land after the marked blocks,
    the upstream never sees more than four marks, and it reads the current budget."""
    filler = " ".join(f"rule{i} keep the build green" for i in range(400))
    calls = [ToolCall(f"toolu_{i}", "bash", json.dumps({"command": f"make {i}"})) for i in range(3)]
    script = ReplayScript(
        [
            *(ReplayTurn(Message("assistant", "Running.", tool_calls=(c,))) for c in calls),
            ReplayTurn(Message("assistant", "Built.")),
        ]
    )
    turns: list[dict[str, Any]] = [{"role": "user", "content": "Build the project."}]
    budgets = [1200, 1150, 1100, 1050]
    with (
        ReplayProvider(script, profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        api = anthropic.Anthropic(base_url=proxy.root, api_key="sk-ant-test", max_retries=0)
        for i, budget in enumerate(budgets):
            system = [
                {
                    "type": "text",
                    "text": f"You are the build agent.\nRemaining budget: {budget} tokens\n",
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": filler, "cache_control": {"type": "ephemeral"}},
            ]
            api.messages.create(
                model="claude-test",
                max_tokens=256,
                system=system,  # type: ignore[arg-type]
                messages=_marked(turns),  # type: ignore[arg-type]
                tools=[ANTHROPIC_BASH],  # type: ignore[list-item]
            )
            if i < len(calls):
                call = calls[i]
                turns += [
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "text", "text": "Running."},
                            {"type": "tool_use", "id": call.id, "name": "bash",
                             "input": {"command": f"make {i}"}},
                        ],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": call.id,
                                     "content": f"ok {i}"}],
                    },
                ]  # fmt: skip
        records = upstream.records
    assert len(records) == len(budgets)
    for record, budget in zip(records, budgets, strict=True):
        assert cache_mark_count(record.body) <= MAX_CACHE_MARKS
        text = body_text(record.body)
        shown = ""
        for line in text.replace("\\n", "\n").splitlines():
            if "Remaining budget: " in line and "{{" not in line:
                shown = line.split("Remaining budget: ")[1].split()[0]
            if line.startswith("{{learned_1}} = "):
                shown = line.split(" = ", 1)[1].split('"')[0]
        assert shown == str(budget), (budget, text[-600:])
    # The second call learns the span (the client's own prompt changed): append-only after.
    assert all(r.prefix_extends for r in records[2:])


def test_a_recall_splice_reads_the_current_value() -> None:
    """The model calls `recall` on a request whose budget moved: the proxy answers the call
    itself and sends the continuation upstream; that request reads the current budget and
    extends the one before it."""
    sync = ToolCall("call_0", "bash", json.dumps({"command": "./sync-ledger"}))
    look = ToolCall("call_1", "recall", json.dumps({"ref": make_ref(ALICE_SECRET)}))
    script = ReplayScript(
        [
            ReplayTurn(Message("assistant", "Syncing.", tool_calls=(sync,))),
            ReplayTurn(Message("assistant", "Let me look.", tool_calls=(look,))),
            ReplayTurn(Message("assistant", "The IBAN is there.")),
        ]
    )
    history: list[dict[str, Any]] = [{"role": "user", "content": "Sync the ledger."}]
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for i, budget in enumerate([1200, 1150]):
            if i:
                history = [
                    *history,
                    _call(sync, "Syncing."),
                    {"role": "tool", "tool_call_id": sync.id, "content": ALICE_SECRET},
                ]
            reply = api.chat.completions.create(
                model="m",
                messages=[{"role": "system", "content": _budget_system(budget)}, *history],  # type: ignore[list-item]
                tools=[BASH],  # type: ignore[list-item]
            )
        records = upstream.records
    assert reply.choices[0].message.content == "The IBAN is there."
    assert len(records) == 3  # the recall answered by the proxy, its continuation sent
    assert [_last_budget(r.body) for r in records] == ["1200", "1150", "1150"]
    spliced = records[2].body["messages"]
    assert spliced[: len(records[1].body["messages"])] == records[1].body["messages"]
    assert "IBAN DE44500105175407324931" in body_text(records[2].body)


def test_an_edited_last_user_message_keeps_its_conversations_refs() -> None:
    """The user edits the question they just sent (a chat UI's "edit and resend"): the
    earlier archived output of that same conversation is still recallable."""
    sync = ToolCall("call_0", "bash", json.dumps({"command": "./sync-ledger"}))
    look = ToolCall("call_1", "recall", json.dumps({"ref": make_ref(ALICE_SECRET)}))
    script = ReplayScript(
        [
            ReplayTurn(Message("assistant", "Syncing.", tool_calls=(sync,))),
            ReplayTurn(Message("assistant", "Synced.")),
            ReplayTurn(Message("assistant", "Checking.")),
            ReplayTurn(Message("assistant", "Let me look.", tool_calls=(look,))),
            ReplayTurn(Message("assistant", "Found it.")),
        ]
    )
    system = {"role": "system", "content": SHARED}
    done: list[dict[str, Any]] = [
        {"role": "user", "content": "Sync the ledger."},
        _call(sync, "Syncing."),
        {"role": "tool", "tool_call_id": sync.id, "content": ALICE_SECRET},
        {"role": "assistant", "content": "Synced."},
    ]
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        requests = [
            done[:1],
            done[:3],
            [*done, {"role": "user", "content": "Whats the IBNA?"}],
            [*done, {"role": "user", "content": "What is the IBAN?"}],  # edited
        ]
        for messages in requests:
            api.chat.completions.create(
                model="m",
                messages=[system, *messages],  # type: ignore[list-item]
                tools=[BASH],  # type: ignore[list-item]
            )
        records = upstream.records
        names = proxy.engine.threads.names()
    assert len(records) == 5
    answer = records[4].body["messages"][-1]
    assert answer["role"] == "tool" and "00000 syncing ledger_0 ... ok" in answer["content"]
    # Everything before the edited message is sent as before (its cache stays warm).
    assert records[3].body["messages"][:-1] == records[2].body["messages"][:-1], names


def test_seeded_identical_histories_of_two_users_stay_apart() -> None:
    """Two users whose system prompts differ in an id-like span send the same first request,
    seeded with an example tool exchange (fixed ids): two conversations, bob's request
    carries nothing of alice's."""
    seed = ToolCall("call_example", "read_file", json.dumps({"path": "README.md"}))
    script = ReplayScript(
        [
            ReplayTurn(Message("assistant", "Hello alice.")),
            ReplayTurn(Message("assistant", "Hello bob.")),
        ]
    )
    seeded: list[dict[str, Any]] = [
        {"role": "user", "content": "Show me the README."},
        _call(seed),
        {"role": "tool", "tool_call_id": seed.id, "content": "# Payments\nRun make."},
        {"role": "user", "content": "Please check the project."},
    ]
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for user in ("alice-7731", "bob-2209"):
            system = f"You are the team's coding assistant.\nUser: {user}\nBe brief.\n"
            api.chat.completions.create(
                model="m",
                messages=[{"role": "system", "content": system}, *seeded],  # type: ignore[list-item]
                tools=[READ],  # type: ignore[list-item]
            )
        records = upstream.records
        names = proxy.engine.threads.names()
    assert len(names) == 2
    assert "alice-7731" not in body_text(records[1].body)

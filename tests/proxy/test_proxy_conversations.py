"""Conversations never merge in the proxy, and each reads its own current values: the real
`openai` client over loopback HTTP, one API key, no thread header, upstream = the replay
provider."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from openai import OpenAI
from proxy_helpers import running_proxy

from cachepilot.messages import Message, ToolCall
from cachepilot.refs import make_ref
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the project.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}


def client(base_url: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="sk-team-shared", max_retries=0, timeout=30)


def extends(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether `after` starts with `before`: the same tools, its messages first."""
    sent = before["messages"]
    return after.get("tools") == before.get("tools") and after["messages"][: len(sent)] == sent


def body_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# aider-shaped: a tool-less session, a second one a day later


def aider_system(date: str) -> str:
    return (
        "Act as an expert software developer.\n"
        "Always use best practices when coding.\n"
        f"Current date: {date}\n"
        "Reply in English. Describe each change with a SEARCH/REPLACE block.\n"
    )


REPO_MAP = "Here are summaries of some files present in my git repository:\n\napp.py:\n  def main\n"
OK = "Ok, I won't try and edit those files without asking first."


def aider_turns(date: str, questions: list[str], answers: list[str]) -> list[list[dict[str, Any]]]:
    """The requests of one aider-like session: the repo map exchange, then the questions."""
    head: list[dict[str, Any]] = [
        {"role": "system", "content": aider_system(date)},
        {"role": "user", "content": REPO_MAP},
        {"role": "assistant", "content": OK},
    ]
    out = []
    done: list[dict[str, Any]] = []
    for i, question in enumerate(questions):
        out.append([*head, *done, {"role": "user", "content": question}])
        done += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answers[i]},
        ]
    return out


def test_a_session_a_day_later_is_its_own_thread_and_reads_its_own_date() -> None:
    answers = ["First answer.", "Second answer.", "Third answer.", "Fourth answer."]
    script = ReplayScript([ReplayTurn(Message("assistant", a)) for a in answers])
    day1 = aider_turns("2026-11-28", ["Add a --verbose flag.", "Now add tests."], answers[:2])
    day2 = aider_turns("2026-11-29", ["Rename main to run.", "Update the docs."], answers[2:])
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for messages in [*day1, *day2]:
            api.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        records = upstream.records
        names = proxy.engine.threads.names()
    assert len(records) == 4
    assert len(names) == 2  # two sessions, two threads
    for record in records[:2]:
        assert "2026-11-28" in body_text(record.body) and "2026-11-29" not in body_text(record.body)
    for record in records[2:]:
        text = body_text(record.body)
        assert "2026-11-29" in text and "2026-11-28" not in text
        assert "Add a --verbose flag" not in text  # nothing of the first session
    assert records[1].prefix_extends and records[3].prefix_extends


# --------------------------------------------------------------------------------------------
# Two users on one key


def user_system(user: str, project: str) -> str:
    return (
        "You are the team's coding assistant.\n"
        f"User: {user}\n"
        f"Project: {project}\n"
        "Read files before you answer; keep answers short.\n"
    )


ALICE = user_system("alice-7731", "payments-v2")
BOB = user_system("bob-2209", "search-v3")
SETTINGS = "\n".join(f"setting_{i:04d} = value {i % 13}" for i in range(2500))
ALICE_SECRET = "\n".join(
    [
        *(f"{i:05d} syncing ledger_{i % 97} ... ok" for i in range(3000)),
        "IBAN DE44500105175407324931",
    ]
)
FIRST = "Please check settings.conf."


def read(call_id: str, path: str) -> ToolCall:
    return ToolCall(call_id, "read_file", json.dumps({"path": path}))


def conversation(
    system: str, call: ToolCall, output: str, answer: str
) -> list[list[dict[str, Any]]]:
    start: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": FIRST},
    ]
    second = [
        *start,
        {
            "role": "assistant",
            "content": "Reading it.",
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": output},
    ]
    third = [
        *second,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Thanks."},
    ]
    return [start, second, third]


@pytest.mark.parametrize("cache_key", [None, "team-app"])
def test_two_users_on_one_key_stay_two_conversations(cache_key: str | None) -> None:
    """Interleaved, with the same first message (and a shared `prompt_cache_key`): two
    threads; bob's requests carry nothing of alice's (values, outputs, pointers)."""
    a_call, b_call = read("call_a0", "settings.conf"), read("call_b0", "settings.conf")
    script = ReplayScript(
        [
            ReplayTurn(Message("assistant", "Reading it.", tool_calls=(a_call,))),
            ReplayTurn(Message("assistant", "Reading it.", tool_calls=(b_call,))),
            ReplayTurn(Message("assistant", "Alice's settings look fine.")),
            ReplayTurn(Message("assistant", "Bob's settings look fine.")),
            ReplayTurn(Message("assistant", "You are welcome, alice.")),
            ReplayTurn(Message("assistant", "You are welcome, bob.")),
        ]
    )
    alice = conversation(ALICE, a_call, SETTINGS, "Alice's settings look fine.")
    bob = conversation(BOB, b_call, SETTINGS, "Bob's settings look fine.")
    extra = {} if cache_key is None else {"prompt_cache_key": cache_key}
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for a, b in zip(alice, bob, strict=True):
            for messages in (a, b):
                api.chat.completions.create(
                    model="m",
                    messages=messages,  # type: ignore[arg-type]
                    tools=[READ],  # type: ignore[list-item]
                    extra_body=extra,
                )
        records = upstream.records
        names = proxy.engine.threads.names()
    assert len(names) == 2
    alice_bodies = [body_text(r.body) for r in records[0::2]]
    bob_bodies = [body_text(r.body) for r in records[1::2]]
    for text in alice_bodies:
        assert "bob-2209" not in text and "search-v3" not in text
    for text in bob_bodies:
        assert "alice-7731" not in text and "payments-v2" not in text
        assert "call_a0" not in text  # no pointer into alice's conversation
    # Each conversation's prefix only grows.
    for mine in (records[0::2], records[1::2]):
        for before, after in itertools.pairwise(mine):
            assert extends(before.body, after.body)


def test_a_recall_of_another_conversations_ref_is_not_found() -> None:
    a_call = ToolCall("call_a0", "bash", json.dumps({"command": "./sync-ledger"}))
    b_call = read("call_b0", "settings.conf")
    stolen = ToolCall("call_b1", "recall", json.dumps({"ref": make_ref(ALICE_SECRET)}))
    script = ReplayScript(
        [
            ReplayTurn(Message("assistant", "Reading it.", tool_calls=(a_call,))),
            ReplayTurn(Message("assistant", "Done.")),
            ReplayTurn(Message("assistant", "Reading it.", tool_calls=(b_call,))),
            ReplayTurn(Message("assistant", "Let me look at that.", tool_calls=(stolen,))),
            ReplayTurn(Message("assistant", "Nothing there.")),
        ]
    )
    alice = conversation(ALICE, a_call, ALICE_SECRET, "Done.")
    bob = conversation(BOB, b_call, SETTINGS, "Nothing there.")
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for messages in (*alice[:2], *bob[:2]):
            api.chat.completions.create(
                model="m",
                messages=messages,  # type: ignore[arg-type]
                tools=[READ, BASH],  # type: ignore[list-item]
            )
        records = upstream.records
    assert len(records) == 5
    alice_seen = body_text(records[1].body)
    assert make_ref(ALICE_SECRET) in alice_seen  # alice's output was archived under that ref
    answer = records[4].body["messages"][-1]
    assert answer["role"] == "tool" and "was not found in this conversation" in answer["content"]
    for record in records[2:]:
        text = body_text(record.body)
        assert "IBAN" not in text and "syncing ledger" not in text and "alice-7731" not in text


# --------------------------------------------------------------------------------------------
# A value changing inside one conversation


def test_a_budget_counting_down_reaches_the_upstream_current() -> None:
    """The same conversation, its system prompt's budget counting down: one thread, the
    system prompt byte-identical from the second call on, and each call's upstream request
    says the current budget after the cached prefix."""
    calls = [ToolCall(f"call_{i}", "bash", json.dumps({"command": f"step {i}"})) for i in range(5)]
    script = ReplayScript(
        [
            *(ReplayTurn(Message("assistant", "Next step.", tool_calls=(c,))) for c in calls),
            ReplayTurn(Message("assistant", "Done.")),
        ]
    )

    def system(i: int) -> str:
        return (
            "You are the build agent.\n"
            f"Remaining budget: {1200 - 50 * i} tokens\n"
            "Stop when the budget is spent.\n"
        )

    history: list[dict[str, Any]] = [{"role": "user", "content": "Build it."}]
    with ReplayProvider(script) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        for i in range(6):
            api.chat.completions.create(
                model="m",
                messages=[{"role": "system", "content": system(i)}, *history],  # type: ignore[list-item]
                tools=[BASH],  # type: ignore[list-item]
            )
            if i < 5:
                call = calls[i]
                history += [
                    {
                        "role": "assistant",
                        "content": "Next step.",
                        "tool_calls": [
                            {
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": call.id, "content": f"step {i} ok"},
                ]
        records = upstream.records
        names = proxy.engine.threads.names()
    assert len(names) == 1 and len(records) == 6
    for i, record in enumerate(records):
        messages = record.body["messages"]
        texts = [m["content"] if isinstance(m["content"], str) else "" for m in messages]
        lines = [ln for t in texts for ln in t.splitlines() if ln.startswith("{{learned_1}} = ")]
        if i == 0:
            assert f"Remaining budget: {1200} tokens" in texts[0]
        else:
            assert lines[-1] == f"{{{{learned_1}}}} = {1200 - 50 * i}"  # the current budget
    for before, after in itertools.pairwise(records[1:]):
        assert extends(before.body, after.body)

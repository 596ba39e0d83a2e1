"""The client's own forms reach the upstream: string or block list, one part or several.

Real `anthropic` and `openai` clients send the shapes real agents send (OpenCode's Anthropic
provider: every message a block list, its marks on the system and the last two messages;
Codex: a three-part developer message with the date in it) through the proxy to the replay
provider. Every upstream body extends the previous one (marks aside) wherever the client's
did, and every message keeps the form the client gave it.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import pytest
from openai import OpenAI
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BIG, CALL, FINAL, FLAT_BASH, plain_script

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.canonical import CanonicalConfig
from cachepilot.proxy import ProxyConfig
from cachepilot.proxy.forms import MAX_FORMS, BlockForms
from cachepilot_bench.replay import ReplayProvider, ReplayRecord

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MARK = {"type": "ephemeral"}
RULES = "Follow the house rules and keep every answer short. " * 120
HEADER = "You are OpenCode, the best coding agent on the planet."
ENVIRONMENT = f"Working directory: /work/app\nToday's date: 2026-11-28\n{RULES}"
TASK = "Build the project."


def unmarked(value: Any) -> Any:
    """`value` without any `cache_control` field (marks move by design; they are compared
    separately)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def extends(before: dict[str, Any], after: dict[str, Any], key: str) -> bool:
    """`after` (marks aside) is `before` with elements appended to its `key` list: every
    other field equal and the earlier elements byte for byte the same."""
    a, b = unmarked(before), unmarked(after)
    head = {k: v for k, v in a.items() if k != key} == {k: v for k, v in b.items() if k != key}
    old = json.dumps(a[key], sort_keys=True)
    new = json.dumps(b[key][: len(a[key])], sort_keys=True)
    return head and old == new


def assert_extends_like_the_client(
    sent: list[dict[str, Any]], records: list[ReplayRecord], key: str
) -> None:
    bodies = [r.body for r in records]
    assert len(bodies) == len(sent)
    for n in range(1, len(sent)):
        if extends(sent[n - 1], sent[n], key):
            assert extends(bodies[n - 1], bodies[n], key), f"request {n} breaks the prefix"


# --------------------------------------------------------------------------- Anthropic


def opencode_history() -> list[list[dict[str, Any]]]:
    """The three requests of a short session, every message a block list (as OpenCode)."""
    first = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
    second = [
        *first,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the build."},
                {"type": "tool_use", "id": CALL.id, "name": "bash", "input": {"command": "make"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": CALL.id, "content": BIG}],
        },
    ]
    third = [
        *second,
        {"role": "assistant", "content": [{"type": "text", "text": FINAL}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]
    return [first, second, third]


def opencode_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenCode's marks: both system blocks and the last block of the last two messages."""
    marked = copy.deepcopy(messages)
    for message in marked[-2:]:
        message["content"][-1]["cache_control"] = MARK
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [
            {"type": "text", "text": HEADER, "cache_control": MARK},
            {"type": "text", "text": ENVIRONMENT, "cache_control": MARK},
        ],
        "messages": marked,
        "tools": [ANTHROPIC_BASH],
    }


def first_text(body: dict[str, Any]) -> Any:
    return body["messages"][0]["content"]


def block_from_the_first_call(upstream: str) -> CachePilot:
    """A pilot that puts the context block in from the first call (where the block goes in a
    client's own message forms is what these tests check; by default it goes in only once a
    value changes)."""
    provider = ProxyConfig(upstream=upstream, port=0).provider
    config = Config(provider=provider, canonical=CanonicalConfig(move_when_changed=False))
    return CachePilot(config, store=InMemoryArtifactStore())


def test_opencode_block_messages_stay_blocks_when_its_marks_move() -> None:
    sent = [opencode_body(m) for m in opencode_history()]
    with (
        ReplayProvider(plain_script()) as upstream,
        running_proxy(
            upstream.base_url, pilot=block_from_the_first_call(upstream.base_url)
        ) as proxy,
    ):
        api = anthropic.Anthropic(base_url=proxy.root, api_key="sk-test", max_retries=0)
        for body in sent:
            api.messages.create(**body)
        records = upstream.records
    assert_extends_like_the_client(sent, records, "messages")
    for record in records:
        content = first_text(record.body)
        # One text block, as the client sent it; the context block (the date) went in front.
        assert isinstance(content, list) and len(content) == 1
        assert content[0]["type"] == "text" and content[0]["text"].endswith(TASK)
        assert content[0]["text"] != TASK and "2026-11-28" in content[0]["text"]
    # The client's marks stay where the client put them, and only there.
    assert "cache_control" in first_text(records[0].body)[0]
    assert "cache_control" not in first_text(records[2].body)[0]
    assert "2026-11-28" not in json.dumps(records[2].body["system"])
    # The build log was reduced (the proxy did rewrite this session).
    assert len(json.dumps(records[1].body)) < len(BIG) // 2


def test_string_messages_the_proxy_marked_stay_blocks() -> None:
    """A client that sends strings and no marks: the proxy's marks need blocks, and a message
    it marked is a block on every later request, so the body still only grows."""
    history = opencode_history()
    strings = [
        [
            {**m, "content": m["content"][0]["text"]}
            if m["content"][0]["type"] == "text" and len(m["content"]) == 1
            else m
            for m in messages
        ]
        for messages in history
    ]
    sent = [
        {"model": "m", "max_tokens": 1024, "system": f"{HEADER}\n{ENVIRONMENT}",
         "messages": m, "tools": [ANTHROPIC_BASH]}
        for m in strings
    ]  # fmt: skip
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = anthropic.Anthropic(base_url=proxy.root, api_key="sk-test", max_retries=0)
        for body in sent:
            api.messages.create(**body)
        records = upstream.records
    assert_extends_like_the_client(sent, records, "messages")
    marked = [
        i
        for i, m in enumerate(records[0].body["messages"])
        if isinstance(m["content"], list) and "cache_control" in m["content"][-1]
    ]
    assert marked == [0]  # the proxy marked the task, which the client sent as a string
    assert isinstance(first_text(records[2].body), list)
    # Messages the proxy never marked keep the client's string form.
    assert records[2].body["messages"][3]["content"] == FINAL
    last = records[2].body["messages"][-1]["content"]
    assert last == "Thanks" or unmarked(last) == [{"type": "text", "text": "Thanks"}]


def test_block_forms_stay_bounded() -> None:
    forms = BlockForms()
    forms.add({"role": "user", "content": f"message {i}"} for i in range(MAX_FORMS + 50))
    assert len(forms) == MAX_FORMS
    newest = f"message {MAX_FORMS + 49}"
    body = {
        "messages": [
            {"role": "user", "content": "message 0"},
            {"role": "user", "content": newest},
            {"role": "assistant", "content": newest},
        ]
    }
    out = forms.apply(body)
    assert out["messages"][0]["content"] == "message 0"  # forgotten: the oldest went first
    assert out["messages"][1]["content"] == [{"type": "text", "text": newest}]
    assert out["messages"][2]["content"] == newest  # another role
    assert body["messages"][1]["content"] == newest  # not mutated
    again = BlockForms.from_json([*forms.to_json(), "junk", 3])
    assert again.to_json() == forms.to_json()
    assert forms.apply({"messages": [{"role": "user", "content": "other"}]}) == {
        "messages": [{"role": "user", "content": "other"}]
    }


# --------------------------------------------------------------------------- Responses


DEVELOPER_PARTS = [
    "<permissions instructions>\nFilesystem sandboxing: workspace-write.\n"
    "</permissions instructions>",
    f"<environment_context>\n  <cwd>/work/app</cwd>\n  <current_date>2026-11-28</current_date>\n"
    f"</environment_context>\n{RULES}",
    "<collaboration_mode>\nDefault mode.\n</collaboration_mode>",
]


def codex_inputs() -> list[list[dict[str, Any]]]:
    developer = {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": t} for t in DEVELOPER_PARTS],
    }
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}
    first = [developer, user]
    call = {
        "type": "function_call",
        "call_id": CALL.id,
        "name": "bash",
        "arguments": CALL.arguments,
    }
    second = [*first, call, {"type": "function_call_output", "call_id": CALL.id, "output": BIG}]
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": FINAL, "annotations": []}],
    }
    thanks = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Thanks"}],
    }
    return [first, second, [*second, answer, thanks]]


def test_codex_developer_message_keeps_its_parts() -> None:
    sent = [
        {"model": "gpt-5.4", "instructions": "You are Codex.", "input": items,
         "tools": [FLAT_BASH], "store": False}
        for items in codex_inputs()
    ]  # fmt: skip
    with (
        ReplayProvider(plain_script()) as upstream,
        running_proxy(
            upstream.base_url, pilot=block_from_the_first_call(upstream.base_url)
        ) as proxy,
    ):
        api = OpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0, timeout=30)
        for body in sent:
            api.responses.create(**body)
        records = upstream.records
    assert_extends_like_the_client(sent, records, "input")
    for record in records:
        developer = record.body["input"][0]
        parts = developer["content"]
        assert [p["type"] for p in parts] == ["input_text"] * 3
        # The parts without volatile values are the client's; the date left its part.
        assert parts[0]["text"] == DEVELOPER_PARTS[0]
        assert parts[2]["text"] == DEVELOPER_PARTS[2]
        assert parts[1]["text"] != DEVELOPER_PARTS[1] and "2026-11-28" not in parts[1]["text"]
        assert parts[1]["text"].count("\n") == DEVELOPER_PARTS[1].count("\n")
        # The user's one-part message stays one part (the date went in front of it).
        user = record.body["input"][1]["content"]
        assert len(user) == 1 and user[0]["type"] == "input_text"
        assert user[0]["text"].endswith(TASK) and "2026-11-28" in user[0]["text"]


def test_a_system_prompt_the_proxy_marked_stays_a_block() -> None:
    forms = BlockForms()
    body = {"system": "You are a builder.", "messages": [{"role": "user", "content": "hi"}]}
    assert forms.apply(body) is body
    forms.add([{"role": "system", "content": "You are a builder."}])
    out = forms.apply(body)
    assert out["system"] == [{"type": "text", "text": "You are a builder."}]
    assert out["messages"] == body["messages"] and body["system"] == "You are a builder."
    # A user message with the same text is another message.
    assert forms.apply({"messages": [{"role": "user", "content": "You are a builder."}]}) == {
        "messages": [{"role": "user", "content": "You are a builder."}]
    }

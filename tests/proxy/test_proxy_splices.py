"""Recall exchanges the client never sees, kept in the upstream's prefix for every reply shape.

Each test runs one session through the proxy with the real `openai` / `anthropic` client over
loopback HTTP, for each wire format (Chat Completions, Responses, Messages), streamed and
not, and each shape of the reply that calls `recall`: text before the call, no text, several
recall calls, a recall next to the client's own call (before or after it), reasoning items
(Responses ids and encrypted content, Messages thinking signatures). The client builds its
next request from what it received, as agents do (Responses: the output items it was shown,
Codex style).

The check is the one the provider's cache applies: every request the upstream receives starts
with the previous one's messages, byte for byte, and where the proxy answered a recall the
next elements are the upstream's own reply as it produced it (ids kept). `cache_control`
marks are left out of the comparison: the proxy moves its own to the newest message by
design, and they are not prompt content.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from openai import OpenAI
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BASH, BIG, CALL, FINAL, FLAT_BASH, SYSTEM, recall_call

from cachepilot.messages import Message, ReasoningPart, TextPart, ToolCall
from cachepilot.wire import Api, reply_elements
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BEFORE = "Let me read the log head."
NEXT = "Now the tests."
AGAIN = ToolCall("call_again", "bash", json.dumps({"command": "make test"}))
THANKS = "You are welcome."
SHAPES = ("text_before", "no_text", "several", "parallel", "parallel_first", "reasoning")
APIS: tuple[Api, ...] = ("chat", "responses", "anthropic")


def script(shape: str) -> tuple[ReplayScript, set[int]]:
    """The upstream's replies for `shape`, and the requests whose reply the proxy handled
    (hidden or spliced): the element after their messages must be the upstream's reply."""
    if shape in ("parallel", "parallel_first"):
        calls = (recall_call(), AGAIN) if shape == "parallel" else (AGAIN, recall_call())
        first = Message("assistant", BEFORE, tool_calls=calls)
        turns = [first, Message("assistant", FINAL), Message("assistant", THANKS)]
        return ReplayScript([ReplayTurn(m) for m in turns]), {0}
    content: Any = BEFORE
    then: Any = NEXT
    calls = (recall_call(),)
    if shape == "no_text":
        content = ""
    elif shape == "several":
        calls = (recall_call("call_recall_a", "1-3"), recall_call("call_recall_b", "10-12"))
    elif shape == "reasoning":
        content = (ReasoningPart("The log is long; read its head.", "enc-one"), TextPart(BEFORE))
        then = (ReasoningPart("Now run the tests.", "enc-two"), TextPart(NEXT))
    turns = [
        Message("assistant", content, tool_calls=calls),
        Message("assistant", then, tool_calls=(AGAIN,)),
        Message("assistant", FINAL),
        Message("assistant", THANKS),
    ]
    return ReplayScript([ReplayTurn(m) for m in turns]), {0, 1}


# --------------------------------------------------------------------------- clients


def _openai(base_url: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=30)


def _chat(base_url: str, stream: bool) -> Callable[[list[Any]], tuple[dict[str, Any], str]]:
    api = _openai(base_url)

    def send(messages: list[Any]) -> tuple[dict[str, Any], str]:
        kwargs: dict[str, Any] = {"model": "m", "messages": messages, "tools": [BASH]}
        text, calls = "", {}
        if stream:
            for chunk in api.chat.completions.create(**kwargs, stream=True):
                delta = chunk.choices[0].delta if chunk.choices else None
                text += (delta.content or "") if delta else ""
                for call in (delta.tool_calls or ()) if delta else ():
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] = call.id or entry["id"]
                    if call.function is not None:
                        entry["name"] += call.function.name or ""
                        entry["arguments"] += call.function.arguments or ""
            found = [calls[k] for k in sorted(calls)]
        else:
            message = api.chat.completions.create(**kwargs).choices[0].message
            text = message.content or ""
            found = [
                {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                for c in message.tool_calls or ()
            ]
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if found:
            entry["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in found
            ]  # fmt: skip
        return entry, text

    return send


def _responses(base_url: str, stream: bool) -> Callable[[list[Any]], tuple[list[Any], str]]:
    api = _openai(base_url)

    def send(items: list[Any]) -> tuple[list[Any], str]:
        kwargs: dict[str, Any] = {
            "model": "m", "instructions": SYSTEM, "input": items, "tools": [FLAT_BASH],
            "include": ["reasoning.encrypted_content"], "store": False,
        }  # fmt: skip
        if stream:
            # Codex keeps the items of `response.output_item.done` events.
            output = [
                event.item.model_dump(exclude_none=True)
                for event in api.responses.create(**kwargs, stream=True)
                if event.type == "response.output_item.done"
            ]
        else:
            response = api.responses.create(**kwargs)
            output = [item.model_dump(exclude_none=True) for item in response.output]
        text = "".join(
            part["text"]
            for item in output
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        )
        return output, text

    return send


CLAUDE_CODE_SYSTEM = [
    {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
]


def _claude_code_marks(messages: list[Any]) -> list[Any]:
    """Claude Code's marks: the last block of each of the last two messages (copies)."""
    out = json.loads(json.dumps(messages))
    for message in out[-2:]:
        if isinstance(message["content"], str):
            message["content"] = [{"type": "text", "text": message["content"]}]
        message["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def _anthropic(
    root: str, stream: bool, claude_code: bool = False
) -> Callable[[list[Any]], tuple[dict[str, Any], str]]:
    api = anthropic.Anthropic(base_url=root, api_key="sk-ant-test", max_retries=0, timeout=30)

    def send(messages: list[Any]) -> tuple[dict[str, Any], str]:
        kwargs: dict[str, Any] = {
            "model": "claude-test", "max_tokens": 512, "system": SYSTEM, "messages": messages,
            "tools": [ANTHROPIC_BASH],
        }  # fmt: skip
        if claude_code:
            kwargs["system"] = CLAUDE_CODE_SYSTEM
            kwargs["messages"] = _claude_code_marks(messages)
        if stream:
            with api.messages.stream(**kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = api.messages.create(**kwargs)
        blocks = [b.model_dump(exclude_none=True) for b in reply.content]
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        return {"role": "assistant", "content": blocks}, text

    return send


def _session(
    api: Api, base: str | list[str], stream: bool, *, claude_code: bool = False
) -> tuple[list[str], list[list[Any]]]:
    """Run the session: the build log, the reply with the recall (the client runs the bash
    call it was shown), the final answer, a thank-you (`base`: the proxy, or one per step).
    Returns the texts the client read and the calls it was shown per reply."""
    bases = base if isinstance(base, list) else [base] * 3
    texts: list[str] = []
    shown_calls: list[list[Any]] = []
    if api == "responses":
        items: list[Any] = [
            {"role": "user", "content": "Build the project."},
            {"type": "function_call", "call_id": CALL.id, "name": "bash",
             "arguments": CALL.arguments},
            {"type": "function_call_output", "call_id": CALL.id, "output": BIG},
        ]  # fmt: skip
        for step in range(3):
            output, text = _responses(bases[step], stream)(items)
            texts.append(text)
            calls = [i for i in output if i["type"] == "function_call"]
            shown_calls.append([(c["call_id"], c["name"]) for c in calls])
            items = [*items, *output]
            if step == 0:
                items.append({"type": "function_call_output", "call_id": AGAIN.id, "output": "ok"})
            elif step == 1:
                items.append({"role": "user", "content": "Thanks"})
        return texts, shown_calls
    if api == "chat":
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Build the project."},
            {"role": "assistant", "content": "Running the build.", "tool_calls": [
                {"id": CALL.id, "type": "function",
                 "function": {"name": "bash", "arguments": CALL.arguments}}]},
            {"role": "tool", "tool_call_id": CALL.id, "content": BIG},
        ]  # fmt: skip
        result: dict[str, Any] = {"role": "tool", "tool_call_id": AGAIN.id, "content": "ok"}
        maker: Callable[[str, bool], Callable[[list[Any]], tuple[dict[str, Any], str]]] = _chat
    else:
        messages = [
            {"role": "user", "content": "Build the project."},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Running the build."},
                {"type": "tool_use", "id": CALL.id, "name": "bash", "input": {"command": "make"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": CALL.id, "content": BIG}]},
        ]  # fmt: skip
        result = {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": AGAIN.id, "content": "ok"}]}  # fmt: skip
        maker = _anthropic
    for step in range(3):
        url = bases[step].removesuffix("/v1") if api == "anthropic" else bases[step]
        sender = _anthropic(url, stream, claude_code) if api == "anthropic" else maker(url, stream)
        entry, text = sender(messages)
        texts.append(text)
        if api == "chat":
            shown_calls.append(
                [(c["id"], c["function"]["name"]) for c in entry.get("tool_calls", [])]
            )
        else:
            shown_calls.append(
                [(b["id"], b["name"]) for b in entry["content"] if b["type"] == "tool_use"]
            )
        messages = [*messages, entry]
        messages.append(result if step == 0 else {"role": "user", "content": "Thanks"})
    return texts, shown_calls


# --------------------------------------------------------------------------- checks


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _conversation(api: Api, body: dict[str, Any]) -> list[Any]:
    found = body["input"] if api == "responses" else body["messages"]
    return _unmarked(found)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_request_extends_the_last_one_byte_for_byte(
    shape: str, api: Api, stream: bool
) -> None:
    replies, handled = script(shape)
    profile = "anthropic" if api == "anthropic" else "openai-gpt-5.4-mini"
    with (
        ReplayProvider(replies, profile=profile) as upstream,
        running_proxy(upstream.base_url, provider=profile) as proxy,
    ):
        texts, calls = _session(api, proxy.base_url, stream)
        records = upstream.records
    # The client saw no recall call, its own call, and the answers.
    assert calls[0] == [(AGAIN.id, "bash")]
    assert texts[1:] == [FINAL, THANKS]
    mixed = shape.startswith("parallel")
    if shape != "no_text" and (stream or mixed):
        assert texts[0].startswith(BEFORE)  # the text streamed before the call stays
    recall_rounds = 1 if mixed else 2
    assert len(records) == 2 + recall_rounds
    # The prefix the upstream cached never breaks: each request starts with the last one,
    # and where the proxy handled the reply, the upstream's reply follows as it produced it.
    for k in range(len(records) - 1):
        before = _conversation(api, records[k].body)
        after = _conversation(api, records[k + 1].body)
        assert after[: len(before)] == before, f"request {k + 1} rewrote request {k}"
        if k in handled:
            produced = _unmarked(reply_elements(api, records[k].response))
            assert after[len(before) : len(before) + len(produced)] == produced
    assert all(r.prefix_extends for r in records)
    last = json.dumps(records[-1].body)
    assert last.count('"call_recall') >= (4 if shape == "several" else 2)  # call and answer
    if shape == "reasoning" and api == "responses":
        # Reasoning items reach the upstream with the ids and encrypted content it sent.
        sent = [i for i in records[-1].body["input"] if i.get("type") == "reasoning"]
        assert [(i["id"], i["encrypted_content"]) for i in sent] == [
            ("rs_replay00000_0", "enc-one"),
            ("rs_replay00001_0", "enc-two"),
        ]
    if shape == "reasoning" and api == "anthropic":
        sent = [
            b
            for m in records[-1].body["messages"]
            for b in (m["content"] if isinstance(m["content"], list) else ())
            if b["type"] == "thinking"
        ]
        assert [b["signature"] for b in sent] == ["enc-one", "enc-two"]


# --------------------------------------------------------------------------- units


def _shown_and_body() -> tuple[Message, dict[str, Any]]:
    shown = Message("assistant", NEXT, tool_calls=(AGAIN,))
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Build."},
            {"role": "assistant", "content": [
                {"type": "text", "text": NEXT},
                {"type": "tool_use", "id": AGAIN.id, "name": "bash",
                 "input": {"command": "make test"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": AGAIN.id, "content": "ok"},
                {"type": "text", "text": "go on"}]},
        ],
    }  # fmt: skip
    return shown, body


def test_a_splice_ending_with_recall_results_joins_the_clients_results() -> None:
    """Messages: every result of one assistant turn in one user message, recall's first."""
    from cachepilot.proxy.recall import Splices
    from cachepilot.wire import read_view

    shown, body = _shown_and_body()
    upstream = [
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "sig"},
            {"type": "text", "text": NEXT},
            {"type": "tool_use", "id": "call_recall", "name": "recall", "input": {"ref": "x"}},
            {"type": "tool_use", "id": AGAIN.id, "name": "bash",
             "input": {"command": "make test"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_recall", "content": "lines"}]},
    ]  # fmt: skip
    splices = Splices()
    splices.add(shown, "anthropic", upstream)
    # Stored and read back (a restarted proxy), the splice still applies.
    splices = Splices.from_json(json.loads(json.dumps(splices.to_json())))
    view = splices.expand(read_view(body, "anthropic"))
    messages = view.body["messages"]
    assert messages[1] == upstream[0]  # signature and every block as the upstream sent them
    # Claude Code marks its last two messages: a mark on the resent turn stays at its end.
    body["messages"][1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    marked = splices.expand(read_view(body, "anthropic")).body["messages"]
    assert [b.get("cache_control") for b in marked[1]["content"]] == [
        None,
        None,
        None,
        {"type": "ephemeral"},
    ]
    assert "cache_control" not in upstream[0]["content"][-1]  # the splice is not changed
    assert json.dumps(splices.to_json()).count("cache_control") == 0
    assert [b.get("tool_use_id") for b in messages[2]["content"]] == [
        "call_recall",
        AGAIN.id,
        None,
    ]
    assert [m.role for m in view.messages] == ["user", "assistant", "tool", "tool", "user"]
    assert body["messages"][1]["content"][0]["text"] == NEXT  # the client's body untouched
    assert "cache_control" not in body["messages"][1]["content"][0]


def test_splices_stored_by_an_earlier_version_still_apply_and_junk_is_dropped() -> None:
    from cachepilot.proxy.recall import Splices, message_key
    from cachepilot.wire import read_view

    shown, body = _shown_and_body()
    call = recall_call()
    legacy = [
        {"key": message_key(shown), "messages": [
            Message("assistant", NEXT, tool_calls=(call, AGAIN)).to_dict(),
            Message("tool", "lines", tool_call_id=call.id, name="recall").to_dict()]},
        {"key": "k", "api": "fax", "elements": []},
        {"nothing": 1},
    ]  # fmt: skip
    splices = Splices.from_json(legacy)
    assert len(splices) == 1
    view = splices.expand(read_view(body, "anthropic"))
    names = [c.name for c in view.messages[1].tool_calls]
    assert names == ["recall", "bash"]
    assert [m.tool_call_id for m in view.messages[2:4]] == [call.id, AGAIN.id]


def test_a_turn_without_a_splice_is_left_alone() -> None:
    from cachepilot.proxy.recall import Splices
    from cachepilot.wire import read_view

    _, body = _shown_and_body()
    splices = Splices()
    splices.add(Message("assistant", "something else"), "anthropic", [{"role": "assistant",
                                                                      "content": "x"}])  # fmt: skip
    view = read_view(body, "anthropic")
    assert splices.expand(view) is view


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_a_restarted_proxy_still_puts_the_exchange_back(api: Api, tmp_path: Any) -> None:
    """The splice is stored with the thread's state: the client's next request, served by a
    new proxy process on the same store, still starts with what the upstream saw."""
    from cachepilot import CachePilot, Config
    from cachepilot.artifacts import SQLiteArtifactStore
    from cachepilot.state.base import SQLiteStateStore

    path = tmp_path / "proxy.sqlite"
    replies, _ = script("reasoning")
    profile = "anthropic" if api == "anthropic" else "openai-gpt-5.4-mini"

    def proxy(upstream: ReplayProvider) -> Any:
        pilot = CachePilot(Config(provider=profile), store=SQLiteArtifactStore(path))
        return running_proxy(
            upstream.base_url,
            provider=profile,
            pilot=pilot,
            state_store=SQLiteStateStore(path),
        )

    with (
        ReplayProvider(replies, profile=profile) as upstream,
        proxy(upstream) as first,
        proxy(upstream) as second,
    ):
        # The second proxy meets the thread at the client's second request: what it knows
        # of the first one comes from the store.
        texts, _ = _session(api, [first.base_url, second.base_url, second.base_url], True)
        records = upstream.records
    assert texts[1:] == [FINAL, THANKS]
    assert len(records) == 4
    for k in range(3):
        before = _conversation(api, records[k].body)
        assert _conversation(api, records[k + 1].body)[: len(before)] == before
    assert all(r.prefix_extends for r in records)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("shape", ["text_before", "parallel", "reasoning"])
def test_claude_code_marks_through_a_recall_session(shape: str, stream: bool) -> None:
    """Both system blocks and the last two messages marked, as Claude Code sends them, with
    recall exchanges spliced in: the upstream, which refuses a fifth mark, serves every
    request; each carries the client's four marks, on the blocks the client marked."""
    from cachepilot.wire.anthropic import cache_mark_count

    replies, _ = script(shape)
    with (
        ReplayProvider(replies, profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        texts, _ = _session("anthropic", proxy.base_url, stream, claude_code=True)
        records = upstream.records
    assert texts[1:] == [FINAL, THANKS]
    assert [cache_mark_count(r.body) for r in records] == [4] * len(records)
    for record in records:
        assert record.body["system"] == CLAUDE_CODE_SYSTEM
        last = record.body["messages"][-1]["content"][-1]
        if str(last.get("tool_use_id", "")).startswith("call_recall"):
            continue  # a follow-up of the proxy's: it ends with a recall answer
        # The client's marks, where it put them: the end of its last two messages (the one
        # it was shown now ends with the upstream's reply spliced in its place).
        messages = record.body["messages"]
        marked = [
            i
            for i, m in enumerate(messages)
            if isinstance(m["content"], list) and any("cache_control" in b for b in m["content"])
        ]
        assert marked == [len(messages) - 2, len(messages) - 1]
        assert all("cache_control" in messages[i]["content"][-1] for i in marked)
    for k in range(len(records) - 1):
        before = _conversation("anthropic", records[k].body)
        assert _conversation("anthropic", records[k + 1].body)[: len(before)] == before
    assert all(r.prefix_extends for r in records)

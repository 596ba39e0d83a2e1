"""The real `openai` client through the proxy (Chat Completions and Responses, streamed and
not), upstream = the embedded replay provider, over loopback HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import OpenAI
from proxy_helpers import running_proxy
from scripts import BASH, BIG, BIG_REF, CALL, FINAL, FLAT_BASH, SYSTEM, plain_script, recall_script

from cachepilot.canonical import CanonicalConfig
from cachepilot.canonical.notes import read_placeholders, resolve_placeholders
from cachepilot_bench.demo_workload import volatile_system_prompt
from cachepilot_bench.replay import ReplayProvider

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def client(base_url: str, **headers: str) -> OpenAI:
    return OpenAI(
        base_url=base_url, api_key="sk-test", max_retries=0, timeout=30, default_headers=headers
    )


USAGE: list[dict[str, Any]] = []


def chat(api: OpenAI, messages: list[dict[str, Any]], *, stream: bool) -> tuple[str, list[Any]]:
    """(text, [(id, name, arguments)]) of one Chat Completions call (usage in `USAGE`)."""
    if not stream:
        done = api.chat.completions.create(model="m", messages=messages, tools=[BASH])
        USAGE.append(done.usage.model_dump(exclude_none=True) if done.usage else {})
        message = done.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        return message.content or "", calls
    text, parts = "", {}
    for chunk in api.chat.completions.create(
        model="m", messages=messages, tools=[BASH], stream=True
    ):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for call in delta.tool_calls or ():
            entry = parts.setdefault(call.index, ["", "", ""])
            entry[0] = call.id or entry[0]
            entry[1] += (call.function.name or "") if call.function else ""
            entry[2] += (call.function.arguments or "") if call.function else ""
    return text, [tuple(parts[k]) for k in sorted(parts)]


def build_history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Build the project."},
        {
            "role": "assistant",
            "content": "Running the build.",
            "tool_calls": [
                {
                    "id": CALL.id,
                    "type": "function",
                    "function": {"name": CALL.name, "arguments": CALL.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": CALL.id, "content": BIG},
    ]


def tool_content(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "tool")


@pytest.mark.parametrize("stream", [False, True])
def test_chat_answers_reach_the_client_and_the_upstream_sees_reduced_outputs(stream: bool) -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        history = build_history()
        text, calls = chat(api, history[:2], stream=stream)
        assert (text, calls) == ("Running the build.", [(CALL.id, CALL.name, CALL.arguments)])
        text, calls = chat(api, history, stream=stream)
        assert (text, calls) == (FINAL, [])
        text, _ = chat(
            api,
            [
                *history,
                {"role": "assistant", "content": FINAL},
                {"role": "user", "content": "Thanks"},
            ],
            stream=stream,
        )
        assert text == "You are welcome."
        records = upstream.records
    assert len(records) == 3
    # The upstream read the reduced log, naming the archived original; the client sent it whole.
    seen = tool_content(records[1].body)
    assert len(seen) < len(BIG) // 5 and f'recall(ref="{BIG_REF}")' in seen
    assert tool_content(records[2].body) == seen  # the same reduced text on every request
    assert all(r.prefix_extends for r in records)
    assert [t["function"]["name"] for t in records[0].body["tools"]] == ["bash", "recall"]
    if not stream:  # usage returned to the client is the upstream's, unchanged
        assert USAGE[-1] == records[2].wire_usage


def test_volatile_system_prompt_reaches_the_upstream_canonical() -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url, **{"X-CachePilot-Thread": "build-1"})
        history = build_history()
        for call, sent in enumerate([history[:2], history]):
            chat(
                api,
                [{"role": "system", "content": volatile_system_prompt(call)}, *sent[1:]],
                stream=False,
            )
        first, second = (r.body for r in upstream.records)
    assert volatile_system_prompt(0) != volatile_system_prompt(1)
    # Sent as written until a value changes; then the values move out (placeholders).
    assert first["messages"][0]["content"] == volatile_system_prompt(0)
    assert "{{" in second["messages"][0]["content"]
    # The real values moved to a context block at the head of the first user message, and
    # the model reads the current ones.
    head = second["messages"][1]["content"]
    assert "<context>" in head and "<context>" not in first["messages"][1]["content"]
    config = CanonicalConfig()
    values = read_placeholders([second["messages"][0]["content"], head], config)
    assert resolve_placeholders(second["messages"][0]["content"], values, config) == (
        volatile_system_prompt(1)
    )


@pytest.mark.parametrize("stream", [False, True])
def test_chat_recall_round_trip_is_invisible_to_the_client(stream: bool) -> None:
    with ReplayProvider(recall_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        history = build_history()
        text, calls = chat(api, history, stream=stream)
        assert calls == []
        assert text.endswith(FINAL)
        if stream:  # the text streamed before the recall call stays part of the message
            assert text == "Let me read the log head." + FINAL
        else:
            assert text == FINAL
        follow = [
            *history,
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Thanks"},
        ]
        assert chat(api, follow, stream=stream)[0] == "You are welcome."
        records = upstream.records
    assert len(records) == 3
    answer = records[1].body["messages"][-1]
    assert answer["role"] == "tool" and "00000 compiling module_0" in answer["content"]
    assert records[1].body["messages"][-2]["tool_calls"][0]["function"]["name"] == "recall"
    # The next request puts the hidden exchange back: the upstream's prefix never breaks.
    assert all(r.prefix_extends for r in records)
    assert (
        records[2].body["messages"][: len(records[1].body["messages"])]
        == records[1].body["messages"]
    )
    state = proxy.engine.pilot.state(proxy.engine.threads.names()[0])
    assert state.recalls == 1


@pytest.mark.parametrize("stream", [False, True])
def test_mixed_recall_goes_to_the_client_without_the_recall_call(stream: bool) -> None:
    with (
        ReplayProvider(recall_script(mixed=True)) as upstream,
        running_proxy(upstream.base_url) as proxy,
    ):
        api = client(proxy.base_url)
        history = build_history()
        text, calls = chat(api, history, stream=stream)
        assert text == "Let me read the log head."
        assert [(c[0], c[1]) for c in calls] == [("call_again", "bash")]
        assistant = {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {"id": c[0], "type": "function", "function": {"name": c[1], "arguments": c[2]}}
                for c in calls
            ],
        }
        follow = [
            *history,
            assistant,
            {"role": "tool", "tool_call_id": "call_again", "content": "ok"},
        ]
        assert chat(api, follow, stream=stream)[0] == FINAL
        records = upstream.records
    sent = records[1].body["messages"]
    recall_at = next(i for i, m in enumerate(sent) if m.get("tool_call_id") == "call_recall")
    assert "00000 compiling" in sent[recall_at]["content"]
    names = [c["function"]["name"] for c in sent[recall_at - 1]["tool_calls"]]
    assert names == ["recall", "bash"]
    assert all(r.prefix_extends for r in records)


def responses_input() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Build the project."},
        {"type": "function_call", "call_id": CALL.id, "name": "bash", "arguments": CALL.arguments},
        {"type": "function_call_output", "call_id": CALL.id, "output": BIG},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_through_the_proxy(stream: bool) -> None:
    with ReplayProvider(recall_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        kwargs: dict[str, Any] = {
            "model": "m",
            "instructions": SYSTEM,
            "input": responses_input(),
            "tools": [FLAT_BASH],
        }
        if stream:
            with api.responses.stream(**kwargs) as events:
                response = events.get_final_response()
        else:
            response = api.responses.create(**kwargs)
        records = upstream.records
    names = [getattr(item, "name", None) for item in response.output]
    assert "recall" not in names
    assert response.output_text.endswith(FINAL)
    assert len(records) == 2
    output = next(i for i in records[0].body["input"] if i.get("type") == "function_call_output")
    assert f'recall(ref="{BIG_REF}")' in output["output"]
    recall = records[1].body["input"][-1]
    assert recall["type"] == "function_call_output" and "00000 compiling" in recall["output"]
    assert [t["name"] for t in records[0].body["tools"]] == ["bash", "recall"]
    # The usage is the sum of both upstream calls.
    assert response.usage is not None
    assert response.usage.input_tokens == sum(r.usage.input_tokens for r in records)


def test_streamed_responses_events_stay_numbered_in_order() -> None:
    with ReplayProvider(recall_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        numbers: list[int] = []
        indices: list[int] = []
        stream = api.responses.create(
            model="m", instructions=SYSTEM, input=responses_input(), tools=[FLAT_BASH], stream=True
        )
        kinds = []
        for event in stream:
            kinds.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_item.added":
                indices.append(event.output_index)
    assert numbers == list(range(len(numbers)))
    assert indices == list(range(len(indices)))
    assert kinds.count("response.created") == 1 and kinds.count("response.completed") == 1


def test_non_model_paths_are_forwarded() -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        models = client(proxy.base_url).models.list()
    assert [m.id for m in models.data] == ["cachepilot-replay"]


def test_bodies_the_proxy_did_not_change_are_forwarded_field_for_field() -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = client(proxy.base_url)
        messages = [
            {"role": "system", "content": SYSTEM, "name": "policy"},
            {"role": "user", "content": [{"type": "text", "text": "Build the project."}]},
        ]
        api.chat.completions.create(
            model="m",
            messages=messages,
            tools=[BASH],
            temperature=0.25,
            seed=7,
            extra_body={"vendor_option": {"x": 1}},
        )
        body = upstream.records[0].body
    assert body["messages"] == messages
    assert body["temperature"] == 0.25 and body["seed"] == 7 and body["vendor_option"] == {"x": 1}
    assert json.dumps(body["tools"][0], sort_keys=True) == json.dumps(BASH, sort_keys=True)

"""The providers' request rules the replay provider enforces (real clients see the 400s)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.messages import Message, ToolCall
from cachepilot.wire import WireError
from cachepilot_bench.provider_rules import ProviderRules, anthropic_cache_blocks
from cachepilot_bench.replay import ReplayProvider, ReplayScript

MARK = {"type": "ephemeral"}


def _use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": "ls"}}


def _result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}


def _anthropic(marks: list[int]) -> dict[str, Any]:
    """A three-message body with `marks[i]` marked blocks in slot i (system, tools, messages)."""
    system = [{"type": "text", "text": f"s{i}"} for i in range(3)]
    tools = [{"name": f"t{i}", "input_schema": {"type": "object"}} for i in range(3)]
    user = [{"type": "text", "text": f"u{i}"} for i in range(3)]
    for blocks, count in zip((system, tools, user), marks, strict=True):
        for block in blocks[:count]:
            block["cache_control"] = dict(MARK)
    return {"system": system, "tools": tools, "messages": [{"role": "user", "content": user}]}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=3, max_size=3))
def test_anthropic_refuses_exactly_above_four_marks(marks: list[int]) -> None:
    body = _anthropic(marks)
    total = sum(marks)
    assert len(anthropic_cache_blocks(body)) == total
    if total <= 4:
        ProviderRules().check("anthropic", body)
    else:
        with pytest.raises(WireError) as caught:
            ProviderRules().check("anthropic", body)
        assert str(caught.value) == (
            f"A maximum of 4 blocks with cache_control may be provided. Found {total}."
        )


def test_a_mark_inside_a_tool_result_counts_and_ttl_order_is_checked() -> None:
    body = _anthropic([3, 1, 0])
    body["messages"] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [_use("toolu_1")]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "x", "cache_control": MARK}],
                }
            ],
        },
    ]
    with pytest.raises(WireError, match="Found 5"):
        ProviderRules().check("anthropic", body)
    late = _anthropic([1, 0, 1])
    late["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    with pytest.raises(WireError, match="must not come after"):
        ProviderRules().check("anthropic", late)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [{"role": "assistant", "content": [_use("toolu_a")]}, {"role": "user", "content": "x"}],
            "without `tool_result` blocks immediately after: toolu_a",
        ),
        (
            [{"role": "user", "content": "x"}, {"role": "user", "content": [_result("toolu_b")]}],
            "unexpected `tool_use_id` found in `tool_result` blocks: toolu_b",
        ),
        (
            [
                {"role": "assistant", "content": [_use("toolu_c")]},
                {"role": "user", "content": [{"type": "text", "text": "x"}, _result("toolu_c")]},
            ],
            "must come first",
        ),
        (
            [
                {"role": "assistant", "content": [_use("toolu_d")]},
                {"role": "user", "content": [_result("toolu_d")]},
                {"role": "assistant", "content": [_use("toolu_d")]},
                {"role": "user", "content": [_result("toolu_d")]},
            ],
            "must be unique",
        ),
        ([{"role": "assistant", "content": [_use("bad id")]}], "should match pattern"),
        ([{"role": "system", "content": "x"}], "Input should be 'user' or 'assistant'"),
    ],
)
def test_anthropic_tool_pairing_roles_and_ids(
    messages: list[dict[str, Any]], expected: str
) -> None:
    with pytest.raises(WireError, match=expected.replace("(", r"\(")):
        ProviderRules().check("anthropic", {"messages": messages})


def test_anthropic_accepts_a_paired_exchange_with_text_after_the_results() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, _use("toolu_1")]},
        {"role": "user", "content": [_result("toolu_1"), {"type": "text", "text": "note"}]},
    ]
    ProviderRules().check("anthropic", {"messages": messages})


def _call(call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "bash", "arguments": "{}"},
    }


def test_chat_tool_messages_pair_with_calls() -> None:
    rules = ProviderRules()
    good = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "1"},
        {"role": "tool", "tool_call_id": "a", "content": "2"},
    ]
    rules.check("chat", {"messages": good})
    with pytest.raises(WireError, match="did not have response messages: a"):
        rules.check("chat", {"messages": [*good[:3], {"role": "user", "content": "x"}]})
    with pytest.raises(WireError, match="must be a response to a preceeding message"):
        rules.check("chat", {"messages": [*good, {"role": "tool", "tool_call_id": "a"}]})
    bad_tool = {"type": "function", "function": {"name": "has space", "parameters": {}}}
    with pytest.raises(WireError, match="does not match pattern"):
        rules.check("chat", {"messages": good, "tools": [bad_tool]})
    assert len(rules.refusals) == 3


def test_responses_call_ids_and_reasoning_items() -> None:
    rules = ProviderRules()
    rules.issued_reasoning([{"type": "reasoning", "id": "rs_1", "encrypted_content": "enc"}])
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"}
    call = {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    rules.check("responses", {"input": [reasoning, call, output]})
    with pytest.raises(WireError, match="No tool output found for function call c1"):
        rules.check("responses", {"input": [reasoning, call]})
    with pytest.raises(WireError, match="No tool call found for function call output"):
        rules.check("responses", {"input": [output]})
    with pytest.raises(WireError, match="without its required following item"):
        rules.check("responses", {"input": [call, output, reasoning]})
    with pytest.raises(WireError, match="Item with id 'rs_9' not found"):
        rules.check("responses", {"input": [{**reasoning, "id": "rs_9"}, call, output]})
    with pytest.raises(WireError, match="could not be verified"):
        rules.check("responses", {"input": [{**reasoning, "encrypted_content": "x"}, call, output]})


def test_responses_outputs_answer_the_calls_previous_response_id_left_open() -> None:
    rules = ProviderRules()
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    rules.check("responses", {"input": [output]}, frozenset({"c1"}))
    with pytest.raises(WireError, match="No tool call found for function call output"):
        rules.check("responses", {"input": [output]}, frozenset({"c2"}))
    with pytest.raises(WireError, match="No tool output found for function call c1"):
        rules.check("responses", {"input": [{"role": "user", "content": "hi"}]}, frozenset({"c1"}))
    with pytest.raises(WireError, match="No tool output found for function call c1"):
        rules.check("responses", {"input": "hi"}, frozenset({"c1"}))


def _calls_once(_api: str, _body: object, request: Any) -> Message:
    if any(m.role == "tool" for m in request.messages):
        return Message("assistant", "done")
    return Message("assistant", "", tool_calls=(ToolCall("c1", "bash", "{}"),))


def test_the_replay_provider_pairs_outputs_across_previous_response_id() -> None:
    rules = ProviderRules()
    with ReplayProvider(
        ReplayScript([]), "openai-gpt-5.4", responder=_calls_once, rules=rules
    ) as provider:
        client = openai.OpenAI(base_url=provider.base_url, api_key="x", max_retries=0)
        first = client.responses.create(model="m", input="go")
        output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
        done = client.responses.create(
            model="m",
            input=[output],  # type: ignore[list-item]
            previous_response_id=first.id,
        )
        assert done.output_text == "done"
        with pytest.raises(openai.BadRequestError, match="No tool output found for function"):
            client.responses.create(model="m", input="again", previous_response_id=first.id)
    assert len(rules.refusals) == 1


def _echo(_api: str, _body: object, _request: object) -> Message:
    return Message("assistant", "hello")


def test_the_replay_provider_refuses_in_each_providers_shape() -> None:
    rules = ProviderRules()
    with ReplayProvider(ReplayScript([]), "anthropic", responder=_echo, rules=rules) as provider:
        root = provider.base_url.removesuffix("/v1")
        client = anthropic.Anthropic(base_url=root, api_key="x", max_retries=0)
        body = _anthropic([3, 2, 0])
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model="m", max_tokens=10, **body)
        assert caught.value.body == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "A maximum of 4 blocks with cache_control may be provided. Found 5.",
            },
        }
        ok = client.messages.create(model="m", max_tokens=10, **_anthropic([2, 1, 1]))
        assert ok.content[0].text == "hello"  # type: ignore[union-attr]
        chat = openai.OpenAI(base_url=provider.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="did not have response messages"):
            chat.chat.completions.create(
                model="m",
                messages=[{"role": "assistant", "tool_calls": [_call("z")]}],  # type: ignore[list-item]
            )
    assert len(provider.records) == 1
    assert len(rules.refusals) == 2

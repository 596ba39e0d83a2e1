"""The replay provider in Gemini mode, through the real `google-genai` client, and Gemini's
request rules (`cachepilot_bench.gemini_rules`) refusing what the real API refuses."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import types

from cachepilot.messages import Message, ToolCall
from cachepilot_bench.provider_rules import ProviderRules
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn

SYSTEM = "You are a careful build assistant. " + "Keep every one of the house rules. " * 600
CALLS = (
    ToolCall("c1", "bash", json.dumps({"command": "make"})),
    ToolCall("c2", "bash", json.dumps({"command": "make test"})),
)


def script() -> ReplayScript:
    return ReplayScript(
        [
            ReplayTurn(Message("assistant", "Running both.", tool_calls=CALLS)),
            ReplayTurn(Message("assistant", "All green.")),
        ]
    )


def config() -> types.GenerateContentConfig:
    bash = types.FunctionDeclaration(
        name="bash", parameters_json_schema={"type": "object", "properties": {}}
    )
    return types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[types.Tool(function_declarations=[bash])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )


def reply(api: genai.Client, contents: list[Any], stream: bool) -> types.Content:
    if not stream:
        response = api.models.generate_content(
            model="gemini-2.5-flash", contents=contents, config=config()
        )
        assert response.candidates and response.candidates[0].content
        return response.candidates[0].content
    parts: list[types.Part] = []
    for chunk in api.models.generate_content_stream(
        model="gemini-2.5-flash", contents=contents, config=config()
    ):
        if chunk.candidates and chunk.candidates[0].content:
            parts.extend(chunk.candidates[0].content.parts or ())
    return types.Content(role="model", parts=parts)


def answers(order: tuple[int, ...]) -> types.Content:
    parts = [
        types.Part(
            function_response=types.FunctionResponse(
                id=CALLS[i].id, name="bash", response={"output": f"ok {i}"}
            )
        )
        for i in order
    ]
    return types.Content(role="user", parts=parts)


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_client_runs_against_the_replay_provider(stream: bool) -> None:
    rules = ProviderRules()
    with ReplayProvider(script(), "gemini-2.5-flash", rules=rules) as provider:
        root = provider.base_url.removesuffix("/v1")
        api = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=root))
        history: list[Any] = [types.Content(role="user", parts=[types.Part(text="Build.")])]
        first = reply(api, history, stream)
        calls = [p for p in first.parts or () if p.function_call]
        assert [p.function_call.id for p in calls if p.function_call] == ["c1", "c2"]
        assert all(p.thought_signature for p in calls)
        history += [first, answers((0, 1))]
        second = reply(api, history, stream)
        assert "".join(p.text or "" for p in second.parts or ()) == "All green."
        records = provider.records
    assert rules.refusals == []
    assert [r.stream for r in records] == [stream, stream]
    assert records[1].usage.cached_tokens > 2048  # implicit caching of the shared prefix
    assert records[1].wire_usage["cachedContentTokenCount"] == records[1].usage.cached_tokens


def test_gemini_rules_refuse_what_the_api_refuses() -> None:
    rules = ProviderRules()
    with ReplayProvider(script(), "gemini-2.5-flash", rules=rules) as provider:
        root = provider.base_url.removesuffix("/v1")
        url = f"{root}/v1beta/models/gemini-2.5-flash:generateContent"
        api = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=root))
        user = types.Content(role="user", parts=[types.Part(text="Build.")])
        first = reply(api, [user], stream=False)
        model = first.model_dump(mode="json", exclude_none=True, by_alias=True)
        model_turn = {"role": "model", "parts": [
            {"functionCall": p["functionCall"], "thoughtSignature": p["thoughtSignature"]}
            for p in model["parts"] if "functionCall" in p
        ]}  # fmt: skip
        results = [{"functionResponse": {"id": c.id, "name": "bash",
                                         "response": {"output": "ok"}}} for c in CALLS]  # fmt: skip
        base = {"contents": [{"role": "user", "parts": [{"text": "Build."}]}, model_turn]}

        def post(body: dict[str, Any]) -> httpx.Response:
            return httpx.post(url, json=body, timeout=30)

        unsigned = json.loads(json.dumps(base))
        del unsigned["contents"][1]["parts"][0]["thoughtSignature"]
        unsigned["contents"].append({"role": "user", "parts": results})
        swapped = json.loads(json.dumps(base))
        swapped["contents"].append({"role": "user", "parts": results[::-1]})
        cached = {"cachedContent": "cachedContents/x", "tools": [], **base}
        cached["contents"] = [*base["contents"], {"role": "user", "parts": results}]
        refused = [post(b) for b in (unsigned, swapped, cached)]
        assert [r.status_code for r in refused] == [400, 400, 400]
        assert all(r.json()["error"]["status"] == "INVALID_ARGUMENT" for r in refused)
        good = json.loads(json.dumps(base))
        good["contents"].append({"role": "user", "parts": results})
        assert post(good).status_code == 200
    assert len(rules.refusals) == 3
    assert "thought_signature" in rules.refusals[0]
    assert "order" in rules.refusals[1]
    assert "CachedContent" in rules.refusals[2]


def test_count_tokens_counts_without_serving() -> None:
    with ReplayProvider(script(), "gemini-2.5-flash") as provider:
        root = provider.base_url.removesuffix("/v1")
        api = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=root))
        short = api.models.count_tokens(model="gemini-2.5-flash", contents="Build.")
        long = api.models.count_tokens(model="gemini-2.5-flash", contents="Build. " * 500)
        assert provider.records == []  # counting is not a model call
    assert short.total_tokens is not None and long.total_tokens is not None
    assert 0 < short.total_tokens < long.total_tokens

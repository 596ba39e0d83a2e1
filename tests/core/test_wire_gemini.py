"""Gemini `generateContent` in the wire layer: reading, writing back, streams, usage, prices."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.messages import Message, ReasoningPart, TextPart, ToolCall
from cachepilot.pricing import get_price, storage_cost
from cachepilot.sim import CacheSimulator, get_profile
from cachepilot.usage import Usage
from cachepilot.wire import (
    GeminiReply,
    WireError,
    api_from_path,
    detect_api,
    gemini_chunks,
    gemini_path,
    gemini_response,
    gemini_usage,
    parse_body,
    parse_response,
    read_gemini,
    read_view,
    resplice,
    write_view,
)
from cachepilot.wire.gemini_view import join_turns


def body() -> dict[str, Any]:
    return {
        "systemInstruction": {"role": "user", "parts": [{"text": "You are a CLI agent."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "<session_context>x</session_context>"},
                                       {"text": "Fix the bug."}]},
            {"role": "model", "parts": [
                {"text": "plan", "thought": True, "thoughtSignature": "c2lnLXQ="},
                {"functionCall": {"name": "ls", "args": {"path": "."}},
                 "thoughtSignature": "c2lnLTA="},
                {"functionCall": {"name": "read", "args": {"file": "a.py"}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "ls", "id": "cli-1",
                                      "response": {"output": "a.py b.py"}}},
                {"functionResponse": {"name": "read", "id": "cli-2",
                                      "response": {"output": "print(1)"}}},
            ]},
        ],
        "tools": [{"functionDeclarations": [
            {"name": "read", "parametersJsonSchema": {"type": "object"}},
            {"name": "ls", "parametersJsonSchema": {"type": "object"}},
        ]}, {"googleSearch": {}}],
        "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
    }  # fmt: skip


def test_paths_and_detection() -> None:
    assert api_from_path("/v1beta/models/gemini-2.5-flash:generateContent") == "gemini"
    assert api_from_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse") == (
        "gemini"
    )
    vertex = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro"
    assert api_from_path(vertex + ":generateContent") == "gemini"
    assert api_from_path("/v1beta/models/gemini-2.5-flash:countTokens") is None
    found = gemini_path(vertex + ":streamGenerateContent")
    assert found is not None and found.model == "gemini-2.5-pro" and found.streamed
    assert detect_api({"contents": []}) == "gemini"
    parsed = parse_body(body(), url_path="/v1beta/models/gemini-2.5-flash:generateContent")
    assert parsed.api == "gemini" and parsed.request.model == "gemini-2.5-flash"
    assert parsed.request.system == "You are a CLI agent."
    assert [t.get("name") for t in parsed.request.tools] == ["read", "ls", None]


def test_reading_pairs_results_with_calls_in_order() -> None:
    system, messages, origins = read_gemini(body())
    assert system == "You are a CLI agent."
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    reply = messages[1]
    assert isinstance(reply.parts[0], ReasoningPart) and reply.parts[0].signature == "c2lnLXQ="
    ls, read = reply.tool_calls
    assert (ls.name, json.loads(ls.arguments)) == ("ls", {"path": "."})
    # No call carries an id: the results pair by name in call order.
    assert [m.tool_call_id for m in messages[2:]] == [ls.id, read.id]
    assert origins == [(0, (0, 1)), (1, (0, 1, 2)), (2, (0,)), (2, (1,))]


def test_results_pair_by_id_when_calls_carry_one() -> None:
    data = body()
    data["contents"][1]["parts"][1]["functionCall"]["id"] = "x1"
    data["contents"][1]["parts"][2]["functionCall"]["id"] = "x2"
    # Results sent in the other order, each with its call's id.
    parts = data["contents"][2]["parts"]
    parts[0]["functionResponse"]["id"], parts[1]["functionResponse"]["id"] = "x2", "x1"
    parts[0]["functionResponse"]["name"], parts[1]["functionResponse"]["name"] = "read", "ls"
    _, messages, _ = read_gemini(data)
    assert [(m.name, m.tool_call_id) for m in messages[2:]] == [("read", "x2"), ("ls", "x1")]


def test_strict_reading_refuses_what_the_api_would() -> None:
    with pytest.raises(WireError):
        read_gemini({"contents": "hello"})
    with pytest.raises(WireError):
        read_gemini({"contents": [{"role": "model", "parts": "text"}]})
    with pytest.raises(WireError):
        read_gemini({"contents": [{"role": "robot", "parts": []}]})
    # Lenient: read as well as it can, never raises.
    _, messages, _ = read_gemini({"contents": [{"role": "model", "parts": "x"}, 7]}, strict=False)
    assert [m.role for m in messages] == ["assistant"]


def test_unchanged_view_is_written_back_as_received() -> None:
    data = body()
    original = copy.deepcopy(data)
    view = read_view(data, "gemini")
    out = write_view(view, view.system, view.messages, list(view.tools))
    assert json.dumps(out) == json.dumps(original)
    assert data == original  # the input is never mutated
    assert all(a is b for a, b in zip(out["contents"], data["contents"], strict=True))


def test_a_reduced_result_keeps_its_part_and_every_other_turn() -> None:
    data = body()
    view = read_view(data, "gemini")
    reduced = Message(role="tool", content="[2 files; ref abc]", tool_call_id=view.messages[2]
                      .tool_call_id, name="ls")  # fmt: skip
    outputs = [*view.messages[:2], reduced, view.messages[3]]
    out = write_view(view, view.system, outputs, list(view.tools))
    assert out["contents"][:2] == data["contents"][:2]
    assert out["contents"][1] is data["contents"][1]  # signatures untouched
    first, second = out["contents"][2]["parts"]
    assert first["functionResponse"] == {
        "name": "ls", "id": "cli-1", "response": {"output": "[2 files; ref abc]"}
    }  # fmt: skip
    assert second is data["contents"][2]["parts"][1]
    assert out["tools"] is data["tools"]


def test_a_leading_block_keeps_the_user_parts_as_received() -> None:
    data = body()
    data["contents"][0]["parts"].append({"inlineData": {"mimeType": "application/pdf",
                                                        "data": "JVBERi0="}})  # fmt: skip
    view = read_view(data, "gemini")
    first = view.messages[0]
    with_block = Message(role="user", content=(TextPart("Date: 2026-11-28"), *first.parts))
    out = write_view(view, view.system, [with_block, *view.messages[1:]], list(view.tools))
    parts = out["contents"][0]["parts"]
    assert parts[0] == {"text": "Date: 2026-11-28"}
    assert parts[1:] == data["contents"][0]["parts"]


def test_changed_arguments_keep_the_signature() -> None:
    data = body()
    view = read_view(data, "gemini")
    reply = view.messages[1]
    ls, read = reply.tool_calls
    edited = Message(
        role="assistant",
        content=reply.content,
        tool_calls=(ToolCall(ls.id, "ls", json.dumps({"path": "src"})), read),
    )
    outputs = [view.messages[0], edited, *view.messages[2:]]
    out = write_view(view, view.system, outputs, list(view.tools))
    parts = out["contents"][1]["parts"]
    assert parts[1] == {"functionCall": {"name": "ls", "args": {"path": "src"}},
                        "thoughtSignature": "c2lnLTA="}  # fmt: skip
    assert parts[0] is data["contents"][1]["parts"][0]


def test_system_and_tools_written_in_gemini_shape() -> None:
    data = body()
    view = read_view(data, "gemini")
    recall = {"name": "recall", "parametersJsonSchema": {"type": "object"}}
    tools = sorted([*view.tools], key=lambda t: str(t.get("name", "")))
    out = write_view(view, "You are a CLI agent!", view.messages, [*tools, recall])
    assert out["systemInstruction"] == {"role": "user", "parts": [{"text": "You are a CLI agent!"}]}
    assert out["tools"] == [
        {"functionDeclarations": [tools[1], tools[2], recall]},
        {"googleSearch": {}},
    ]


def test_cached_content_never_gains_an_instruction_or_tools() -> None:
    hello = {"role": "user", "parts": [{"text": "Hi"}]}
    data = {"cachedContent": "cachedContents/1", "contents": [hello]}
    view = read_view(data, "gemini")
    recall = {"name": "recall", "parametersJsonSchema": {"type": "object"}}
    out = write_view(view, "An instruction", view.messages, [recall])
    assert "systemInstruction" not in out and "tools" not in out


def test_spliced_results_join_the_next_turn_in_call_order() -> None:
    model = {"role": "model", "parts": [
        {"functionCall": {"name": "bash", "args": {}}},
        {"functionCall": {"name": "recall", "args": {}}},
    ]}  # fmt: skip
    proxy = {"role": "user", "parts": [{"functionResponse": {"name": "recall", "response": {}}}]}
    client = {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {}}}]}
    joined = join_turns(model, proxy, client)
    assert [p["functionResponse"]["name"] for p in joined["parts"]] == ["bash", "recall"]
    data = {"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {}}}]},
        client,
    ]}  # fmt: skip
    view = read_view(data, "gemini")
    spliced = resplice(view, {1: [model, proxy]})
    assert [c["role"] for c in spliced.body["contents"]] == ["user", "model", "user"]
    names = [p["functionResponse"]["name"] for p in spliced.body["contents"][2]["parts"]]
    assert names == ["bash", "recall"]


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120)


@settings(max_examples=60, deadline=None)
@given(
    thought=_TEXT,
    text=_TEXT,
    args=st.dictionaries(st.text(max_size=5), st.integers() | _TEXT, max_size=3),
    calls=st.integers(0, 3),
)
def test_a_stream_adds_up_to_the_reply_it_carries(
    thought: str, text: str, args: dict[str, Any], calls: int
) -> None:
    parts: list[Any] = [ReasoningPart(thought, "c2ln")] if thought else []
    if text:
        parts.append(TextPart(text))
    tool_calls = tuple(ToolCall(f"id-{i}", f"tool_{i}", json.dumps(args)) for i in range(calls))
    reply = Message(role="assistant", content=tuple(parts), tool_calls=tool_calls)
    usage = gemini_usage(Usage(5000, 4096, 0, 300, 120))
    whole = gemini_response(reply, id="r", model="m", usage=usage)
    folded = GeminiReply()
    for chunk in gemini_chunks(reply, id="r", model="m", usage=usage):
        folded.add(json.loads(json.dumps(chunk)))
    if parts or tool_calls:
        assert folded.payload()["candidates"][0]["content"] == whole["candidates"][0]["content"]
    assert folded.message() == parse_response(whole, "gemini").output[0]
    assert folded.usage == Usage(5000, 4096, 0, 300, 120)
    sse = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in gemini_chunks(
        reply, id="r", model="m", usage=usage))  # fmt: skip
    assert parse_response(sse, "gemini").usage == folded.usage


def test_usage_metadata_is_read_as_billed() -> None:
    camel = {
        "promptTokenCount": 12000,
        "cachedContentTokenCount": 8000,
        "candidatesTokenCount": 300,
        "thoughtsTokenCount": 700,
        "toolUsePromptTokenCount": 50,
        "totalTokenCount": 13050,
    }
    assert Usage.from_gemini(camel) == Usage(12050, 8000, 0, 1000, 700)
    snake = {"prompt_token_count": 10, "candidates_token_count": 2}
    assert Usage.from_gemini(snake) == Usage(10, 0, 0, 2, 0)
    info = parse_response({"candidates": [], "usageMetadata": camel, "responseId": "x"}, "gemini")
    assert info.usage == Usage(12050, 8000, 0, 1000, 700) and info.response_id == "x"
    # A non-SSE stream answers one JSON array of chunks.
    array = json.dumps([{"usageMetadata": {"promptTokenCount": 3}},
                        {"usageMetadata": camel}])  # fmt: skip
    assert parse_response(array, "gemini").usage == Usage(12050, 8000, 0, 1000, 700)


def test_gemini_profiles_price_implicit_prefix_hits() -> None:
    profile = get_profile("gemini-2.5-flash")
    assert profile.kind == "gemini" and profile.min_cacheable_tokens == 2048
    assert profile.price == get_price("gemini-2.5-flash")
    assert profile.price.source_date and "ai.google.dev" in profile.price.source
    big = "word " * 3000
    first = parse_body({"systemInstruction": {"parts": [{"text": big}]},
                        "contents": [{"role": "user", "parts": [{"text": "one"}]}]},
                       url_path="/v1beta/models/gemini-2.5-flash:generateContent")  # fmt: skip
    second = parse_body({
        "systemInstruction": {"parts": [{"text": big}]},
        "contents": [{"role": "user", "parts": [{"text": "one"}]},
                     {"role": "model", "parts": [{"text": "ok"}]},
                     {"role": "user", "parts": [{"text": "two"}]}]},
        url_path="/v1beta/models/gemini-2.5-flash:generateContent")  # fmt: skip
    sim = CacheSimulator(profile)
    cold = sim.submit(first.request)
    warm = sim.submit(second.request)
    assert cold.cached_tokens == 0 and cold.cache_write_tokens == 0
    assert warm.cached_tokens >= 3000 and warm.cache_write_tokens == 0
    billed = profile.cost(warm)
    expected = (warm.cached_tokens * 0.03 + warm.uncached_tokens * 0.30) / 1e6
    assert billed.input_usd == pytest.approx(expected)
    small = CacheSimulator("gemini-3-flash")  # 4,096-token minimum: no hit on this prefix
    small.submit(first.request)
    assert small.submit(second.request).cached_tokens == 0


def test_explicit_cache_storage_is_priced_per_token_hour() -> None:
    pro = get_price("gemini-2.5-pro")
    assert storage_cost(1_000_000, 3600, pro) == pytest.approx(4.50)
    assert storage_cost(200_000, 1800, get_price("gemini-2.5-flash")) == pytest.approx(0.10)
    assert storage_cost(10, 10, get_price("gpt-5.4")) == 0.0
    assert get_profile("gemini-2.5-pro").explicit_ttl_seconds == 3600.0
    with pytest.raises(ValueError):
        storage_cost(-1, 10, pro)


def test_audit_reads_a_gemini_request_log(tmp_path: Any) -> None:
    from cachepilot.audit import audit_file

    system = {"parts": [{"text": "You are a CLI agent. " * 600}]}
    first = [{"role": "user", "parts": [{"text": "Fix the bug."}]}]
    second = [*first, {"role": "model", "parts": [{"text": "Done."}]},
              {"role": "user", "parts": [{"text": "Thanks."}]}]  # fmt: skip
    path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    log = tmp_path / "gemini.jsonl"
    entries = [
        {"url_path": path, "timestamp": 1_700_000_000.0 + i,
         "request": {"systemInstruction": system, "contents": c}}
        for i, c in enumerate([first, second])
    ]  # fmt: skip
    log.write_text("\n".join(json.dumps(e) for e in entries))
    report = audit_file(log)
    assert report.profile.name == "gemini-2.5-pro"
    assert len(report.threads) == 1
    calls = report.threads[0].calls
    assert calls[0].simulated.cached_tokens == 0
    assert calls[1].simulated.cached_tokens > 2048


@settings(max_examples=80, deadline=None)
@given(
    turns=st.lists(
        st.lists(st.sampled_from(["ls", "read", "bash"]), min_size=1, max_size=5),
        min_size=1,
        max_size=4,
    ),
    ids=st.booleans(),
)
def test_results_in_call_order_always_pair(turns: list[list[str]], ids: bool) -> None:
    """Any history of call turns answered in call order (with or without ids) reads as a
    paired transcript, every result answering the call at its position."""
    from cachepilot.messages import check_pairing

    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "go"}]}]
    for t, names in enumerate(turns):
        calls = []
        for k, name in enumerate(names):
            call: dict[str, Any] = {"name": name, "args": {"k": k}}
            if ids:
                call["id"] = f"c{t}-{k}"
            calls.append({"functionCall": call})
        results = [
            {"functionResponse": {"name": n, "response": {"output": f"{t}-{k}"},
                                  **({"id": f"c{t}-{k}"} if ids else {})}}
            for k, n in enumerate(names)
        ]  # fmt: skip
        contents += [{"role": "model", "parts": calls}, {"role": "user", "parts": results}]
    _, messages, _ = read_gemini({"contents": contents})
    check_pairing(messages)
    by_id = {c.id: json.loads(c.arguments) for m in messages for c in m.tool_calls}
    for message in messages:
        if message.role == "tool":
            _turn, k = message.text.split("-")
            assert by_id[str(message.tool_call_id)] == {"k": int(k)}


def test_a_huge_turn_pairs_every_result_once() -> None:
    """Thousands of calls answered in reverse order by name (untrusted input): every result
    pairs with a distinct call of its name."""
    n = 6000
    names = [f"tool_{i % 3000}" for i in range(n)]
    calls = [{"functionCall": {"name": name, "args": {"i": i}}} for i, name in enumerate(names)]
    results = [{"functionResponse": {"name": name, "response": {"output": str(i)}}}
               for i, name in reversed(list(enumerate(names)))]  # fmt: skip
    data = {"contents": [{"role": "user", "parts": [{"text": "go"}]},
                         {"role": "model", "parts": calls},
                         {"role": "user", "parts": results}]}  # fmt: skip
    _, messages, _ = read_gemini(data)
    tool_ids = [m.tool_call_id for m in messages if m.role == "tool"]
    assert len(tool_ids) == n and len(set(tool_ids)) == n
    joined = join_turns(data["contents"][1], {"parts": results[: n // 2]},
                        {"role": "user", "parts": results[n // 2 :]})  # fmt: skip
    assert [p["functionResponse"]["name"] for p in joined["parts"]] == names


def test_odd_parts_are_read_leniently_and_kept() -> None:
    data = {"contents": [
        {"role": "user", "parts": [{"text": "see"}, {"inlineData": {"mimeType": "image/png",
                                                                   "data": "iVBO"}},
                                   {"fileData": {"mimeType": "video/mp4", "fileUri": "gs://v"}},
                                   {"executableCode": {"code": "print(1)"}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "x", "args": None}},
                                    {"thought": True, "thoughtSignature": "c2ln"}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "x", "response": [1, 2]}}]},
    ]}  # fmt: skip
    view = read_view(data, "gemini")
    first, reply, result = view.messages
    assert [type(p).__name__ for p in first.parts] == [
        "TextPart", "ImagePart", "TextPart", "TextPart"
    ]  # fmt: skip
    assert reply.tool_calls[0].arguments == "{}"
    assert reply.parts == (ReasoningPart("", "c2ln"),)
    assert result.text == "[1, 2]"
    out = write_view(view, view.system, view.messages, list(view.tools))
    assert json.dumps(out) == json.dumps(data)

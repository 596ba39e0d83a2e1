"""The real `google-genai` client through the proxy (generateContent and
streamGenerateContent?alt=sse) against a scripted Gemini upstream that enforces the API's
rules: signatures echoed, results paired with calls in call order, nothing next to a
cachedContent."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from gemini_upstream import gemini_upstream
from google import genai
from google.genai import types
from proxy_helpers import running_proxy
from scripts import BIG, BIG_REF

from cachepilot.messages import Message, ToolCall

SYSTEM = "You are a careful build assistant. Answer briefly. " + "Keep the house rules. " * 200
FINAL = "The build is fine."
LINE = BIG.splitlines()[1500]
BASH = types.FunctionDeclaration(
    name="bash",
    description="Run a shell command.",
    parameters_json_schema={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
)
MAKE = ToolCall("gemini-call-make", "bash", json.dumps({"command": "make"}))
TEST = ToolCall("gemini-call-test", "bash", json.dumps({"command": "make test"}))
RECALL = ToolCall("gemini-call-recall", "recall", json.dumps({"ref": BIG_REF, "lines": "1501"}))


def client(root: str, key: str = "gm-test-key") -> genai.Client:
    options = types.HttpOptions(base_url=root, timeout=30_000)
    return genai.Client(api_key=key, http_options=options)


def config(**extra: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[types.Tool(function_declarations=[BASH])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        **extra,
    )


def ask(api: genai.Client, contents: list[types.Content], *, stream: bool) -> types.Content:
    """One model call; the reply as the client keeps it (a stream's parts joined)."""
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
            for part in chunk.candidates[0].content.parts or ():
                last = parts[-1] if parts else None
                if (
                    last is not None
                    and part.text is not None
                    and last.text is not None
                    and not last.thought_signature
                    and not part.thought
                    and not last.thought
                ):
                    parts[-1] = types.Part(
                        text=last.text + part.text, thought_signature=part.thought_signature
                    )
                else:
                    parts.append(part)
    return types.Content(role="model", parts=parts)


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part.from_text(text=text)])


def results(*outputs: tuple[str, str]) -> types.Content:
    parts = [types.Part.from_function_response(name=n, response={"output": o}) for n, o in outputs]
    return types.Content(role="user", parts=parts)


def calls_of(content: types.Content) -> list[str]:
    return [p.function_call.name or "" for p in content.parts or () if p.function_call]


def recall_answer(body: dict[str, Any]) -> Message:
    """The reply after a recall: quotes what the recall returned (the model read it)."""
    last = body["contents"][-1]["parts"][-1]["functionResponse"]
    assert last["name"] == "recall"
    return Message("assistant", f"Line 1501 reads: {last['response']['output'].strip()}")


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_recall_is_answered_by_the_proxy_and_spliced_append_only(stream: bool) -> None:
    replies: list[Any] = [
        Message("assistant", "Running the build.", tool_calls=(MAKE,)),
        Message("assistant", "Let me read line 1501.", tool_calls=(RECALL,)),
        recall_answer,
        Message("assistant", "You are welcome."),
    ]
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        api = client(proxy.root)
        history = [user("Build the project.")]
        first = ask(api, history, stream=stream)
        assert calls_of(first) == ["bash"]
        history += [first, results(("bash", BIG))]
        second = ask(api, history, stream=stream)
        assert calls_of(second) == []  # the recall never reaches the client
        text = "".join(p.text or "" for p in second.parts or ())
        assert LINE in text
        history += [second, user("Thanks.")]
        third = ask(api, history, stream=stream)
        assert "welcome" in "".join(p.text or "" for p in third.parts or ())
    assert upstream.refusals == []
    bodies = upstream.bodies()
    assert len(bodies) == 4
    declared = [d["name"] for d in bodies[0]["tools"][0]["functionDeclarations"]]
    assert declared == ["bash", "recall"]
    # The tool result went up reduced, with the ref the model recalled.
    sent = bodies[1]["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
    assert len(sent) < len(BIG) and BIG_REF in sent and LINE not in sent
    upstream.assert_append_only()
    # The recall exchange sits where the client resent the reply it was shown.
    assert [c["role"] for c in bodies[3]["contents"]] == [
        "user", "model", "user", "model", "user", "model", "user"
    ]  # fmt: skip
    for logged in upstream.requests:
        assert logged.headers["x-goog-api-key"] == "gm-test-key"
        assert (logged.query == "alt=sse") is stream


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_mixed_recall_keeps_results_in_call_order(stream: bool) -> None:
    replies: list[Any] = [
        Message("assistant", "Running the build.", tool_calls=(MAKE,)),
        # The client's call first: its result comes back after the proxy's recall answer
        # was spliced in, and must still go up in call order.
        Message("assistant", "Two things at once.", tool_calls=(TEST, RECALL)),
        Message("assistant", FINAL),
    ]
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        api = client(proxy.root)
        history = [user("Build the project.")]
        first = ask(api, history, stream=stream)
        history += [first, results(("bash", BIG))]
        second = ask(api, history, stream=stream)
        assert calls_of(second) == ["bash"]  # the client sees its own call only
        history += [second, results(("bash", "42 tests passed"))]
        third = ask(api, history, stream=stream)
        assert FINAL in "".join(p.text or "" for p in third.parts or ())
    assert upstream.refusals == []  # signatures echoed, results in call order
    last = upstream.bodies()[-1]["contents"]
    model_turn, answers = last[-2], last[-1]
    assert [p["functionCall"]["name"] for p in model_turn["parts"] if "functionCall" in p] == [
        "bash",
        "recall",
    ]
    names = [p["functionResponse"]["name"] for p in answers["parts"]]
    assert names == ["bash", "recall"]
    upstream.assert_append_only()


def test_gemini_reports_the_upstream_prompt_token_count_unchanged() -> None:
    replies: list[Any] = [Message("assistant", "Hello.")]
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        api = client(proxy.root)  # held: the SDK closes its HTTP client with the object
        response = api.models.generate_content(
            model="gemini-2.5-flash", contents=[user("Say hello.")], config=config()
        )
    sent = upstream.bodies()[0]
    assert response.usage_metadata is not None
    text = json.dumps(
        [sent.get("systemInstruction"), sent.get("tools"), sent.get("contents")], sort_keys=True
    )
    assert response.usage_metadata.prompt_token_count == len(text) // 4


def test_gemini_side_call_stays_out_of_the_main_thread() -> None:
    """A side call (another system instruction, no tools: the client's router or summary)
    reaches the upstream as sent and leaves the main thread's requests append-only."""
    replies: list[Any] = [
        Message("assistant", "Running the build.", tool_calls=(MAKE,)),
        Message("assistant", '{"model": "flash"}'),
        Message("assistant", FINAL),
    ]
    side_body = types.GenerateContentConfig(
        system_instruction="You route requests to a model. Answer with JSON."
    )
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        api = client(proxy.root)
        history = [user("Build the project.")]
        first = ask(api, history, stream=False)
        api.models.generate_content(
            model="gemini-2.5-flash-lite", contents=[user("Build the project.")], config=side_body
        )
        history += [first, results(("bash", "ok"))]
        ask(api, history, stream=False)
        threads = proxy.engine.threads.names()
    assert upstream.refusals == []
    main = [upstream.bodies()[0], upstream.bodies()[2]]
    side = upstream.bodies()[1]
    assert "tools" not in side
    assert side["systemInstruction"]["parts"][0]["text"].startswith("You route requests")
    assert len(threads) == 2
    n = len(main[0]["contents"])
    assert main[1]["contents"][:n] == main[0]["contents"]


def test_gemini_cached_content_gets_no_tools_or_instruction() -> None:
    replies: list[Any] = [Message("assistant", "From the cache.")]
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        api = client(proxy.root)
        response = api.models.generate_content(
            model="gemini-2.5-flash",
            contents=[user("Summarize the cached document.")],
            config=types.GenerateContentConfig(cached_content="cachedContents/abc123"),
        )
    assert response.text == "From the cache."
    assert upstream.refusals == []
    body = upstream.bodies()[0]
    assert body["cachedContent"] == "cachedContents/abc123"
    assert "tools" not in body and "systemInstruction" not in body


def test_gemini_keys_scope_threads_apart() -> None:
    """Two API keys never share a thread, whether the key comes as a header or `?key=`."""
    replies: list[Any] = [Message("assistant", "One."), Message("assistant", "Two.")]
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        one, two = client(proxy.root, key="key-one"), client(proxy.root, key="key-two")
        one.models.generate_content(
            model="gemini-2.5-flash", contents=[user("Hi.")], config=config()
        )
        two.models.generate_content(
            model="gemini-2.5-flash", contents=[user("Hi.")], config=config()
        )
        threads = proxy.engine.threads.names()
    assert len(threads) == 2
    assert len({t.split("/", 1)[0] for t in threads}) == 2
    assert [r.headers["x-goog-api-key"] for r in upstream.requests] == ["key-one", "key-two"]


def test_gemini_volatile_date_stays_one_thread_with_a_byte_stable_instruction() -> None:
    """A date in the system instruction that changes between two calls of one session: one
    thread; the first call is sent as written, and the call where the date changed moves it
    into the dynamic-context block at the head of the first user turn (the instruction then
    carries a placeholder), so the model reads the current date, as in every format."""
    replies: list[Any] = [
        Message("assistant", "Running the build.", tool_calls=(MAKE,)),
        Message("assistant", FINAL),
    ]
    days = ("Friday, November 27, 2026", "Saturday, November 28, 2026")

    def dated(day: str) -> types.GenerateContentConfig:
        return config().model_copy(update={"system_instruction": f"Today is {day}.\n{SYSTEM}"})

    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        api = client(proxy.root)
        history = [user("Build the project.")]
        response = api.models.generate_content(
            model="gemini-2.5-flash", contents=history, config=dated(days[0])
        )
        assert response.candidates and response.candidates[0].content
        history += [response.candidates[0].content, results(("bash", "ok"))]
        api.models.generate_content(
            model="gemini-2.5-flash", contents=history, config=dated(days[1])
        )
        threads = proxy.engine.threads.names()
    assert upstream.refusals == []
    assert len(threads) == 1
    first, second = upstream.bodies()
    assert first["systemInstruction"]["parts"][0]["text"] == f"Today is {days[0]}.\n{SYSTEM}"
    assert first["contents"][0]["parts"] == [{"text": "Build the project."}]
    instruction = second["systemInstruction"]["parts"][0]["text"]
    assert instruction.startswith("Today is {{date_1}}.")
    (part,) = second["contents"][0]["parts"]
    assert part["text"].startswith("<context>") and days[1] in part["text"]
    assert part["text"].endswith("Build the project.")
    assert days[0] not in json.dumps(second)  # the model reads the current date only


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_repeated_call_next_to_recall_is_spliced(stream: bool) -> None:
    """The model repeats a call it made before (same name and arguments, no ids) next to a
    recall: the reply the client resends is still recognised and spliced, append-only."""
    replies: list[Any] = [
        Message("assistant", "Running the build.", tool_calls=(MAKE,)),
        Message("assistant", "Once more, and the log.", tool_calls=(MAKE, RECALL)),
        Message("assistant", FINAL),
    ]
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        api = client(proxy.root)
        history = [user("Build the project.")]
        first = ask(api, history, stream=stream)
        history += [first, results(("bash", BIG))]
        second = ask(api, history, stream=stream)
        assert calls_of(second) == ["bash"]
        history += [second, results(("bash", "built again"))]
        third = ask(api, history, stream=stream)
        assert FINAL in "".join(p.text or "" for p in third.parts or ())
    assert upstream.refusals == []
    upstream.assert_append_only()
    last = upstream.bodies()[-1]["contents"]
    names = [p["functionResponse"]["name"] for p in last[-1]["parts"]]
    assert names == ["bash", "recall"]


def test_gemini_query_key_scopes_threads_and_is_forwarded() -> None:
    """A key sent as `?key=` scopes threads like the header does, and reaches the upstream
    unchanged in the query."""
    replies: list[Any] = [Message("assistant", "One."), Message("assistant", "Two.")]
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi."}]}]}
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        url = f"{proxy.root}/v1beta/models/gemini-2.5-flash:generateContent"
        answers = [httpx.post(url, params={"key": k}, json=body, timeout=30) for k in "ab"]
        threads = proxy.engine.threads.names()
    assert [a.status_code for a in answers] == [200, 200]
    assert len({t.split("/", 1)[0] for t in threads}) == 2
    assert [r.query for r in upstream.requests] == ["key=a", "key=b"]


def test_gemini_vertex_path_is_served_and_a_json_array_stream_passes_through() -> None:
    """The Vertex path gets the same treatment (the recall declaration offered); a stream
    asked for without `alt=sse` (one JSON array the proxy does not read) is forwarded as
    sent."""
    replies: list[Any] = [Message("assistant", "One."), Message("assistant", "Two.")]
    body = {
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "contents": [{"role": "user", "parts": [{"text": "Hi."}]}],
        "tools": [{"functionDeclarations": [BASH.model_dump(mode="json", exclude_none=True,
                                                            by_alias=True)]}],
    }  # fmt: skip
    vertex = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro"
    with gemini_upstream(replies) as upstream, running_proxy(upstream.root) as proxy:
        served = httpx.post(f"{proxy.root}{vertex}:generateContent", json=body, timeout=30)
        raw = httpx.post(
            f"{proxy.root}/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            json=body,
            headers={"x-goog-api-key": "k"},
            timeout=30,
        )
    assert served.status_code == raw.status_code == 200
    first, second = upstream.bodies()
    assert upstream.requests[0].path == f"{vertex}:generateContent"
    names = [d["name"] for d in first["tools"][0]["functionDeclarations"]]
    assert names == ["bash", "recall"]
    assert second == body  # not read, not rewritten

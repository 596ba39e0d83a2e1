"""OpenAI-compatible servers (LiteLLM, vLLM, Ollama, Azure...) behind a custom `base_url`.

The stub below listens on 127.0.0.1 and, like a server built on a strict request schema,
refuses (400) any body field it does not know. Its fields are OpenAI's own create parameters
(read from the installed `openai` types) without `prompt_cache_key`: the field the SDK
deliberately leaves out for such servers. Runs go through the real `openai` client and the
real `Runner`, Chat Completions and Responses.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from cachepilot import CachePilot
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot_agents import CachePilotAgents, prompt_cache_key_for


def _fields(params: Any) -> frozenset[str]:
    return frozenset(params.__required_keys__ | params.__optional_keys__ | {"stream"})


KEY = "prompt_cache_key"
KNOWN = {
    "/v1/chat/completions": _fields(completion_create_params.CompletionCreateParamsBase) - {KEY},
    "/v1/responses": _fields(response_create_params.ResponseCreateParamsBase) - {KEY},
}


def _chat_answer(body: dict[str, Any]) -> dict[str, Any]:
    done = any(m.get("role") == "tool" for m in body["messages"])
    message: dict[str, Any] = (
        {"role": "assistant", "content": "done"}
        if done
        else {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"name": "a"}'},
                }
            ],
        }
    )
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {"index": 0, "finish_reason": "stop" if done else "tool_calls", "message": message}
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
    }


def _responses_answer(body: dict[str, Any]) -> dict[str, Any]:
    items = body["input"] if isinstance(body["input"], list) else []
    done = any(i.get("type") == "function_call_output" for i in items)
    item: dict[str, Any] = (
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        }
        if done
        else {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"name": "a"}',
            "status": "completed",
        }
    )
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": body["model"],
        "status": "completed",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 20,
            "output_tokens": 2,
            "total_tokens": 22,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


class StrictServer:
    """An OpenAI-compatible stub that refuses unknown body fields (`strict=False`: accepts)."""

    def __init__(self, *, strict: bool = True) -> None:
        self.strict = strict
        self.bodies: list[dict[str, Any]] = []
        self.refused: list[list[str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                server.bodies.append(body)
                known = KNOWN.get(self.path)
                if known is None:
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                unknown = sorted(set(body) - known)
                if server.strict and unknown:
                    server.refused.append(unknown)
                    message = f"Unrecognized request argument supplied: {', '.join(unknown)}"
                    error = {"message": message, "type": "invalid_request_error"}
                    return self._send(400, {"error": error})
                answer = _chat_answer if "chat" in self.path else _responses_answer
                return self._send(200, answer(body))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> StrictServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def strict() -> Iterator[StrictServer]:
    with StrictServer() as server:
        yield server


@function_tool
def lookup(name: str) -> str:
    """Look a name up."""
    return f"{name}: " + "found " * 50


def _agent(server: StrictServer, api: str, settings: ModelSettings | None = None) -> Agent[Any]:
    client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    model: Any = (
        OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
        if api == "chat"
        else OpenAIResponsesModel(model="gpt-4o", openai_client=client)
    )
    return Agent(
        name="a",
        instructions="Look things up.",
        model=model,
        tools=[lookup],
        model_settings=settings or ModelSettings(),
    )


def _run(agent: Agent[Any], config: RunConfig | None = None) -> Any:
    return asyncio.run(Runner.run(agent, "look a up", run_config=config))


def _plugin(**kwargs: Any) -> CachePilotAgents:
    return CachePilotAgents(CachePilot(store=InMemoryArtifactStore()), **kwargs)


API = pytest.mark.parametrize("api", ["chat", "responses"])


@API
def test_the_plain_sdk_passes_the_strict_server(strict: StrictServer, api: str) -> None:
    result = _run(_agent(strict, api))
    assert result.final_output == "done"
    assert len(strict.bodies) == 2 and strict.refused == []
    assert all(KEY not in body for body in strict.bodies)


@API
def test_cachepilot_sends_no_key_the_sdk_would_not(strict: StrictServer, api: str) -> None:
    cp = _plugin()
    result = _run(cp.wrap(_agent(strict, api)), cp.run_config(thread="t1"))
    assert result.final_output == "done"
    assert strict.refused == [] and len(strict.bodies) == 2
    assert all(KEY not in body for body in strict.bodies)
    assert "recall" in json.dumps(strict.bodies[0]["tools"])  # the plugin did its work
    assert cp.pilot.state("t1").calls == 2


@API
def test_a_key_asked_for_is_sent(api: str) -> None:
    with StrictServer(strict=False) as lenient:
        cp = _plugin(prompt_cache_key="always")
        _run(cp.wrap(_agent(lenient, api)), cp.run_config(thread="t1"))
    assert [body.get(KEY) for body in lenient.bodies] == [prompt_cache_key_for("t1")] * 2


@API
def test_the_strict_server_refuses_the_key(strict: StrictServer, api: str) -> None:
    # What "always" costs against a server that does not know the field: the stub is strict.
    cp = _plugin(prompt_cache_key="always")
    with pytest.raises(openai.BadRequestError, match=KEY):
        _run(cp.wrap(_agent(strict, api)), cp.run_config(thread="t1"))
    assert strict.refused == [[KEY]]


@API
def test_a_setting_that_disables_the_key_wins(strict: StrictServer, api: str) -> None:
    cp = _plugin(prompt_cache_key="always")
    settings = ModelSettings(extra_args={KEY: openai.omit})  # sent as absent by the client
    result = _run(cp.wrap(_agent(strict, api, settings)), cp.run_config(thread="t1"))
    assert result.final_output == "done"
    assert strict.refused == [] and all(KEY not in body for body in strict.bodies)

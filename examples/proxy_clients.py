"""The `openai` and `anthropic` clients through `cachepilot proxy`, with no API key needed.

Starts the embedded replay provider (a recorded two-turn session) as the upstream and the
proxy in front of it on loopback, then sends a tool loop through both clients. Against a real
provider, run `cachepilot proxy --upstream https://api.openai.com` (or
`https://api.anthropic.com`) and point the clients at it the same way.

    uv run python examples/proxy_clients.py
"""

from __future__ import annotations

import json
import threading
import time

import anthropic
import uvicorn
from openai import OpenAI

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall
from cachepilot.proxy import ProxyConfig, ProxyEngine, create_app
from cachepilot_bench.replay import ReplayProvider, ReplayScript, ReplayTurn

LOG = "\n".join(f"{i:05d} compiling module_{i % 97} ... ok" for i in range(3000))
CALL = ToolCall("call_1", "bash", json.dumps({"command": "make"}))
SCRIPT = ReplayScript(
    [
        ReplayTurn(Message("assistant", "Running the build.", tool_calls=(CALL,))),
        ReplayTurn(Message("assistant", "The build is fine.")),
    ]
)
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}


def serve(upstream: str, provider: str) -> tuple[uvicorn.Server, int]:
    config = ProxyConfig(upstream=upstream, provider=provider, port=0)
    engine = ProxyEngine(
        config, pilot=CachePilot(Config(provider=provider), store=InMemoryArtifactStore())
    )
    server = uvicorn.Server(uvicorn.Config(create_app(engine), port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, server.servers[0].sockets[0].getsockname()[1]


def main() -> None:
    with ReplayProvider(SCRIPT) as upstream:
        server, port = serve(upstream.base_url, "openai-gpt-5.4-mini")
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-...")
        tools = [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}]
        messages = [{"role": "user", "content": "Build the project."}]
        first = client.chat.completions.create(model="gpt-5.4-mini", messages=messages, tools=tools)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": LOG},
        ]
        second = client.chat.completions.create(
            model="gpt-5.4-mini", messages=messages, tools=tools
        )
        sent = upstream.records[-1].body["messages"][-1]["content"]
        print("openai:", second.choices[0].message.content)
        print(f"  the client sent {len(LOG):,} characters of log; the upstream read {len(sent):,}")
        server.should_exit = True
    with ReplayProvider(SCRIPT, profile="anthropic") as upstream:
        server, port = serve(upstream.base_url, "anthropic")
        claude = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="sk-ant-...")
        tool = {"name": "bash", "input_schema": SCHEMA}
        turn = [{"role": "user", "content": "Build the project."}]
        first_reply = claude.messages.create(
            model="claude-sonnet-4-5", max_tokens=1024, messages=turn, tools=[tool]
        )
        shown = [b.model_dump(exclude_none=True) for b in first_reply.content]
        result = {"type": "tool_result", "tool_use_id": "call_1", "content": LOG}
        turn += [{"role": "assistant", "content": shown}, {"role": "user", "content": [result]}]
        with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=1024, messages=turn, tools=[tool]
        ) as stream:
            print("anthropic:", stream.get_final_message().content[0].text)
        sent = upstream.records[-1].body["messages"][-1]["content"][0]["content"]
        print(f"  the client sent {len(LOG):,} characters of log; the upstream read {len(sent):,}")
        server.should_exit = True


if __name__ == "__main__":
    main()

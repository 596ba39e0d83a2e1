"""Responses chains (`previous_response_id`) through the proxy with the real `openai` client.

Each request of a chain sends its `function_call_output` items without the `function_call`
they answer (the server holds it). The proxy names them from the replies it relayed, so a
file read gets the file-read profile, the loop memory sees the real arguments (no false
"identical call" notes, a real repeat still noted) and a recall round-trip works, streamed
and not, after a restart over the same stores, and for a real Agents SDK `Runner` chaining
its requests (`auto_previous_response_id`), which ends as its straight run does.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI, OpenAI
from proxy_helpers import running_proxy
from scripts import BIG, BIG_REF, FLAT_BASH, SYSTEM, recall_call

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message, ToolCall
from cachepilot.proxy.calls import ARGUMENT_CHARS, MAX_CALLS, MAX_CHARS, SeenCalls, streamed_call
from cachepilot.sim import DEFAULT_PROFILE
from cachepilot.state.base import MemoryStateStore
from cachepilot_bench.replay import ReplayProvider, ReplayRecord, ReplayScript, ReplayTurn

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ENGINE = "".join(
    f"def step_{i}(value: int) -> int:\n    return value * {i % 7} + {i}\n\n" for i in range(900)
)
"""A source file of ~55k characters: over the generic limit, a first read the file-read
profile keeps whole."""
READ_FILE = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
TOOLS = [READ_FILE, FLAT_BASH]
FINAL = "The engine is fixed."


def _call(call_id: str, name: str, **arguments: str) -> ToolCall:
    return ToolCall(call_id, name, json.dumps(arguments))


CALLS = [
    _call("call_read", "read_file", path="src/engine.py"),
    _call("call_make", "bash", command="make"),
    _call("call_test", "bash", command="make test"),
    _call("call_st1", "bash", command="git status"),
    _call("call_st2", "bash", command="git status"),
    _call("call_st3", "bash", command="git status"),
]
OUTPUTS = {
    "call_read": ENGINE,
    "call_make": BIG,
    "call_test": "42 passed",
    "call_st1": "clean (1)",
    "call_st2": "clean (2)",
    "call_st3": "clean (3)",
}


def chain_script(*, recall: bool = True) -> ReplayScript:
    """One call per turn, then (optionally) a recall of the build log, then the answer."""
    turns = [ReplayTurn(Message("assistant", "", tool_calls=(c,))) for c in CALLS]
    if recall:
        turns.append(ReplayTurn(Message("assistant", "", tool_calls=(recall_call(),))))
    turns.append(ReplayTurn(Message("assistant", FINAL)))
    return ReplayScript(turns)


def client(base_url: str, **headers: str) -> OpenAI:
    return OpenAI(
        base_url=base_url, api_key="sk-test", max_retries=0, timeout=30, default_headers=headers
    )


def create(api: OpenAI, *, stream: bool, **kwargs: Any) -> Any:
    """One Responses call; streamed, the response `response.completed` carries."""
    if not stream:
        return api.responses.create(model="m", tools=TOOLS, **kwargs)
    final = None
    for event in api.responses.create(model="m", tools=TOOLS, stream=True, **kwargs):
        if event.type == "response.completed":
            final = event.response
    assert final is not None
    return final


def run_chain(api: OpenAI, *, stream: bool, steps: int | None = None, start: Any = None) -> Any:
    """Play the agent: answer each function call with its output, chained by response id."""
    response = start
    if response is None:
        response = create(api, stream=stream, instructions=SYSTEM, input="Fix the engine.")
    done = 0
    while steps is None or done < steps:
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            break
        outputs = [
            {"type": "function_call_output", "call_id": c.call_id, "output": OUTPUTS[c.call_id]}
            for c in calls
        ]
        response = create(
            api, stream=stream, instructions=SYSTEM, previous_response_id=response.id,
            input=outputs,
        )  # fmt: skip
        done += 1
    return response


def sent_output(records: list[ReplayRecord], call_id: str) -> str:
    """The output of `call_id` as the upstream received it."""
    for record in records:
        items = record.body.get("input")
        for item in items if isinstance(items, list) else ():
            if item.get("call_id") == call_id and item.get("type") == "function_call_output":
                return str(item["output"])
    raise AssertionError(f"no output of {call_id} reached the upstream")


@pytest.mark.parametrize("stream", [False, True])
def test_chained_outputs_are_reduced_as_their_calls(stream: bool) -> None:
    with ReplayProvider(chain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        final = run_chain(client(proxy.base_url), stream=stream)
        records = upstream.records
    # Every request after the first continues the chain and carries outputs only.
    assert all(r.body.get("previous_response_id") for r in records[1:])
    assert not any(i.get("type") == "function_call" for r in records[1:] for i in r.body["input"])
    # The first read of a file is kept whole (the generic profile would cut it to a preview).
    assert sent_output(records, "call_read") == ENGINE
    # The build log is reduced, with its ref.
    log = sent_output(records, "call_make")
    assert len(log) < len(BIG) // 4 and f'recall(ref="{BIG_REF}")' in log
    # Different calls are not "identical"; the third real `git status` in a row is.
    for call_id in ("call_test", "call_st1", "call_st2"):
        assert sent_output(records, call_id) == OUTPUTS[call_id]
    third = sent_output(records, "call_st3")
    assert third.startswith(OUTPUTS["call_st3"])
    assert "[note: identical bash call #3 in a row; the output changed]" in third
    # The model's recall was answered by the proxy in the same chain: the client never
    # sees it and gets the final answer.
    recall = records[-1].body
    assert recall["previous_response_id"] == records[-2].response_id
    assert recall["input"][0]["type"] == "function_call_output"
    assert "00000 compiling" in recall["input"][0]["output"]
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text == FINAL


def test_the_seen_calls_survive_a_restart() -> None:
    """A second proxy over the same stores names the outputs of calls the first relayed."""
    artifacts = InMemoryArtifactStore()
    states = MemoryStateStore()

    def pilot() -> CachePilot:
        return CachePilot(Config(provider=DEFAULT_PROFILE), store=artifacts)

    header = {"x-cachepilot-thread": "chain-1"}
    with ReplayProvider(chain_script(recall=False)) as upstream:
        with running_proxy(upstream.base_url, pilot=pilot(), state_store=states) as first:
            started = create(
                client(first.base_url, **header), stream=False, instructions=SYSTEM,
                input="Fix the engine.",
            )  # fmt: skip
        with running_proxy(upstream.base_url, pilot=pilot(), state_store=states) as second:
            final = run_chain(client(second.base_url, **header), stream=False, start=started)
        records = upstream.records
    assert sent_output(records, "call_read") == ENGINE
    assert "identical bash call #3" in sent_output(records, "call_st3")
    assert "identical" not in sent_output(records, "call_st2")
    assert final.output_text == FINAL


def test_seen_calls_stay_bounded_and_compact() -> None:
    seen = SeenCalls()
    seen.note(ToolCall(f"call_{i}", "bash", json.dumps({"command": f"ls {i}"})) for i in range(600))
    assert len(seen) == MAX_CALLS
    tool = Message("tool", "x", tool_call_id="call_599")
    assert seen.answered([tool])["call_599"].name == "bash"
    assert seen.answered([Message("tool", "x", tool_call_id="call_0")]) == {}
    # A call in the request itself wins: nothing is looked up for it.
    own = Message("assistant", "", tool_calls=(ToolCall("call_599", "bash", "{}"),))
    assert seen.answered([own, tool]) == {}
    # Long arguments are kept as their short fields and digests of the long ones.
    content = "x" * 50_000
    seen.note([ToolCall("call_w", "write_file", json.dumps({"path": "a.py", "content": content}))])
    result = Message("tool", "ok", tool_call_id="call_w")
    kept = json.loads(seen.answered([result])["call_w"].arguments)
    assert kept["path"] == "a.py" and kept["content"].startswith("[50000 chars, sha256 ")
    other = json.dumps({"path": "a.py", "content": content[:-1] + "y"})
    seen.note([ToolCall("call_v", "write_file", other)])
    changed = seen.answered([Message("tool", "ok", tool_call_id="call_v")])["call_v"].arguments
    assert json.loads(changed)["content"] != kept["content"]
    # Huge arguments of any shape stay within the per-call and per-thread budgets.
    for i in range(100):
        seen.note([ToolCall(f"big_{i}", "t", "[" + "1," * 20_000 + "1]")])
    assert all(len(args) <= ARGUMENT_CHARS for _, _, args in seen.to_json())
    assert sum(len(a) + len(b) + len(c) for a, b, c in seen.to_json()) <= MAX_CHARS
    # Stored and read back, with unreadable entries dropped.
    again = SeenCalls.from_json([*seen.to_json(), ["bad"], 7])
    assert again.to_json() == seen.to_json()
    assert SeenCalls.from_json("junk").to_json() == []


def agents_run(base_url: str) -> tuple[Any, list[str]]:
    """A real Agents SDK `Runner` on Responses with `auto_previous_response_id`: its final
    output and the tool calls it ran."""
    ran: list[str] = []
    statuses = iter(["clean (1)", "clean (2)", "clean (3)"])

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(f"read_file {path}")
        return ENGINE

    @function_tool
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(f"bash {command}")
        outputs = {"make": BIG, "make test": "42 passed"}
        return outputs.get(command) or next(statuses)

    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    agent = Agent(
        name="builder",
        instructions=SYSTEM,
        tools=[read_file, bash],
        model=OpenAIResponsesModel(model="m", openai_client=client),
    )
    result = asyncio.run(
        Runner.run(
            agent,
            "Fix the engine.",
            max_turns=20,
            run_config=RunConfig(tracing_disabled=True),
            auto_previous_response_id=True,
        )
    )
    return result.final_output, ran


def test_agents_sdk_chain_through_the_proxy_matches_the_straight_run() -> None:
    with ReplayProvider(chain_script(recall=False)) as upstream:
        straight = agents_run(upstream.base_url)
    with ReplayProvider(chain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        proxied = agents_run(proxy.base_url)
        records = upstream.records
    assert proxied == straight
    assert straight[0] == FINAL and len(straight[1]) == len(CALLS)
    assert all(r.body.get("previous_response_id") for r in records[1:])
    outputs = [
        item
        for r in records
        for item in (r.body["input"] if isinstance(r.body["input"], list) else ())
        if item.get("type") == "function_call_output"
    ]
    by_text = {o["call_id"]: str(o["output"]) for o in outputs}
    assert by_text["call_read"] == ENGINE
    assert f'recall(ref="{BIG_REF}")' in by_text["call_make"]
    notes = [k for k, v in by_text.items() if "identical" in v]
    assert notes == ["call_st3"]
    assert "00000 compiling" in by_text["call_recall"]


def stored_calls(engine: Any) -> list[list[str]]:
    """The seen calls of every thread the proxy stored."""
    store = engine.threads.store
    out: list[list[str]] = []
    for name in engine.threads.names():
        document = asyncio.run(store.load(name))
        out.extend(json.loads(document)["proxy"]["calls"] if document else [])
    return out


@pytest.mark.parametrize("store", [None, False])
def test_calls_are_kept_only_for_replies_a_chain_can_continue(store: bool | None) -> None:
    """`store: false` (Codex) means no later request can continue the reply: its calls are
    not kept (nothing to store with the thread on every request)."""
    extra: dict[str, Any] = {} if store is None else {"store": store}
    with ReplayProvider(chain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        create(
            client(proxy.base_url), stream=False, instructions=SYSTEM, input="Fix the engine.",
            **extra,
        )  # fmt: skip
        kept = stored_calls(proxy.engine)
    if store is None:
        assert kept == [["call_read", "read_file", CALLS[0].arguments]]
    else:
        assert kept == []


def test_streamed_calls_are_read_only_from_whole_items() -> None:
    done = {"type": "response.output_item.done"}
    item = {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"}
    assert streamed_call({**done, "item": item}) == ToolCall("c1", "bash", "{}")
    custom = {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "x"}
    assert streamed_call({**done, "item": custom}) == ToolCall("c2", "apply_patch", "x")
    # Partial, foreign or malformed events name nothing.
    assert streamed_call({"type": "response.output_item.added", "item": item}) is None
    assert streamed_call({**done, "item": {**item, "name": None}}) is None
    assert streamed_call({**done, "item": {"type": "message"}}) is None
    assert streamed_call({**done, "item": "junk"}) is None
    assert streamed_call(None) is None

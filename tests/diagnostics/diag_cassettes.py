"""Builder of the hand-made cassettes and request logs under tests/diagnostics/cassettes/.

Each file is one scenario with one known cause of a cache break. Re-generate them with
`uv run python tests/diagnostics/diag_cassettes.py` (the tests read the committed files).
Prompts are over 1,024 tokens so the OpenAI profile can cache them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent / "cassettes"

POLICY = "\n".join(
    f"Rule {i}: keep the working tree clean, run the tests for module {i} before committing, "
    f"and explain every change to file src/module_{i}.py in one short sentence."
    for i in range(60)
)
SYSTEM = f"You are a careful coding agent.\n{POLICY}"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"Run {name}.",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string"}},
                "required": ["arg"],
            },
        },
    }
    for name in ("bash", "read_file", "write_file")
]
LOG = "\n".join(f"tests/test_{i}.py::test_case PASSED" for i in range(120))


def chat_turns() -> list[list[dict[str, Any]]]:
    """Growing chat histories: call k sends turns[k]."""
    user = {"role": "user", "content": "Fix the failing test in src/module_3.py."}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"arg": "pytest -q"}'},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": LOG}
    answer = {"role": "assistant", "content": "All tests pass now."}
    follow = {"role": "user", "content": "Thanks. Now update the changelog."}
    return [[user], [user, call, result], [user, call, result, answer, follow]]


def chat_body(system: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": extra.pop("model", "gpt-5.4-mini"),
        "messages": [{"role": "system", "content": system}, *messages],
        "tools": extra.pop("tools", TOOLS),
    }
    body.update(extra)
    return body


def chat_response(n: int, prompt: int = 0, cached: int = 0) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "model": "gpt-5.4-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": 12,
            "total_tokens": prompt + 12,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def interaction(
    uri: str, body: dict[str, Any], response: Any, *, date: str | None = None, gz: bool = False
) -> dict[str, Any]:
    headers: dict[str, list[str]] = {"Content-Type": ["application/json"]}
    if date:
        headers["Date"] = [date]
    payload: Any = response if isinstance(response, str) else json.dumps(response)
    if gz:
        payload = gzip.compress(payload.encode("utf-8"), mtime=0)
        headers["Content-Encoding"] = ["gzip"]
    return {
        "request": {
            "body": json.dumps(body),
            "headers": {"Content-Type": ["application/json"]},
            "method": "POST",
            "uri": uri,
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": headers,
            "body": {"string": payload},
        },
    }


CHAT_URI = "https://api.openai.com/v1/chat/completions"
RESPONSES_URI = "https://api.openai.com/v1/responses"
ANTHROPIC_URI = "https://api.anthropic.com/v1/messages"


def volatile_date() -> dict[str, Any]:
    """Chat, YAML: the system prompt carries the current time; one call a minute."""
    interactions = []
    for n, turn in enumerate(chat_turns()):
        system = f"{SYSTEM}\nCurrent time: 2025-11-20 10:0{n}:00 UTC."
        interactions.append(
            interaction(
                CHAT_URI,
                chat_body(system, turn),
                chat_response(n, prompt=2400 + 1200 * n),
                date=f"Thu, 20 Nov 2025 10:0{n}:00 GMT",
                gz=n == 1,
            )
        )
    return {"interactions": interactions, "version": 1}


def tool_changes() -> dict[str, Any]:
    """Chat, JSON cassette: tools reordered on call 1, a tool added on call 2."""
    turns = chat_turns()
    extra_tool = {
        "type": "function",
        "function": {"name": "search", "description": "Search.", "parameters": {}},
    }
    tool_sets = [TOOLS, TOOLS[::-1], [*TOOLS[::-1], extra_tool]]
    return {
        "interactions": [
            interaction(
                CHAT_URI,
                chat_body(SYSTEM, turn, tools=tools),
                chat_response(n, prompt=2400 + 1200 * n),
            )
            for n, (turn, tools) in enumerate(zip(turns, tool_sets, strict=True))
        ],
        "version": 1,
    }


def clean_stream() -> dict[str, Any]:
    """Chat, YAML, streamed answers with usage in the last chunk: no break at all."""
    interactions = []
    for n, turn in enumerate(chat_turns()):
        chunks = [
            {"id": f"chatcmpl-{n}", "choices": [{"index": 0, "delta": {"content": "ok"}}]},
            {
                "id": f"chatcmpl-{n}",
                "choices": [],
                "usage": {
                    "prompt_tokens": 1500 + 400 * n,
                    "completion_tokens": 7,
                    "prompt_tokens_details": {"cached_tokens": 1408 if n else 0},
                },
            },
        ]
        stream = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        body = chat_body(SYSTEM, turn, stream=True, stream_options={"include_usage": True})
        interactions.append(interaction(CHAT_URI, body, stream))
    return {"interactions": interactions, "version": 1}


def anthropic_changes() -> dict[str, Any]:
    """Anthropic, YAML: tool_choice changes on call 1, the model on call 2."""
    tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in TOOLS
    ]
    user = {"role": "user", "content": [{"type": "text", "text": "Fix src/module_3.py."}]}
    use = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Running the tests."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"arg": "pytest"}},
        ],
    }
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": LOG,
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }
    done = {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]}
    more = {"role": "user", "content": "Now the changelog."}
    histories = [[user], [user, use, result], [user, use, result, done, more]]
    settings = [
        ("claude-sonnet-4-5", {"type": "auto"}),
        ("claude-sonnet-4-5", {"type": "any"}),
        ("claude-opus-4-1", {"type": "any"}),
    ]
    interactions = []
    for n, (messages, (model, choice)) in enumerate(zip(histories, settings, strict=True)):
        body = {
            "model": model,
            "max_tokens": 1024,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "tools": tools,
            "tool_choice": choice,
            "messages": messages,
            "metadata": {"user_id": "user-42"},
        }
        response = {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "ok"}],
            "usage": {
                "input_tokens": 50,
                "cache_read_input_tokens": 1400 if n == 1 else 0,
                "cache_creation_input_tokens": 300,
                "output_tokens": 9,
            },
        }
        interactions.append(interaction(ANTHROPIC_URI, body, response))
    return {"interactions": interactions, "version": 1}


def responses_lines() -> list[dict[str, Any]]:
    """Responses API request log: a tool output cleared (history rewrite), then a
    `previous_response_id` chain that sends only new input (no break)."""
    user = {"role": "user", "content": [{"type": "input_text", "text": "Fix module 3."}]}
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "bash",
        "arguments": '{"arg":"pytest"}',
    }
    output = {"type": "function_call_output", "call_id": "call_1", "output": LOG}
    cleared = {**output, "output": "[cleared]"}
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Done."}],
    }
    more = {"role": "user", "content": "And the changelog?"}
    inputs = [[user], [user, call, output], [user, call, cleared, answer, more]]
    lines: list[dict[str, Any]] = []
    for n, items in enumerate(inputs):
        lines.append(
            {
                "api": "responses",
                "url_path": "/v1/responses",
                "timestamp": 1_700_000_000.0 + 30 * n,
                "request": {
                    "model": "gpt-5.4-mini",
                    "instructions": SYSTEM,
                    "input": items,
                    "tools": [{"type": "function", **t["function"]} for t in TOOLS],
                    "prompt_cache_key": "agent-a",
                },
                # Call 1 extends call 0, yet the provider reports no cached token.
                "usage": {
                    "input_tokens": 2400 + 1200 * n,
                    "input_tokens_details": {"cached_tokens": 2304 if n == 2 else 0},
                    "output_tokens": 5,
                },
            }
        )
    # A second conversation chained by previous_response_id: only new input each time.
    first_output = [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi."}],
        }
    ]
    lines.append(
        {
            "api": "responses",
            "timestamp": 1_700_000_200.0,
            "request": {
                "model": "gpt-5.4-mini",
                "instructions": SYSTEM,
                "input": "Hello, this is a new task about module 7.",
            },
            "response": {"id": "resp_1", "output": first_output, "usage": {"input_tokens": 1300}},
        }
    )
    lines.append(
        {
            "api": "responses",
            "timestamp": 1_700_000_230.0,
            "request": {
                "model": "gpt-5.4-mini",
                "instructions": SYSTEM,
                "previous_response_id": "resp_1",
                "input": [{"role": "user", "content": "Go on."}],
            },
            "response": {
                "id": "resp_2",
                "output": [],
                "usage": {"input_tokens": 1320, "input_tokens_details": {"cached_tokens": 1280}},
            },
        }
    )
    return lines


def chat_lines() -> list[dict[str, Any]]:
    """Chat request log with timestamps: history rewrites, a TTL expiry, a short thread.

    Thread `t-rewrite` (metadata.thread_id): call 1 removes a message, call 2 folds the
    history into a summary. Thread `t-ttl`: call 1 comes 10 minutes after call 0. Thread
    `t-short`: requests below the minimum cacheable length. Bare bodies carry no timestamp.
    """
    turns = chat_turns()
    user, call, result, answer, follow = turns[2]
    lines: list[dict[str, Any]] = []

    def add(thread: str, messages: list[dict[str, Any]], t: float | None, **kw: Any) -> None:
        body = chat_body(kw.pop("system", SYSTEM), messages, metadata={"thread_id": thread})
        lines.append({"api": "chat", "timestamp": t, "request": body, **kw})

    add("t-rewrite", [user, call, result, answer, follow], 1000.0)
    add("t-rewrite", [user, answer, follow, {"role": "assistant", "content": "On it."}], 1010.0)
    summary = {"role": "user", "content": "Summary: fixed module 3; tests pass."}
    add("t-rewrite", [summary, {"role": "user", "content": "What next?"}], 1020.0)
    add("t-ttl", [user, call, result], 2000.0)
    add("t-ttl", [user, call, result, answer], 2600.0)
    add("t-short", [{"role": "user", "content": "hi"}], 3000.0, system="Be brief.")
    add(
        "t-short",
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        3005.0,
        system="Be brief.",
    )
    # Bare bodies (no wrapper): a system prompt edited (not a volatile value).
    lines.append(chat_body(SYSTEM, turns[1], user="u-9"))
    lines.append(chat_body(SYSTEM.replace("careful", "meticulous"), turns[2], user="u-9"))
    return lines


def main() -> None:
    HERE.mkdir(exist_ok=True)
    dump = {"Dumper": yaml.SafeDumper, "sort_keys": True, "allow_unicode": True}
    (HERE / "volatile_date.yaml").write_text(yaml.dump(volatile_date(), **dump), encoding="utf-8")
    (HERE / "tool_changes.json").write_text(json.dumps(tool_changes(), indent=2), encoding="utf-8")
    (HERE / "clean_stream.yaml").write_text(yaml.dump(clean_stream(), **dump), encoding="utf-8")
    (HERE / "anthropic_changes.yaml").write_text(
        yaml.dump(anthropic_changes(), **dump), encoding="utf-8"
    )
    for name, lines in (
        ("responses_log.jsonl", responses_lines()),
        ("chat_log.jsonl", chat_lines()),
    ):
        (HERE / name).write_text(
            "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8"
        )


if __name__ == "__main__":
    main()

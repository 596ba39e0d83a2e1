"""Provider-native context management through the proxy and `cachepilot audit`.

Anthropic `context_management` edits (`clear_tool_uses_20250919`, `clear_thinking_20251015`)
and OpenAI Responses `context_management` (server-side compaction) are the provider's own:
the proxy forwards them as sent, and the audit never counts the provider's server-side edit
as a break of the request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
from openai import OpenAI
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BIG, CALL, FINAL, FLAT_BASH, SYSTEM, plain_script

from cachepilot.audit import audit_file
from cachepilot.cli import main as cli_main
from cachepilot_bench.replay import ReplayProvider

LONG_SYSTEM = "You are a careful build assistant. " + "Follow the house rules. " * 300
ANTHROPIC_EDITS = {
    "edits": [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 30_000},
            "keep": {"type": "tool_uses", "value": 3},
            "clear_at_least": {"type": "input_tokens", "value": 5_000},
        },
    ]
}
RESPONSES_EDITS = [{"type": "compaction", "compact_threshold": 200_000}]


def anthropic_conversation(root: str) -> None:
    api = anthropic.Anthropic(base_url=root, api_key="sk-ant-test", max_retries=0, timeout=30)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Build the project."}]
    later = [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the build."},
                {"type": "tool_use", "id": CALL.id, "name": "bash", "input": {"command": "make"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": CALL.id, "content": BIG}],
        },
    ]
    for extra in (
        [],
        later,
        [{"role": "assistant", "content": FINAL}, {"role": "user", "content": "Thanks"}],
    ):
        messages.extend(extra)
        api.messages.create(
            model="claude-test",
            max_tokens=512,
            system=LONG_SYSTEM,
            messages=messages,
            tools=[ANTHROPIC_BASH],  # type: ignore[list-item]
            extra_body={"context_management": ANTHROPIC_EDITS},
        )


def test_anthropic_context_management_is_forwarded_as_sent(tmp_path: Path) -> None:
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        anthropic_conversation(proxy.root)
        records = upstream.records
        log = upstream.write_log(tmp_path / "requests.jsonl")
    assert len(records) == 3
    for record in records:
        assert record.body["context_management"] == ANTHROPIC_EDITS
    # The proxy still did its own work on the same bodies (a reduced result, a recall tool).
    result = records[1].body["messages"][2]["content"][0]
    assert len(result["content"]) < len(BIG) // 5
    assert [t["name"] for t in records[0].body["tools"]] == ["bash", "recall"]
    # What the proxy sent is append-only: the audit finds no break of the request.
    report = audit_file(log)
    assert report.totals["prefix_breaks"] == 0


def test_responses_context_management_is_forwarded_as_sent() -> None:
    with ReplayProvider(plain_script()) as upstream, running_proxy(upstream.base_url) as proxy:
        api = OpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0, timeout=30)
        api.responses.create(
            model="m",
            instructions=SYSTEM,
            input=[{"role": "user", "content": "Build the project."}],
            tools=[FLAT_BASH],  # type: ignore[list-item]
            extra_body={"context_management": RESPONSES_EDITS},
        )
        body = upstream.records[0].body
    assert body["context_management"] == RESPONSES_EDITS


def _server_cleared(log: Path, *, keep_field: bool) -> Path:
    """The log as if the provider had cleared tool results server-side at the last call:
    it reports the cache read only up to the first cleared result (here: nothing past the
    system prompt), as Anthropic does after a clear. Optionally without the request field."""
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    last = lines[-1]
    usage = dict(last["usage"])
    total = (
        usage.get("input_tokens", 0)
        + usage.get("cache_read_input_tokens", 0)
        + usage.get("cache_creation_input_tokens", 0)
    )
    usage.update(
        {
            "input_tokens": 40,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": max(1, total // 3),
        }
    )
    last["usage"] = usage
    last["response"]["usage"] = usage
    last["response"]["context_management"] = {
        "applied_edits": [
            {
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": 1,
                "cleared_input_tokens": 5_000,
            }
        ]
    }
    if not keep_field:
        for line in lines:
            line["request"].pop("context_management", None)
    out = log.with_name(f"cleared-{keep_field}.jsonl")
    out.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return out


def test_audit_never_counts_the_providers_clearing_as_a_break(tmp_path: Path, capsys: Any) -> None:
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        anthropic_conversation(proxy.root)
        log = upstream.write_log(tmp_path / "requests.jsonl")

    edited = audit_file(_server_cleared(log, keep_field=True))
    last = edited.calls[-1].explanation
    assert last is not None and last.cause == "provider_edit"
    assert "clear_tool_uses_20250919" in last.summary
    assert not last.prefix_break and not last.avoidable
    assert edited.totals["prefix_breaks"] == 0
    # The same usage without the request field is a provider-side miss: the field decides.
    plain = audit_file(_server_cleared(log, keep_field=False))
    other = plain.calls[-1].explanation
    assert other is not None and other.cause == "provider_miss"
    # A CI gate on the request's own breaks passes.
    assert cli_main(["audit", str(_server_cleared(log, keep_field=True)), "--max-breaks", "0"]) == 0
    assert "provider context edit" in capsys.readouterr().out


def test_anthropic_compaction_block_is_forwarded_as_sent() -> None:
    """A `compaction` block Anthropic returned (server-side compaction) goes back unchanged."""
    block = {"type": "compaction", "content": "Summary: the build ran; module_7 failed."}
    edits = {"edits": [{"type": "compact_20260112"}]}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Build the project."},
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": "Go on."},
    ]
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(upstream.base_url, provider="anthropic") as proxy,
    ):
        api = anthropic.Anthropic(base_url=proxy.root, api_key="sk-ant-test", max_retries=0)
        api.messages.create(
            model="claude-test",
            max_tokens=512,
            system=LONG_SYSTEM,
            messages=messages,  # type: ignore[arg-type]
            tools=[ANTHROPIC_BASH],  # type: ignore[list-item]
            extra_body={"context_management": edits},
        )
        body = upstream.records[0].body
    assert body["context_management"] == edits
    assert body["messages"][1] == {"role": "assistant", "content": [block]}

"""`cachepilot audit` on cassettes as public projects record them, and Anthropic's caching rules.

The cassettes are synthetic, one per shape (tests/fixtures/audit_cassettes/make.py writes them):
the `langchain_tests` layout in `.yaml.gz`, pydantic-ai's `parsed_body`, multi-document YAML,
zstd bodies, HTTP error responses, an OpenAI Assistants thread message.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from cachepilot.audit import audit_calls, audit_file, format_report, load_calls
from cachepilot.audit import inflate as inflate_module
from cachepilot.audit.sources import calls_from_interactions
from cachepilot.sim import render_request
from cachepilot.tokens import get_counter
from cachepilot.wire import api_from_path, parse_body

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "audit_cassettes"
SYSTEM = "You are a careful assistant for the audit tests. " * 160
HAS_ZSTD = any(
    importlib.util.find_spec(name) is not None for name in ("zstandard", "compression.zstd")
)


# --------------------------------------------------------------------------------------------
# Cassette shapes


def test_langchain_tests_layout_in_yaml_gz_with_a_redacted_uri() -> None:
    calls = load_calls(HERE / "langchain_layout.yaml.gz")
    # The URI is '**REDACTED**': the body's shape names the API.
    assert [c.api for c in calls] == ["chat", "chat"]
    assert [c.usage.input_tokens if c.usage else None for c in calls] == [500, 501]
    assert calls[1].usage is not None and calls[1].usage.cached_tokens == 400


def test_parsed_body_requests_and_responses() -> None:
    calls = load_calls(HERE / "parsed_body.yaml")
    assert [c.api for c in calls] == ["anthropic", "anthropic"]
    assert [c.response_id for c in calls] == ["msg_0", "msg_1"]
    assert [c.usage.input_tokens if c.usage else None for c in calls] == [700, 710]


def test_multi_document_yaml_reads_every_document() -> None:
    calls = load_calls(HERE / "multi_document.yaml")
    assert [c.response_id for c in calls] == ["chatcmpl-0", "chatcmpl-1"]


@pytest.mark.skipif(not HAS_ZSTD, reason="no zstd decoder installed")
def test_zstd_response_keeps_its_usage() -> None:
    report = audit_file(HERE / "zstd_response.yaml")
    call = report.calls[0].call
    assert call.usage is not None and call.usage.input_tokens == 512
    assert report.notes == [] and report.totals["recorded_calls"] == 1


def test_a_body_without_decoder_is_named_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflate_module, "_optional", lambda name: None)
    report = audit_file(HERE / "zstd_response.yaml")
    assert report.calls[0].call.usage is None  # the call is still audited
    assert len(report.notes) == 1
    note = report.notes[0]
    assert note.startswith("interaction 0: response body skipped (zstd)")
    assert "zstandard" in note and "recorded usage unknown" in note
    text = format_report(report)
    assert "not read (1)" in text and note in text
    assert report.to_dict()["notes"] == [note]


def test_brotli_body_without_decoder_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflate_module, "_optional", lambda name: None)
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    request = {
        "method": "POST",
        "uri": "https://api.openai.com/v1/chat/completions",
        "body": json.dumps(body),
    }
    response = {
        "status": {"code": 200},
        "headers": {"content-encoding": ["br"]},
        "body": {"string": b"\x1b\x03\x00\xf8\xa5\x40\x02"},
    }
    notes: list[str] = []
    calls = calls_from_interactions([(request, response)], notes=notes)
    assert len(calls) == 1 and calls[0].usage is None
    assert len(notes) == 1 and "(br)" in notes[0] and "brotli" in notes[0]
    assert calls[0].notes == tuple(notes)


def test_http_errors_are_not_priced_and_thread_messages_are_not_anthropic() -> None:
    report = audit_file(HERE / "http_errors.yaml")
    # 429 and 500 are not calls; the Assistants thread message is not a model call at all.
    assert [c.call.source for c in report.calls] == ["interaction 1"]
    assert report.totals["calls"] == 1
    assert [n.split(":")[0] for n in report.notes] == ["interaction 0", "interaction 2"]
    assert all("not a billed call" in n for n in report.notes)


def test_api_from_path_keeps_assistants_threads_apart() -> None:
    assert api_from_path("/v1/threads/thread_abc/messages") is None
    assert api_from_path("/v1/chat/completions/chatcmpl-1/messages") is None
    assert api_from_path("/v1/messages") == "anthropic"
    assert api_from_path("/anthropic/v1/messages") == "anthropic"


def _schema(fields: int) -> dict[str, Any]:
    properties = {
        f"field_{i}": {"type": "string", "description": f"value {i}"} for i in range(fields)
    }
    return {"type": "object", "properties": properties, "required": list(properties)}


def test_structured_output_schemas_are_prompt_tokens() -> None:
    counter = get_counter()
    base = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "fill it"}]}
    schema = {"type": "json_schema", "json_schema": {"name": "form", "schema": _schema(40)}}
    plain = render_request(parse_body(base).request, counter).total_tokens
    chat = render_request(parse_body({**base, "response_format": schema}).request, counter)
    assert chat.total_tokens > plain + 200
    responses = {"model": "gpt-5", "input": "fill it", "text": {"format": {"type": "json_schema",
                 "name": "form", "schema": _schema(40)}}}  # fmt: skip
    bare = {"model": "gpt-5", "input": "fill it"}
    assert (
        render_request(parse_body(responses).request, counter).total_tokens
        > render_request(parse_body(bare).request, counter).total_tokens + 200
    )
    anthropic = {**_anthropic([_user("fill it")]), "output_format": {"type": "json_schema",
                 "schema": _schema(40)}}  # fmt: skip
    assert (
        render_request(parse_body(anthropic).request, counter).total_tokens
        > render_request(parse_body(_anthropic([_user("fill it")])).request, counter).total_tokens
        + 200
    )


# --------------------------------------------------------------------------------------------
# Anthropic caching as the request asks for it


def _user(text: str, mark: dict[str, Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if mark is not None:
        block["cache_control"] = mark
    return {"role": "user", "content": [block]}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def _anthropic(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "system": SYSTEM,
        "messages": messages,
        **extra,
    }


def _usage(prompt: int, cached: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": prompt - cached,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": 5,
    }


def _log(
    bodies: list[dict[str, Any]], tmp_path: Path, *, gap: float = 30.0, cached: bool = False
) -> Path:
    counter = get_counter()
    lines = []
    for n, body in enumerate(bodies):
        prompt = render_request(parse_body(body).request, counter).total_tokens
        recorded = _usage(prompt, cached=prompt - 200 if cached and n else 0)
        entry = {"api": "anthropic", "timestamp": 1_700_000_000 + gap * n, "request": body}
        lines.append(json.dumps({**entry, "usage": recorded}))
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _conversation(
    turns: int, mark: dict[str, Any] | None = None, **extra: Any
) -> list[dict[str, Any]]:
    bodies = []
    for n in range(turns):
        messages: list[dict[str, Any]] = []
        for i in range(n):
            messages += [_user(f"question {i}"), _assistant(f"answer {i}")]
        messages.append(_user(f"question {n}", mark))
        bodies.append(_anthropic(messages, **extra))
    return bodies


def test_anthropic_without_cache_control_is_not_cached(tmp_path: Path) -> None:
    report = audit_file(_log(_conversation(4), tmp_path))
    assert [c.call.cache_mode for c in report.calls] == ["none"] * 4
    assert [c.simulated.cached_tokens for c in report.calls] == [0, 0, 0, 0]
    assert [c.simulated.cache_write_tokens for c in report.calls] == [0, 0, 0, 0]
    totals = report.totals
    # The provider cached nothing because nothing asked it to: no provider miss, nothing avoidable.
    assert totals["breaks"] == 0 and totals["by_cause"] == {}
    assert totals["avoidable_usd"] == 0 and totals["uncached_calls"] == 4
    assert "4 Anthropic call(s) carry no cache_control" in format_report(report)


def test_anthropic_change_after_an_uncached_call_loses_nothing(tmp_path: Path) -> None:
    session = {"metadata": {"session_id": "s1"}}
    bodies = _conversation(2, **session)
    bodies[1] = _anthropic(
        [_user("another first question"), _assistant("a"), _user("q")], **session
    )
    report = audit_file(_log(bodies, tmp_path))
    exp = report.calls[1].explanation
    assert exp is not None and exp.cause == "none" and exp.remissed_tokens == 0
    assert not exp.avoidable and any("nothing was cached to lose" in n for n in exp.notes)


def test_anthropic_explicit_marks_are_cached(tmp_path: Path) -> None:
    report = audit_file(_log(_conversation(3, {"type": "ephemeral"}), tmp_path, cached=True))
    assert [c.call.cache_mode for c in report.calls] == ["explicit"] * 3
    assert report.profile.name == "anthropic"
    cached = [c.simulated.cached_tokens for c in report.calls]
    assert cached[0] == 0 and cached[1] > 1000 and cached[2] > cached[1]
    assert report.totals["uncached_calls"] == 0


def test_anthropic_automatic_caching_marks_the_last_block(tmp_path: Path) -> None:
    bodies = _conversation(3, cache_control={"type": "ephemeral"})
    parsed = parse_body(bodies[2])
    assert parsed.cache_mode == "automatic"
    assert parsed.request.cache_breakpoints == (len(parsed.request.messages) - 1,)
    report = audit_file(_log(bodies, tmp_path, cached=True))
    cached = [c.simulated.cached_tokens for c in report.calls]
    assert cached[0] == 0 and cached[1] > 1000 and cached[2] > cached[1]


@pytest.mark.parametrize(
    ("ttl", "profile", "hit"), [(None, "anthropic", False), ("1h", "anthropic-1h", True)]
)
def test_anthropic_ttl_follows_the_marks(
    tmp_path: Path, ttl: str | None, profile: str, hit: bool
) -> None:
    mark = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    # Ten minutes between calls: past the 5-minute TTL, within the hour.
    report = audit_file(_log(_conversation(2, mark), tmp_path, gap=600))
    assert report.profile.name == profile
    assert (report.calls[1].simulated.cached_tokens > 1000) is hit


def test_anthropic_lookback_window_of_twenty_blocks(tmp_path: Path) -> None:
    mark = {"type": "ephemeral"}
    first = _anthropic([_user("start", mark)])
    # The next request adds 24 blocks and marks only its end: the earlier write lies more than
    # 20 blocks back from that mark, so it is not found.
    far: list[dict[str, Any]] = [_user("start")]
    for i in range(12):
        far += [_assistant(f"step {i}"), _user(f"result {i}")]
    far[-1] = _user("result 11", mark)
    near = [_user("start"), _assistant("step"), _user("result", mark)]
    far_report = audit_file(_log([first, _anthropic(far)], tmp_path))
    assert far_report.calls[1].simulated.cached_tokens == 0
    near_report = audit_calls(load_calls(_log([first, _anthropic(near)], tmp_path)))
    assert near_report.calls[1].simulated.cached_tokens > 1000

from __future__ import annotations

import logging

import pytest

import cachepilot.tokens as tokens_mod
from cachepilot.messages import ImagePart, Message, TextPart, ToolCall
from cachepilot.tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    ApproximateEncoding,
    TokenCounter,
    load_encoding,
)


class CountingEncoding:
    """One token per character; counts how often it is asked to encode."""

    name = "chars"

    def __init__(self) -> None:
        self.calls = 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls += 1
        return [ord(c) for c in text]


def test_encoding_is_memoised_so_recounting_costs_only_new_content() -> None:
    enc = CountingEncoding()
    counter = TokenCounter(enc)
    history = [Message(role="user", content=f"message {i}") for i in range(50)]
    first = counter.count_messages(history)
    calls_after_first = enc.calls
    history.append(Message(role="user", content="one more"))
    assert counter.count_messages(history) == first + len("one more") + MESSAGE_OVERHEAD_TOKENS
    assert enc.calls == calls_after_first + 1


def test_message_count_includes_calls_images_and_overhead() -> None:
    counter = TokenCounter(CountingEncoding())
    m = Message(
        role="assistant",
        content=(TextPart("abc"), ImagePart("https://x/y.png")),
        tool_calls=(ToolCall("id1", "bash", '{"c":1}'),),
    )
    expected = MESSAGE_OVERHEAD_TOKENS + 3 + IMAGE_TOKENS + len("bash") + len('{"c":1}') + 3
    assert counter.count_message(m) == expected


def test_real_tiktoken_when_available() -> None:
    counter = TokenCounter("o200k_base")
    if counter.approximate:
        pytest.skip("o200k_base not loadable here (set TIKTOKEN_CACHE_DIR)")
    assert counter.count("hello world") == 2
    assert counter.encode("<|endoftext|>")  # special tokens are plain text, never an error


def test_fallback_warns_once_and_is_deterministic(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens_mod, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="cachepilot.tokens"):
        a = load_encoding("no_such_encoding_xyz")
        b = load_encoding("no_such_encoding_xyz")
    assert isinstance(a, ApproximateEncoding) and isinstance(b, ApproximateEncoding)
    assert len([r for r in caplog.records if "approximate" in r.getMessage()]) == 1
    text = "The quick brown fox jumps over the lazy dog 12345."
    assert a.encode_ordinary(text) == b.encode_ordinary(text)
    ids = a.encode_ordinary(text + " more words")
    assert ids[: len(a.encode_ordinary(text))] == a.encode_ordinary(text)


def test_surrogates_and_empty_text_do_not_crash() -> None:
    counter = TokenCounter(ApproximateEncoding())
    assert counter.count("") == 0
    assert counter.count(b"\xff\xfe bad".decode("utf-8", "surrogateescape")) > 0


def test_bad_arguments_fail_fast() -> None:
    with pytest.raises(ValueError):
        load_encoding("")
    with pytest.raises(ValueError):
        TokenCounter(ApproximateEncoding(), max_cached_tokens=-1)

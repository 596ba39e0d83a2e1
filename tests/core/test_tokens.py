from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public

import cachepilot._encodings as bundled_mod
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
    assert not counter.approximate  # shipped with the package
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


@pytest.mark.parametrize("name", sorted(bundled_mod.BUNDLED))
def test_shipped_encodings_are_tiktokens_own(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same ranks (by the hash tiktoken checks), pattern and special tokens as tiktoken's
    own constructor, so counts equal `tiktoken.get_encoding(name)`."""
    ranks = bundled_mod.read_ranks(name)
    assert ranks is not None
    asked: list[str | None] = []

    def shipped_ranks(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        asked.append(expected_hash)
        return ranks

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", shipped_ranks)
    definition = openai_public.ENCODING_CONSTRUCTORS[name]()
    spec = bundled_mod.BUNDLED[name]
    assert asked == [spec.sha256]
    assert (definition["pat_str"], definition["special_tokens"]) == (
        spec.pat_str,
        spec.special_tokens,
    )
    reference = tiktoken.Encoding(**definition)
    ours = bundled_mod.load_bundled(name)
    text = "Hello, world! 12345 naïve café 東京 <|endoftext|> \r\n  def f(x): return x's"
    assert ours.encode_ordinary(text) == reference.encode_ordinary(text)
    assert ours.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")


def _env_without_tiktoken_cache() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in tokens_mod._CACHE_ENV}


def test_exact_counts_without_any_configuration(tmp_path: Path) -> None:
    """No TIKTOKEN_CACHE_DIR, no network: the shipped files load, nothing is downloaded or
    cached, and nothing warns."""
    env = _env_without_tiktoken_cache() | {"TMPDIR": str(tmp_path)}
    code = (
        "import logging; logging.basicConfig(level=logging.WARNING)\n"
        "from cachepilot.tokens import TokenCounter\n"
        "for name in ('o200k_base', 'cl100k_base'):\n"
        "    c = TokenCounter(name)\n"
        "    print(name, c.approximate, c.count('hello world'), c.count('tiktoken is great!'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["o200k_base False 2 6", "cl100k_base False 2 6"]
    assert "WARNING" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # tiktoken's download cache was not touched


class _StubEncoding:
    name = "from-cache-dir"

    def encode_ordinary(self, text: str) -> list[int]:
        return [len(text)]


def test_tiktoken_cache_dir_takes_precedence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: _StubEncoding())
    assert load_encoding("o200k_base").name == "from-cache-dir"
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    assert load_encoding("o200k_base").name == "o200k_base"


def test_unloadable_cache_dir_falls_back_to_the_shipped_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def offline(name: str) -> Any:
        raise ConnectionError("no network")

    monkeypatch.setattr(tokens_mod, "_WARNED", set())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with caplog.at_level(logging.WARNING, logger="cachepilot.tokens"):
        encoding = load_encoding("o200k_base")
    assert encoding.name == "o200k_base" and not isinstance(encoding, ApproximateEncoding)
    assert "shipped with cachepilot" in caplog.text


def test_missing_package_data_means_the_approximate_counter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def offline(name: str) -> Any:
        raise ConnectionError("no network")

    spec = bundled_mod.BUNDLED["o200k_base"]
    monkeypatch.setattr(tokens_mod, "_WARNED", set())
    monkeypatch.setattr(bundled_mod, "_LOADED", {})
    monkeypatch.setitem(
        bundled_mod.BUNDLED,
        "o200k_base",
        bundled_mod.BundledEncoding(
            spec.name, "absent.tiktoken", spec.sha256, spec.pat_str, spec.special_tokens
        ),
    )
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with caplog.at_level(logging.WARNING, logger="cachepilot.tokens"):
        encoding = load_encoding("o200k_base")
    assert isinstance(encoding, ApproximateEncoding)
    assert "approximate" in caplog.text


def test_a_key_memo_never_answers_for_other_content() -> None:
    # A view's edited copy keeps the original's key, and a framework id can recur in another
    # thread: the count must follow the content, in either order.
    counter = TokenCounter()
    long = Message(role="tool", content="lorem ipsum dolor " * 500, tool_call_id="c1", name="t")
    stub = Message(role="tool", content="[output elided]", tool_call_id="c1", name="t")
    expected_long = counter.count_message(dataclasses.replace(long))
    expected_stub = counter.count_message(dataclasses.replace(stub))
    assert expected_long > expected_stub
    assert counter.count_message(stub, key="id:m1") == expected_stub
    assert counter.count_message(long, key="id:m1") == expected_long
    assert counter.count_message(dataclasses.replace(stub), key="id:m1") == expected_stub
    # The same content under the same key is still answered from the memo.
    rebuilt = Message(role="tool", content=stub.text, tool_call_id="c1", name="t")
    assert counter.count_message(rebuilt, key="id:m1") == expected_stub

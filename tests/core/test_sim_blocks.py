"""The breakpoint simulator checks content-block boundaries inside a message, as Anthropic
does: a user turn that gained a block at its end (a text joined to it) still starts with the
cache entry written at its end before. One token per character makes sizes hand-computable."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.messages import Message, TextPart
from cachepilot.sim import CacheSimulator, Request, render_request
from cachepilot.tokens import TokenCounter

HEADER = 3  # role header tokens of a message (start, role, separator); the end marker is 1


class CharEncoding:
    """One token per character."""

    name = "chars"

    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter(CharEncoding())


def turn(*texts: str) -> Message:
    return Message("user", tuple(TextPart(t) for t in texts))


def marked(*messages: Message, ts: float) -> Request:
    return Request(None, messages, timestamp=ts, cache_breakpoints=(len(messages) - 1,))


def test_a_turn_that_gained_a_block_reads_the_entry_written_at_its_old_end(
    counter: TokenCounter,
) -> None:
    sim = CacheSimulator("anthropic", counter)
    task, summary = "t" * 3_000, "s" * 2_000
    first = sim.submit(marked(turn(task), ts=0))
    assert (first.cached_tokens, first.cache_write_tokens) == (0, HEADER + 3_000 + 1)
    later = sim.submit(marked(turn(task, summary), ts=60))
    # Read through the task block; written: the summary block and the end of the turn.
    assert later.cached_tokens == HEADER + 3_000
    assert later.cache_write_tokens == 2_000 + 1
    # A turn that starts differently finds nothing.
    other = sim.submit(marked(turn("u" * 3_000, summary), ts=120))
    assert other.cached_tokens == 0


def test_the_inner_boundary_counts_against_the_lookback_window(counter: TokenCounter) -> None:
    sim = CacheSimulator("anthropic", counter)
    task = "t" * 3_000
    sim.submit(marked(turn(task), ts=0))
    near = [f"{i:02d}" * 30 for i in range(20)]
    # 20 blocks after the task block: its end is the 20th boundary back, inside the window.
    assert sim.preview(marked(turn(task, *near), ts=60)).cached_tokens == HEADER + 3_000
    # 21 blocks after it: beyond Anthropic's 20-block window.
    far = sim.preview(marked(turn(task, *near, "z" * 60), ts=60))
    assert far.cached_tokens == 0


def test_entries_in_earlier_messages_still_win_when_no_inner_boundary_matches(
    counter: TokenCounter,
) -> None:
    sim = CacheSimulator("anthropic", counter)
    head = Message("user", "h" * 2_000)
    sim.submit(marked(head, turn("a" * 1_500), ts=0))
    usage = sim.submit(marked(head, turn("b" * 1_500, "c" * 10), ts=60))
    assert usage.cached_tokens == 0  # nothing was written at the end of `head` alone
    sim.submit(Request(None, (head,), timestamp=90, cache_breakpoints=(0,)))
    usage = sim.submit(marked(head, turn("d" * 1_500, "c" * 10), ts=120))
    assert usage.cached_tokens == HEADER + 2_000 + 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=40), min_size=0, max_size=6))
def test_a_message_key_is_the_digest_of_its_tokens_and_block_keys_are_prefix_digests(
    texts: list[str],
) -> None:
    counter = TokenCounter(CharEncoding())
    rendered = render_request(Request(None, (turn(*texts),)), counter)
    segment = rendered.segments[-1]

    def key(tokens: object) -> int:
        digest = hashlib.blake2b(tokens.tobytes(), digest_size=8).digest()  # type: ignore[attr-defined]
        return int.from_bytes(digest, "little", signed=True)

    assert segment.key == key(segment.tokens)
    assert len(segment.block_keys) == len(segment.block_ends) == len(texts)
    for end, block_key in zip(segment.block_ends, segment.block_keys, strict=True):
        assert block_key == key(segment.tokens[:end])
    assert list(segment.block_ends) == [
        HEADER + sum(len(t) for t in texts[: i + 1]) for i in range(len(texts))
    ]

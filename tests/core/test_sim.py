"""Provider prompt-cache simulator: hand-computed cases per profile, determinism, properties.

A fake encoding (one token per character) makes sizes hand-computable: a message renders to
its characters plus 4 template tokens (role header 3 + end 1), a system prompt likewise.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.messages import ImagePart, Message, ReasoningPart, Role, TextPart, ToolCall
from cachepilot.pricing import get_price
from cachepilot.sim import (
    DEFAULT_PROFILE,
    LOGICAL_STEP_SECONDS,
    PROFILES,
    CacheSimulator,
    ProviderProfile,
    Request,
    common_prefix,
    get_profile,
    render_request,
)
from cachepilot.tokens import IMAGE_TOKENS, TokenCounter
from cachepilot.usage import Usage

OVERHEAD = 4


class CharEncoding:
    """One token per character."""

    name = "chars"

    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter(CharEncoding())


def msg(n: int, role: Role = "user", char: str = "x") -> Message:
    """A message that renders to exactly `n` tokens."""
    assert n >= OVERHEAD
    if role == "tool":
        return Message("tool", char * (n - OVERHEAD), tool_call_id="c1")
    return Message(role, char * (n - OVERHEAD))


def req(*messages: Message, system: str | None = None, ts: float | None = None) -> Request:
    return Request(system=system, messages=messages, timestamp=ts)


# --- rendering ---------------------------------------------------------------------------


def test_render_sizes_match_token_counter(counter: TokenCounter) -> None:
    messages = [
        Message("user", "hello"),
        Message(
            "assistant",
            (ReasoningPart("think"), TextPart("ok")),
            tool_calls=(ToolCall("c1", "bash", '{"cmd":"ls"}'),),
        ),
        Message("tool", "out", tool_call_id="c1", name="bash"),
        Message("user", (TextPart("see"), ImagePart("data:image/png;base64,AAAA"))),
    ]
    rendered = render_request(Request("sys", messages), counter)
    assert rendered.total_tokens == (3 + 4) + counter.count_messages(messages)
    assert rendered.first_message == 1
    assert rendered.segments[-1].n_tokens == OVERHEAD + 3 + IMAGE_TOKENS
    assert rendered.segments[2].blocks == 3  # reasoning, text, tool_use
    assert rendered.segments[2].has_reasoning
    assert rendered.label(0) == "system"
    assert rendered.label(3) == "message 2"


def test_render_tools_canonical_and_ordered(counter: TokenCounter) -> None:
    a = {"name": "a", "parameters": {"y": 1, "x": 2}}
    a_reordered = {"parameters": {"x": 2, "y": 1}, "name": "a"}
    b = {"name": "b"}
    one = render_request(Request(None, [msg(10)], tools=[a, b]), counter)
    two = render_request(Request(None, [msg(10)], tools=[a_reordered, b]), counter)
    swapped = render_request(Request(None, [msg(10)], tools=[b, a]), counter)
    assert list(one.keys) == list(two.keys)
    assert list(one.keys) != list(swapped.keys)
    assert one.label(1) == "tool 1"


def test_render_is_deterministic_and_memo_safe(counter: TokenCounter) -> None:
    messages = [msg(50), msg(60, "assistant"), msg(70)]
    first = render_request(Request("s", messages), counter)
    # New but equal objects, and a changed middle message, render consistently.
    again = render_request(Request("s", [Message(m.role, m.content) for m in messages]), counter)
    assert list(first.keys) == list(again.keys) and list(first.ends) == list(again.ends)
    changed = render_request(
        Request("s", [messages[0], msg(60, "assistant", "y"), messages[2]]), counter
    )
    assert list(changed.keys)[:2] == list(first.keys)[:2]
    assert changed.keys[2] != first.keys[2]
    assert render_request(Request("s", messages), counter).total_tokens == first.total_tokens


def test_common_prefix_token_level_inside_segment(counter: TokenCounter) -> None:
    a = render_request(req(msg(100), Message("user", "abcdef")), counter)
    b = render_request(req(msg(100), Message("user", "abcxyz")), counter)
    tokens, same = common_prefix(a, b)
    assert same == 1
    assert tokens == 100 + 3 + 3  # first message, header of the second, "abc"


def test_hidden_prefix_rendering(counter: TokenCounter) -> None:
    rendered = render_request(req(msg(10)), counter, hidden_prefix_tokens=500)
    assert rendered.total_tokens == 510
    assert rendered.segments[0].kind == "hidden"
    with pytest.raises(ValueError):
        render_request(req(msg(10)), counter, hidden_prefix_tokens=-1)


# --- profiles ----------------------------------------------------------------------------


def test_profiles_registry() -> None:
    assert DEFAULT_PROFILE == "openai-gpt-5.4-mini"
    assert get_profile(DEFAULT_PROFILE).price == get_price("gpt-5.4-mini")
    for name, profile in PROFILES.items():
        assert profile.name == name
        assert profile.description
        assert profile.context_window > 0
        assert profile.granularity >= 1
        assert profile.kind in {
            "openai",
            "openai-breakpoint",
            "anthropic",
            "deepseek",
            "vllm",
            "gemini",
        }
    assert get_profile("anthropic").price.model == "claude-sonnet-4.5"
    assert (
        get_profile("anthropic-1h").price.write_per_m
        == get_price("claude-sonnet-4.5").write_long_per_m
    )
    assert get_profile("deepseek").price == get_price("deepseek-chat")
    assert get_profile("vllm-block16").price == get_price("vllm-nominal")
    with pytest.raises(ValueError, match=r"known: .*anthropic.*deepseek"):
        get_profile("nope")
    with pytest.raises(ValueError):
        dataclasses.replace(get_profile("deepseek"), granularity=0)


def test_simulator_accepts_name_and_rejects_bad_args(counter: TokenCounter) -> None:
    assert CacheSimulator("deepseek", counter).profile.name == "deepseek"
    with pytest.raises(ValueError):
        CacheSimulator("nope", counter)
    with pytest.raises(ValueError):
        CacheSimulator("deepseek", counter, hidden_prefix_tokens=-5)
    with pytest.raises(ValueError):
        CacheSimulator("deepseek", counter).submit(req(msg(10)), output_tokens=-1)


# --- OpenAI automatic --------------------------------------------------------------------


def test_openai_minimum_1024_and_128_steps(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4-mini", counter)
    assert sim.submit(req(msg(1000))).cached_tokens == 0
    assert sim.submit(req(msg(1000))).cached_tokens == 0  # identical, but under 1024
    sim.reset()
    base = msg(1100)
    assert sim.submit(req(base)) == Usage(1100, 0, 0)
    assert sim.submit(req(base, msg(100))).cached_tokens == 1024  # common prefix 1100
    assert sim.submit(req(base, msg(100), msg(80))).cached_tokens == 1152  # 1200 -> 1152
    usage = sim.submit(req(base, msg(100), msg(80), msg(500)))
    assert usage == Usage(1780, 1280, 0)  # 1280 = 1024 + 2 * 128 <= 1280 common tokens


def test_openai_12000_then_15000(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4", counter)
    first = msg(12_000)
    assert sim.submit(req(first)) == Usage(12_000, 0, 0)
    assert sim.submit(req(first, msg(3_000, "assistant"))) == Usage(15_000, 11_904, 0)


def test_openai_divergence_and_any_earlier_prefix(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4-mini", counter)
    a, b = msg(3000), msg(3000, char="b")
    sim.submit(req(a, b))
    # Rewrite the second message: the common prefix is a + its header (3 tokens).
    usage = sim.submit(req(a, msg(3000, char="c")))
    assert usage.cached_tokens == 2944  # 3003 -> 128-step
    assert sim.last is not None and not sim.last.prefix_extends
    assert sim.last.divergence_segment == 1 and sim.last.divergence == "message 1"
    assert sim.last.common_prefix_tokens == 3003
    # The first branch is still cached: going back to it hits it in full.
    assert sim.submit(req(a, b, msg(200))).cached_tokens == 5888  # 6000 -> 5888


def test_openai_ttl_by_timestamps(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4-mini", counter)
    ttl = sim.profile.ttl_seconds
    assert ttl == 300
    a = msg(2048)
    sim.submit(req(a, ts=1000.0))
    assert sim.submit(req(a, msg(10), ts=1000.0 + ttl)).cached_tokens == 2048  # refreshed
    assert sim.submit(req(a, msg(10), msg(10), ts=1000.0 + 2 * ttl + 1)).cached_tokens == 0
    assert sim.last is not None and sim.last.idle_seconds == ttl + 1


def test_logical_clock(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4-mini", counter)
    times = []
    for _ in range(3):
        sim.submit(req(msg(10)))
        assert sim.last is not None
        times.append(sim.last.timestamp)
    assert times == [0.0, LOGICAL_STEP_SECONDS, 2 * LOGICAL_STEP_SECONDS]
    sim.submit(req(msg(10), ts=500.0))
    sim.submit(req(msg(10)))
    assert sim.time == 500.0 + LOGICAL_STEP_SECONDS


def test_openai_writes_never_billed(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4-mini", counter)
    assert sim.submit(req(msg(5000))).cache_write_tokens == 0


# --- OpenAI breakpoint style -------------------------------------------------------------


def test_breakpoint_12000_then_15000(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.6-breakpoint", counter)
    first = msg(12_000)
    assert sim.submit(req(first)) == Usage(12_000, 0, 12_000)
    assert sim.submit(req(first, msg(3_000, "assistant"))) == Usage(15_000, 12_000, 3_000)


def test_breakpoint_minimum_and_explicit_marks(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.6-breakpoint", counter)
    assert sim.submit(req(msg(1000))) == Usage(1000, 0, 0)  # under 1024: nothing cached
    sim.reset()
    a, b = msg(2000), msg(500)
    usage = sim.submit(Request(None, [a, b], cache_breakpoints=[0]))
    assert usage == Usage(2500, 0, 2000)  # written up to the mark; the rest plain input
    # A rewrite after the mark still reads it (no lookback limit in this style).
    assert sim.submit(req(a, msg(700, char="q"))) == Usage(2700, 2000, 700)


# --- Anthropic ---------------------------------------------------------------------------


def test_anthropic_default_breakpoints(counter: TokenCounter) -> None:
    sim = CacheSimulator("anthropic", counter)
    system = "s" * 1996  # renders to 2000 tokens
    a = msg(3000)
    assert sim.submit(req(a, system=system)) == Usage(5000, 0, 5000)
    assert sim.submit(req(a, msg(1000, "assistant"), system=system)) == Usage(6000, 5000, 1000)
    # A rewritten history falls back to the system breakpoint.
    assert sim.submit(req(msg(3000, char="z"), system=system)) == Usage(5000, 2000, 3000)


def test_anthropic_lookback_20_blocks(counter: TokenCounter) -> None:
    base = msg(2000)
    for added, expected in ((20, 2000), (21, 0)):
        sim = CacheSimulator("anthropic", counter)
        sim.submit(req(base))
        extra = [msg(10, "assistant" if i % 2 else "user") for i in range(added)]
        usage = sim.submit(req(base, *extra))
        assert usage.cached_tokens == expected, added
        assert usage.cache_write_tokens == 2000 + 10 * added - expected


def test_anthropic_lookback_counts_blocks_not_messages(counter: TokenCounter) -> None:
    sim = CacheSimulator("anthropic", counter)
    base = msg(2000)
    sim.submit(req(base))
    calls = tuple(ToolCall(f"c{i}", "t", "{}") for i in range(10))
    many = Message("assistant", "x", tool_calls=calls)  # 11 blocks
    results = [Message("tool", "r", tool_call_id=f"c{i}") for i in range(10)]  # 10 blocks
    assert sim.submit(req(base, many, *results)).cached_tokens == 0  # 21 blocks back


def test_anthropic_ttl_5m_and_1h(counter: TokenCounter) -> None:
    a = msg(4000)
    for name, ttl in (("anthropic", 300.0), ("anthropic-1h", 3600.0)):
        sim = CacheSimulator(name, counter)
        assert sim.profile.ttl_seconds == ttl
        sim.submit(req(a, ts=0.0))
        assert sim.submit(req(a, msg(10), ts=ttl)).cached_tokens == 4000
        assert sim.submit(req(a, msg(10), msg(10), ts=2 * ttl + 0.5)).cached_tokens == 0


def test_anthropic_minimum_and_explicit_breakpoints(counter: TokenCounter) -> None:
    sim = CacheSimulator("anthropic", counter)
    assert sim.submit(req(msg(1000))) == Usage(1000, 0, 0)
    sim.reset()
    a, b = msg(1500), msg(300)
    assert sim.submit(Request(None, [a, b], cache_breakpoints=[0])) == Usage(1800, 0, 1500)
    assert sim.submit(Request(None, [a, b], cache_breakpoints=[0])) == Usage(1800, 1500, 0)
    with pytest.raises(ValueError, match="at most 4"):
        sim.submit(Request(None, [msg(10)] * 5, cache_breakpoints=[0, 1, 2, 3, 4]))
    with pytest.raises(ValueError, match="out of range"):
        sim.submit(Request(None, [a], cache_breakpoints=[3]))


# --- DeepSeek ----------------------------------------------------------------------------


def test_deepseek_64_token_units(counter: TokenCounter) -> None:
    sim = CacheSimulator("deepseek", counter)
    a = msg(1000)
    assert sim.submit(req(a)) == Usage(1000, 0, 0)
    assert sim.submit(req(a, msg(100, "assistant"), msg(300))).cached_tokens == 960
    assert sim.submit(req(msg(50))).cached_tokens == 0


def test_deepseek_caches_the_reply(counter: TokenCounter) -> None:
    sim = CacheSimulator("deepseek", counter)
    a, reply = msg(1000), msg(200, "assistant")
    sim.submit(req(a), output_tokens=200)
    assert sim.submit(req(a, reply, msg(300)), output_tokens=10).cached_tokens == 1152
    # A reply re-sent with its reasoning does not match the generated stream.
    sim.reset()
    thought = Message("assistant", (ReasoningPart("r" * 50), TextPart("y" * 146)))
    sim.submit(req(a), output_tokens=200)
    assert sim.submit(req(a, thought, msg(300))).cached_tokens == 960


def test_deepseek_hits_whole_units_only(counter: TokenCounter) -> None:
    sim = CacheSimulator("deepseek", counter)
    a = msg(1000)
    sim.submit(req(a, msg(500, char="b")))
    # Shares 1003 tokens with the first request, but no stored unit ends inside them.
    assert sim.submit(req(a, msg(500, char="c"))).cached_tokens == 0
    # The common prefix of the two became a unit: the next request hits it (1003 -> 960).
    assert sim.submit(req(a, msg(500, char="d"))).cached_tokens == 960
    # The first message alone ends before every stored unit (1003, 1500): a miss.
    assert sim.submit(req(a)).cached_tokens == 0


# --- vLLM --------------------------------------------------------------------------------


def test_vllm_block16(counter: TokenCounter) -> None:
    sim = CacheSimulator("vllm-block16", counter)
    a = msg(1000)
    sim.submit(req(a))
    assert sim.submit(req(a, msg(20))).cached_tokens == 992
    sim.reset()
    b = msg(1024)
    sim.submit(req(b))
    assert sim.submit(req(b)).cached_tokens == 1008  # the last token is always recomputed
    assert sim.profile.ttl_seconds is None
    sim.submit(req(b, ts=10**9))
    assert sim.submit(req(b, msg(16), ts=10**9 + 1)).cached_tokens == 1024


# --- hidden prefix, records, determinism -------------------------------------------------


def test_hidden_prefix_caches(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4-mini", counter, hidden_prefix_tokens=2048)
    assert sim.submit(req(msg(500))) == Usage(2548, 0, 0)
    # A different conversation still shares the hidden prefix and the role header token.
    assert sim.submit(req(msg(500, "assistant"))).cached_tokens == 2048
    anthropic = CacheSimulator("anthropic", counter, hidden_prefix_tokens=2048)
    anthropic.submit(req(msg(500)))
    assert anthropic.submit(req(msg(700, char="q"))) == Usage(2748, 2048, 700)


def test_last_record_and_reset(counter: TokenCounter) -> None:
    sim = CacheSimulator("openai-gpt-5.4-mini", counter)
    assert sim.last is None
    a = msg(1500)
    sim.submit(req(a))
    assert sim.last is not None and sim.last.prefix_extends and sim.last.common_prefix_tokens == 0
    sim.submit(req(a, msg(10)))
    assert sim.last.prefix_extends and sim.last.divergence_segment is None
    assert sim.last.common_prefix_tokens == 1500 and sim.last.total_tokens == 1510
    sim.submit(Request("new system", [a]))
    assert not sim.last.prefix_extends and sim.last.divergence == "system"
    assert sim.totals.input_tokens == 1500 + 1510 + sim.last.total_tokens
    sim.reset()
    assert sim.last is None and sim.time is None and sim.totals == Usage()
    assert sim.submit(req(a, msg(10))).cached_tokens == 0


def test_preview_does_not_change_state(counter: TokenCounter) -> None:
    for name in PROFILES:
        sim = CacheSimulator(name, counter)
        a = msg(3000)
        sim.submit(req(a), output_tokens=50)
        nxt = req(a, msg(50, "assistant"), msg(400))
        seen = sim.preview(nxt)
        assert sim.preview(nxt) == seen
        assert sim.submit(nxt, output_tokens=0) == seen, name


def test_determinism_across_simulators(counter: TokenCounter) -> None:
    history = [msg(700 + 37 * i, "user" if i % 2 == 0 else "assistant") for i in range(12)]
    for name in PROFILES:
        runs = []
        for _ in range(2):
            sim = CacheSimulator(name, TokenCounter(CharEncoding()), hidden_prefix_tokens=300)
            runs.append([sim.submit(req(*history[:k]), output_tokens=40) for k in range(1, 13)])
        assert runs[0] == runs[1], name


# --- property ----------------------------------------------------------------------------


def _cacheable(profile: ProviderProfile, total: int) -> int:
    """What the previous request leaves cacheable for a request that extends it."""
    return profile.billable_hit(total)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(PROFILES)),
    steps=st.lists(
        st.tuples(
            st.lists(st.integers(min_value=4, max_value=900), min_size=1, max_size=5),
            st.floats(min_value=0.0, max_value=290.0),
        ),
        min_size=1,
        max_size=8,
    ),
    hidden=st.integers(min_value=0, max_value=3000),
)
def test_extending_requests_never_lose_cacheable_prefix(
    name: str, steps: list[tuple[list[int], float]], hidden: int
) -> None:
    counter = TokenCounter(CharEncoding())
    profile = get_profile(name)
    sim = CacheSimulator(profile, counter, hidden_prefix_tokens=hidden)
    history: list[Message] = [msg(1200)]
    now = 0.0
    previous = sim.submit(req(*history, ts=now))
    for sizes, gap in steps:
        history.extend(msg(n, "assistant" if i % 2 else "user") for i, n in enumerate(sizes))
        now += gap  # within every profile's TTL (>= 300 s)
        usage = sim.submit(req(*history, ts=now))
        assert usage.cached_tokens >= _cacheable(profile, previous.input_tokens)
        assert usage.cached_tokens + usage.cache_write_tokens <= usage.input_tokens
        previous = usage

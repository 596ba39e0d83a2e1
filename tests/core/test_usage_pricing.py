from __future__ import annotations

import pytest

from cachepilot.pricing import PRICES, Price, cost, get_price, register_price
from cachepilot.usage import Usage


def test_usage_invariants() -> None:
    with pytest.raises(ValueError, match="cannot exceed"):
        Usage(input_tokens=10, cached_tokens=8, cache_write_tokens=5)
    with pytest.raises(ValueError, match=">= 0"):
        Usage(input_tokens=-1)
    u = Usage(input_tokens=100, cached_tokens=60, cache_write_tokens=10, output_tokens=5)
    assert u.uncached_tokens == 30
    assert u.hit_rate == 0.6
    assert (u + u).input_tokens == 200
    assert Usage.from_dict(u.to_dict()) == u


def test_openai_chat_and_deepseek_shapes() -> None:
    chat = {
        "prompt_tokens": 2000,
        "completion_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 1536},
        "completion_tokens_details": {"reasoning_tokens": 20},
    }
    assert Usage.from_openai_chat(chat) == Usage(2000, 1536, 0, 50, 20)
    deepseek = {
        "prompt_tokens": 1300,
        "completion_tokens": 10,
        "prompt_cache_hit_tokens": 1280,
        "prompt_cache_miss_tokens": 20,
    }
    assert Usage.from_openai_chat(deepseek) == Usage(1300, 1280, 0, 10)


def test_responses_anthropic_langchain_agents_shapes() -> None:
    responses = {
        "input_tokens": 5000,
        "output_tokens": 70,
        "input_tokens_details": {"cached_tokens": 4096},
        "output_tokens_details": {"reasoning_tokens": 30},
    }
    assert Usage.from_openai_responses(responses) == Usage(5000, 4096, 0, 70, 30)
    anthropic = {
        "input_tokens": 3,
        "cache_read_input_tokens": 26000,
        "cache_creation_input_tokens": 500,
        "output_tokens": 90,
    }
    assert Usage.from_anthropic(anthropic) == Usage(26503, 26000, 500, 90)
    lc = {
        "input_tokens": 1200,
        "output_tokens": 7,
        "input_token_details": {"cache_read": 1024, "cache_creation": 100},
        "output_token_details": {"reasoning": 2},
    }
    assert Usage.from_langchain(lc) == Usage(1200, 1024, 100, 7, 2)

    class Details:
        cached_tokens = 128

    class SdkUsage:
        input_tokens = 1500
        output_tokens = 12
        input_tokens_details = Details()
        output_tokens_details = None

    assert Usage.from_agents_sdk(SdkUsage()) == Usage(1500, 128, 0, 12)


def test_missing_and_garbage_fields_count_as_zero() -> None:
    assert Usage.from_openai_chat({}) == Usage()
    assert Usage.from_anthropic({"input_tokens": "x", "output_tokens": None}) == Usage()


def test_default_price_row_matches_the_contract() -> None:
    row = get_price("gpt-5.4-mini")
    assert (row.hit_per_m, row.miss_per_m, row.output_per_m) == (0.075, 0.75, 4.50)
    assert all(p.source and p.source_date for p in PRICES.values())


def test_cost_splits_reads_writes_misses_and_output() -> None:
    price = Price(
        "m", miss_per_m=1.0, hit_per_m=0.1, output_per_m=4.0, write_per_m=1.25, write_long_per_m=2.0
    )
    usage = Usage(
        input_tokens=1_000_000,
        cached_tokens=500_000,
        cache_write_tokens=200_000,
        output_tokens=100_000,
    )
    c = cost(usage, price)
    assert c.input_usd == pytest.approx(0.05 + 0.25 + 0.3)
    assert c.output_usd == pytest.approx(0.4)
    assert c.total_usd == pytest.approx(1.0)
    assert cost(usage, price, long_ttl_writes=True).input_usd == pytest.approx(0.05 + 0.4 + 0.3)
    no_write = Price("n", miss_per_m=1.0, hit_per_m=0.1, output_per_m=0.0)
    assert cost(usage, no_write).input_usd == pytest.approx(0.05 + 0.2 + 0.3)


def test_bad_rows_and_unknown_models_fail_clearly() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        Price("x", miss_per_m=-1, hit_per_m=0, output_per_m=0)
    with pytest.raises(ValueError, match="known:"):
        get_price("no-such-model")
    register_price(
        Price(
            "custom-test",
            miss_per_m=1,
            hit_per_m=0.1,
            output_per_m=2,
            source="test",
            source_date="2026-01-01",
        )
    )
    assert get_price("custom-test").output_per_m == 2
    del PRICES["custom-test"]

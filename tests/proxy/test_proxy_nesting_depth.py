"""`nesting_depth` counts what a recursive walk counts, and gives up past its limit."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.proxy.limits import nesting_depth

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=40,
)


def _containers(value: Any) -> int:
    """Containers nested in `value`, itself included (a scalar: 0)."""
    if isinstance(value, dict):
        return 1 + max((_containers(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_containers(v) for v in value), default=0)
    return 0


def _depth(value: Any) -> int:
    return max(1, _containers(value))


@settings(max_examples=200, deadline=None)
@given(_JSON, st.integers(min_value=1, max_value=12))
def test_depth_matches_a_recursive_walk_up_to_the_limit(value: Any, limit: int) -> None:
    parsed = json.loads(json.dumps(value))
    expected = _depth(parsed)
    assert nesting_depth(parsed, limit) == (expected if expected <= limit else limit + 1)


def test_ten_thousand_levels_are_refused_without_recursion() -> None:
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]
    assert nesting_depth(deep, 64) == 65
    assert nesting_depth({"a": [1, {"b": "x"}]}, 64) == 3
    assert nesting_depth("scalar", 64) == 1

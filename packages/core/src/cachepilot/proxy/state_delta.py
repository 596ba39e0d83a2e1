"""Compact reverse deltas between two JSON documents of one thread.

A request's preparation is stored together with what is needed to prepare it again over the
state it was prepared over (`cachepilot.proxy.memory`). Storing that earlier document whole
doubled every such save; a thread's state mostly grows between two requests (calls appended,
a few counters changed), so what gets from the new document back to the earlier one is small.

`reverse_delta(before, after)` says how to rebuild `before` from `after`; `rebuild(after,
delta)` does it. Both are linear in the documents and neither mutates its input. A delta is
JSON itself: `{"=": value}` replaces a value; `{"d": {key: delta}, "x": [keys], "o": [keys]}`
changes a mapping (keys to change or put back, keys to drop, and the key order when it differs
from the one the changes give); `{"n": length, "i": {index: delta}}` changes a list (its first
`length` items, items at `index` changed or put back); `{"s": length, "h": items}` is a list
that dropped its first items and kept the rest in order (a bounded list that moved on:
`before` is `items` followed by the first `length - len(items)` items of `after`).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["rebuild", "reverse_delta"]

_MAX_SHIFT = 8
"""Items a bounded list may have dropped from its head for the delta to say so in one step."""


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same type (1, 1.0 and True are equal in Python, not in JSON text)."""
    return type(a) is type(b) and a == b


def reverse_delta(before: Any, after: Any) -> dict[str, Any] | None:
    """How to rebuild `before` from `after` (None: they are the same).

    Parts equal by Python's == but not by JSON text (a 0 and a 0.0 inside a list, a mapping's
    key order, -0.0) are taken as unchanged: telling them apart would walk every unchanged
    part again at every save (0.06 -> 1 ms for a 46 KB state), for documents that rarely
    differ so. A caller that needs the bytes checks the rebuild (the proxy's mark does, and
    keeps the document whole when it differs)."""
    if _same(before, after):
        return None
    if isinstance(before, dict) and isinstance(after, dict):
        changes: dict[str, Any] = {}
        for key, value in before.items():
            if key in after:
                inner = reverse_delta(value, after[key])
                if inner is not None:
                    changes[key] = inner
            else:
                changes[key] = {"=": value}
        dropped = [key for key in after if key not in before]
        out: dict[str, Any] = {"d": changes}
        if dropped:
            out["x"] = dropped
        order = [key for key in after if key in before]
        order += [key for key in before if key not in after]
        if order != list(before):
            out["o"] = list(before)
        return out
    if isinstance(before, list) and isinstance(after, list):
        shifted = _shifted(before, after)
        if shifted is not None:
            return shifted
        items: dict[str, Any] = {}
        for index, value in enumerate(before):
            if index < len(after):
                inner = reverse_delta(value, after[index])
                if inner is not None:
                    items[str(index)] = inner
            else:
                items[str(index)] = {"=": value}
        return {"n": len(before), "i": items}
    return {"=": before}


def _shifted(before: list[Any], after: list[Any]) -> dict[str, Any] | None:
    """The delta of a list that dropped its first few items (None: it did not). Compared by
    value first, then as JSON text (1, 1.0 and True are equal values, not equal text)."""
    n = len(before)
    if not n or not after or _same(before[0], after[0]):
        return None
    for k in range(1, min(_MAX_SHIFT, n) + 1):
        if len(after) < n - k or before[k:] != after[: n - k]:
            continue
        try:
            exact = json.dumps(before[k:]) == json.dumps(after[: n - k])
        except (TypeError, ValueError):
            return None
        if exact:
            return {"s": n, "h": before[:k]}
    return None


def rebuild(after: Any, delta: Any) -> Any:
    """`before` from `after` and `reverse_delta(before, after)` (`ValueError` for a delta this
    module did not make). Parts the delta does not change are shared with `after`."""
    if delta is None:
        return after
    if not isinstance(delta, dict):
        raise ValueError("not a state delta")
    if "=" in delta:
        return delta["="]
    if "d" in delta:
        if not isinstance(after, dict):
            raise ValueError("a mapping delta over a value that is not a mapping")
        changes, dropped = delta["d"], set(delta.get("x", ()))
        out = {key: value for key, value in after.items() if key not in dropped}
        for key, inner in changes.items():
            out[key] = rebuild(out.get(key), inner)
        order = delta.get("o")
        if order is not None:
            out = {key: out[key] for key in order}
        return out
    if "n" in delta:
        if not isinstance(after, list):
            raise ValueError("a list delta over a value that is not a list")
        length = int(delta["n"])
        items = list(after[:length])
        items.extend([None] * (length - len(items)))
        for index, inner in delta.get("i", {}).items():
            at = int(index)
            items[at] = rebuild(items[at], inner)
        return items
    if "s" in delta:
        if not isinstance(after, list):
            raise ValueError("a list delta over a value that is not a list")
        head = delta.get("h")
        length = int(delta["s"])
        if not isinstance(head, list) or not 0 < len(head) <= length:
            raise ValueError("not a state delta")
        if len(after) < length - len(head):
            raise ValueError("a shifted list delta over a list too short")
        return [*head, *after[: length - len(head)]]
    raise ValueError("not a state delta")

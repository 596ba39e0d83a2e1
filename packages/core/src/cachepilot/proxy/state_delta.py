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
`length` items, items at `index` changed or put back).
"""

from __future__ import annotations

from typing import Any

__all__ = ["rebuild", "reverse_delta"]


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same type (1, 1.0 and True are equal in Python, not in JSON text)."""
    return type(a) is type(b) and a == b


def reverse_delta(before: Any, after: Any) -> dict[str, Any] | None:
    """How to rebuild `before` from `after` (None: they are the same)."""
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
    raise ValueError("not a state delta")

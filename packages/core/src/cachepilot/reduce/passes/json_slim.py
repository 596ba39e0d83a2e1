"""JSON slimming: drop null and empty members, compact separators, keep key order."""

from __future__ import annotations

import json
from typing import Any

from cachepilot.reduce.passes.base import PassContext, ReductionPass

__all__ = ["JsonPass", "slim_json"]


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and not value)


def slim_json(value: Any) -> Any:
    """A copy of `value` without null/empty object members (recursively).

    Object members whose value is null, `""`, `[]` or `{}` (after slimming) are dropped.
    Array elements are slimmed but never dropped: positions carry meaning.
    """
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            slim = slim_json(item)
            if not _is_empty(slim):
                out[key] = slim
        return out
    if isinstance(value, list):
        return [slim_json(item) for item in value]
    return value


class JsonPass(ReductionPass):
    """Re-serialise a JSON object or array compactly without null or empty members.

    Lossy: a member that was null differs from an absent one, and number formatting may
    change (`1.50` → `1.5`).
    """

    name = "json"
    lossless = False

    def apply(self, text: str, ctx: PassContext) -> str | None:
        stripped = text.lstrip()
        if not stripped.startswith(("{", "[")):
            return None
        try:
            value = json.loads(text)
            out = json.dumps(slim_json(value), ensure_ascii=False, separators=(",", ":"))
        except (ValueError, RecursionError):
            return None
        return out if len(out) < len(text) else None

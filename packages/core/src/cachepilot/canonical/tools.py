"""Canonical tool schemas: sorted keys, order by name, fingerprints of a tool set."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

__all__ = [
    "canonical_json",
    "canonicalize_tool",
    "order_tools",
    "tool_fingerprint",
    "tool_name",
]

_ToolT = TypeVar("_ToolT", bound=Mapping[str, Any])


def _canonical(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _canonical(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted((_canonical(v) for v in obj), key=canonical_json)
    return obj


def canonical_json(obj: Any) -> str:
    """Compact JSON with recursively sorted keys; list order is kept (e.g. ``required``).

    Same bytes as `cachepilot.sim.canonical_tool` for plain JSON data. Objects JSON cannot
    encode are written as ``str(obj)``.
    """
    return json.dumps(
        _canonical(obj), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )


def canonicalize_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a tool schema whose dicts have their keys in sorted order."""
    out = _canonical(tool)
    return out if isinstance(out, dict) else {}


def tool_name(tool: Mapping[str, Any]) -> str:
    """The tool's name in OpenAI (``function.name``), flat or Anthropic (``name``) shape.

    Built-in tools without a name (``{"type": "web_search"}``) are named by their type.
    """
    function = tool.get("function")
    if isinstance(function, Mapping) and "name" in function:
        return str(function["name"])
    if "name" in tool:
        return str(tool["name"])
    return str(tool.get("type", ""))


def order_tools(tools: Iterable[_ToolT]) -> list[_ToolT]:
    """Tools sorted by name, ties broken by canonical JSON (independent of the input order).

    The same objects come back (no copies); `canonicalize_tool` sorts their keys.
    """
    return sorted(tools, key=lambda t: (tool_name(t), canonical_json(t)))


def tool_fingerprint(tools: Iterable[Mapping[str, Any]], *, ordered: bool = True) -> str:
    """A 16-hex digest of a tool list's canonical JSON.

    Args:
        tools: tool schemas.
        ordered: True: the order matters (as it does for the cached prefix); False: the
            fingerprint of the set (as `order_tools` would order it).
    """
    items = list(tools) if ordered else order_tools(tools)
    blob = canonical_json(items).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Per-thread state

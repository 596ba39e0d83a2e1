"""Root causes of host tests that pass plain and fail with cachepilot injected.

`classify` matches a failed test (its node id, error line and report text) against `RULES`,
first match wins; an unknown failure is `unclassified`.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

__all__ = ["RULES", "Rule", "classify", "kind", "title"]


class Rule(NamedTuple):
    """One root cause: how to recognise it, what it is, and whether it is a real regression."""

    key: str
    framework: str
    title: str
    kind: str  # "regression" (the plugin changes behaviour) or "expected" (by design)
    error: str = ""  # regex on the error line
    text: str = ""  # regex on the report text
    nodeid: str = ""  # regex on the node id


RULES: tuple[Rule, ...] = ()

_UNCLASSIFIED = Rule("unclassified", "*", "not classified yet", "regression")
_BY_KEY = {rule.key: rule for rule in RULES}


def classify(framework: str, nodeid: str, result: dict[str, Any]) -> str:
    """The key of the first rule matching this failed test."""
    error = str(result.get("error", ""))
    text = str(result.get("text", ""))
    for rule in RULES:
        if rule.framework not in (framework, "*"):
            continue
        if rule.nodeid and not re.search(rule.nodeid, nodeid):
            continue
        if rule.error and not re.search(rule.error, error):
            continue
        if rule.text and not re.search(rule.text, text, re.S):
            continue
        return rule.key
    return _UNCLASSIFIED.key


def title(key: str) -> str:
    """One line saying what the root cause is."""
    return _BY_KEY.get(key, _UNCLASSIFIED).title


def kind(key: str) -> str:
    """`regression` or `expected`."""
    return _BY_KEY.get(key, _UNCLASSIFIED).kind

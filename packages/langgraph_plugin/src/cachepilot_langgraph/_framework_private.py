"""Every use of a LangGraph / LangChain name that is not public API, in one place.

The plugin otherwise uses the frameworks' public surface only. Each touch here is looked up
once at import and has a fallback; `missing()` lists the names the installed releases lack
(logged once, at import), and `tests/langgraph/test_framework_private.py` fails on any of
them, so a release that moves one is caught by the newest-releases job (`.ci/highest.sh`).

- `langgraph._internal._constants.CONFIG_KEY_RUNTIME`: the config key under which LangGraph
  hands every piece of one graph invocation its `Runtime` (whose `control` identifies the
  run; `langgraph.runtime.get_runtime` reads the same key, but only from the context's config,
  and a reducer or a chat model is handed a config, not a context). Fallback: a run without a
  `thread_id` gets a fresh scope at each step (isolation holds; refs of earlier steps of that
  run are not found), the same as on a LangGraph without run control.
- `BaseChatModel._llm_type` and `_identifying_params` of the wrapped chat model: the
  subclassing interface LangChain documents for custom chat models (protected, not public);
  the wrapper reports them for the model it wraps. Fallback: the model's class name and no
  parameters.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["identifying_params", "llm_type", "missing", "runtime_of"]

logger = logging.getLogger(__name__)

_MISSING: list[str] = []


def _lookup(module: str, name: str) -> Any:
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        _MISSING.append(f"{module}.{name}")
        return None
    return found


_RUNTIME_KEY: str | None = _lookup("langgraph._internal._constants", "CONFIG_KEY_RUNTIME")
if _RUNTIME_KEY is not None and not isinstance(_RUNTIME_KEY, str):  # pragma: no cover
    _MISSING.append("langgraph._internal._constants.CONFIG_KEY_RUNTIME (not a string)")
    _RUNTIME_KEY = None

if _MISSING:
    logger.warning(
        "this LangGraph release lacks %s; cachepilot falls back there (docs/compatibility.md)",
        ", ".join(_MISSING),
    )


def missing() -> list[str]:
    """The private framework names the installed releases lack (each has a fallback)."""
    return list(_MISSING)


def runtime_of(config: Mapping[str, Any] | None) -> object | None:
    """The LangGraph `Runtime` a config carries (None outside a graph invocation, or when the
    key moved)."""
    if not config or _RUNTIME_KEY is None:
        return None
    configurable = config.get("configurable")
    if not isinstance(configurable, Mapping):
        return None
    runtime: object | None = configurable.get(_RUNTIME_KEY)
    return runtime


def llm_type(model: object) -> str:
    """The `_llm_type` a LangChain chat model reports (its class name when it has none)."""
    try:
        value = getattr(model, "_llm_type", None)
    except Exception:  # an abstract property that raises
        value = None
    return value if isinstance(value, str) else type(model).__name__


def identifying_params(model: object) -> dict[str, Any]:
    """The `_identifying_params` a LangChain chat model reports (empty when it has none)."""
    try:
        value = getattr(model, "_identifying_params", None)
    except Exception:
        value = None
    return dict(value) if isinstance(value, Mapping) else {}

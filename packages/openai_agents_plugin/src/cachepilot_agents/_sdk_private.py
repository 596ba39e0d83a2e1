"""Every use of an Agents SDK name that is not public API, in one place.

The plugin otherwise uses the SDK's public surface only. Where the SDK has no public way to do
what a guest must (know which run is executing, hand a summed usage back losslessly, see
whether a model would get the SDK's default `prompt_cache_key`...), the touch is here, looked
up once at import, each with a fallback that degrades to the plain SDK's behaviour when a
release moves the name. `missing()` lists the names this SDK lacks (logged once, at import);
`tests/agents/test_sdk_private.py` fails on any of them, so a release that moves one is caught
by the newest-releases job (`.ci/highest.sh`) before users meet the fallback.

The names, what the plugin needs each for, and the fallback (docs/compatibility.md has the
same list):

- `agents.run_internal.agent_tool_configuration._current_run`: the run executing (scopes of
  runs without a thread, per-run providers). Fallback: one scope and one provider per run
  config, released when the SDK drops it.
- `agents.usage._response_usage_to_usage`: a streamed response's usage with the SDK's
  per-request details. Fallback: the public usage fields (one request).
- `agents.usage._attach_normalized_usage`: the summed usage of recall rounds handed back
  losslessly. Fallback: the public fields only (the SDK counts one request).
- `Model._supports_default_prompt_cache_key`: whether the SDK sends its default
  `prompt_cache_key` to a model. Fallback: False, the plugin adds no key of its own accord.
- `Model._cleanup_on_run_end`: the run's end, to release its scope and close its provider.
  Fallback: released when the SDK drops the run object.
- `Handoff._agent_ref`: `CachePilotAgents.wrap` reaching a handoff's target agent. Fallback:
  that agent is not wrapped, its model reads the plain input (logged).
- `RedisSession._redis`, `_key_prefix`, `_ttl`: the pilot state beside a Redis session, in
  the same Redis. Fallback: the plugin's fallback state store.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from typing import Any

from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
from agents.handoffs import Handoff
from agents.models.interface import Model
from agents.usage import Usage

__all__ = [
    "RUN_END_HOOK",
    "attach_usage",
    "current_run",
    "handoff_target",
    "missing",
    "redis_session_parts",
    "response_usage",
    "sends_default_cache_key",
]

logger = logging.getLogger(__name__)

RUN_END_HOOK = "_cleanup_on_run_end"
"""The `Model` method the SDK's run loop awaits when a run ends (the wrapper overrides it)."""

_DEFAULT_KEY_HOOK = "_supports_default_prompt_cache_key"
_MISSING: list[str] = []


def _lookup(module: str, name: str) -> Any:
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        _MISSING.append(f"{module}.{name}")
        return None
    return found


_RUN_VAR = _lookup("agents.run_internal.agent_tool_configuration", "_current_run")
_RESPONSE_USAGE = _lookup("agents.usage", "_response_usage_to_usage")
_ATTACH_USAGE = _lookup("agents.usage", "_attach_normalized_usage")
if not callable(getattr(Model, RUN_END_HOOK, None)):
    _MISSING.append(f"agents.models.interface.Model.{RUN_END_HOOK}")
for _model in (OpenAIResponsesModel, OpenAIChatCompletionsModel):
    if not callable(getattr(_model, _DEFAULT_KEY_HOOK, None)):
        _MISSING.append(f"agents.{_model.__name__}.{_DEFAULT_KEY_HOOK}")
if "_agent_ref" not in {f.name for f in dataclasses.fields(Handoff)}:
    _MISSING.append("agents.handoffs.Handoff._agent_ref")

if _MISSING:
    logger.warning(
        "this openai-agents release lacks %s; cachepilot falls back to the plain SDK's "
        "behaviour there (docs/compatibility.md)",
        ", ".join(_MISSING),
    )


def missing() -> list[str]:
    """The private SDK names this release lacks (the plugin uses its fallback for each)."""
    return list(_MISSING)


def current_run() -> object | None:
    """The SDK's object for the run executing in this task, or None (outside a run, or an SDK
    without it)."""
    if _RUN_VAR is None:
        return None
    try:
        run: object | None = _RUN_VAR.get()
    except Exception:  # a context variable of another shape: as if unknown
        return None
    if run is None or getattr(run, "closed", False):
        return None
    return run


def response_usage(payload: Any) -> Usage:
    """The SDK `Usage` of one Responses-style usage payload (with the SDK's per-request details
    when it attached them)."""
    if _RESPONSE_USAGE is not None:
        converted: Usage = _RESPONSE_USAGE(payload)
        return converted
    return Usage(
        requests=1,
        input_tokens=payload.input_tokens or 0,
        output_tokens=payload.output_tokens or 0,
        total_tokens=payload.total_tokens or 0,
        input_tokens_details=payload.input_tokens_details,
        output_tokens_details=payload.output_tokens_details,
    )


def attach_usage(target: Any, usage: Usage) -> None:
    """Let the SDK read `usage` losslessly from `target` (a `ResponseUsage`); a no-op without."""
    if _ATTACH_USAGE is not None:
        _ATTACH_USAGE(target, usage)


def sends_default_cache_key(model: object) -> bool:
    """Whether the SDK sends its default `prompt_cache_key` to `model` (official OpenAI
    endpoints); False when the model does not say (the SDK's own reading)."""
    supports = getattr(model, _DEFAULT_KEY_HOOK, None)
    try:
        return bool(supports()) if callable(supports) else False
    except Exception:
        logger.debug("the model's default prompt_cache_key check failed", exc_info=True)
        return False


def handoff_target(handoff: object) -> Any:
    """The agent a `Handoff` hands off to, when the SDK keeps it (else None)."""
    ref = getattr(handoff, "_agent_ref", None)
    return ref() if callable(ref) else None


def redis_session_parts(session: object) -> tuple[Any, str, int | None] | None:
    """(client, key prefix, ttl) of an Agents SDK `RedisSession`, None when not readable."""
    client = getattr(session, "_redis", None)
    if client is None:
        return None
    ttl = getattr(session, "_ttl", None)
    return (
        client,
        str(getattr(session, "_key_prefix", "agents:session")),
        ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None,
    )

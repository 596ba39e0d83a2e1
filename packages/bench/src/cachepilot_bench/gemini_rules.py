"""Gemini's request rules, checked on raw `generateContent` bodies (`ProviderRules` uses them).

A real Gemini endpoint answers 400 `INVALID_ARGUMENT` to a request that:

- names a `cachedContent` and also sends `systemInstruction`, `tools` or `toolConfig`;
- resends a `functionCall` part this provider issued without the `thoughtSignature` it came
  with, or with another one;
- has a model turn with calls that is not followed by a user turn holding one
  `functionResponse` per call, in call order (names; ids where the call has one);
- uses a role other than `user` or `model`, or does not end with a user turn.

The checks read the body once (linear in its size) and never modify it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from cachepilot.wire import WireError

__all__ = ["GeminiRules"]


def _call_key(call: Mapping[str, Any]) -> str:
    return json.dumps([call.get("name"), call.get("args")], sort_keys=True, default=str)


def _parts(turn: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = turn.get("parts")
    return [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []


class GeminiRules:
    """Gemini's rules, with the signatures this provider issued (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._signatures: dict[str, set[str]] = {}  # per call (a call made twice has two)

    def issued(self, parts: Sequence[Mapping[str, Any]]) -> None:
        """Remember the signatures of the call parts of a reply."""
        with self._lock:
            for part in parts:
                call = part.get("functionCall")
                signature = part.get("thoughtSignature")
                if isinstance(call, Mapping) and isinstance(signature, str):
                    self._signatures.setdefault(_call_key(call), set()).add(signature)

    def check(self, body: Mapping[str, Any]) -> None:
        """Raise `WireError` with the API's message when `body` breaks a rule."""
        if body.get("cachedContent") is not None:
            for name in ("systemInstruction", "tools", "toolConfig"):
                if name in body:
                    raise WireError(
                        "CachedContent can not be used with GenerateContent request setting "
                        f"{name}; set it on the CachedContent instead",
                        name,
                    )
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise WireError("contents is not specified", "contents")
        for i, turn in enumerate(contents):
            if not isinstance(turn, Mapping):
                raise WireError(f"contents[{i}] must be an object", "contents")
            role = turn.get("role", "user")
            if role not in ("user", "model"):
                raise WireError(f"Please use a valid role: user, model (contents[{i}])", "role")
            if role == "model":
                self._model_turn(contents, i, turn)
        if contents[-1].get("role", "user") != "user":
            raise WireError("Please ensure that the last turn is a user turn", "contents")

    def _model_turn(self, contents: Sequence[Any], i: int, turn: Mapping[str, Any]) -> None:
        calls = [p["functionCall"] for p in _parts(turn) if isinstance(p.get("functionCall"),
                                                                       Mapping)]  # fmt: skip
        with self._lock:
            for part in _parts(turn):
                call = part.get("functionCall")
                if not isinstance(call, Mapping):
                    continue
                issued = self._signatures.get(_call_key(call))
                if issued is not None and part.get("thoughtSignature") not in issued:
                    raise WireError(
                        f"Function call is missing a thought_signature in functionCall parts "
                        f"(contents[{i}])",
                        "thoughtSignature",
                    )
        if not calls:
            return
        after = contents[i + 1] if i + 1 < len(contents) else None
        if not isinstance(after, Mapping) or after.get("role", "user") != "user":
            raise WireError(
                f"Please ensure that function call turn comes immediately after a user turn "
                f"or after a function response turn (contents[{i}])",
                "contents",
            )
        results = [p["functionResponse"] for p in _parts(after)
                   if isinstance(p.get("functionResponse"), Mapping)]  # fmt: skip
        if len(results) != len(calls):
            raise WireError(
                "Please ensure that the number of function response parts is equal to the "
                f"number of function call parts of the function call turn (contents[{i + 1}])",
                "contents",
            )
        for call, result in zip(calls, results, strict=True):
            if call.get("name") != result.get("name") or (
                call.get("id") and call.get("id") != result.get("id")
            ):
                raise WireError(
                    "Please ensure that function responses follow the order of the function "
                    f"calls (contents[{i + 1}])",
                    "contents",
                )

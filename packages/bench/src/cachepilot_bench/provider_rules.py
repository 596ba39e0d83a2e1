"""The providers' documented request rules, checked on raw request bodies.

A real provider refuses a request that breaks these rules with a 400; the replay provider
(`ReplayProvider(..., rules=ProviderRules())`) does the same, with the provider's own wording,
so a test against it fails where the real API would. Checked:

- Anthropic Messages: at most four `cache_control` blocks (system, tools, message blocks and
  blocks nested in tool results all count); a 1-hour mark never after a 5-minute one; roles
  `user`/`assistant` only; every `tool_use` answered by a `tool_result` with its id in the next
  message (results first), every `tool_result` answering a `tool_use` of the previous message;
  tool use ids unique and of the documented alphabet.
- Chat Completions: an assistant message with `tool_calls` followed by one `tool` message per
  call id; every `tool` message answering a preceding call; tool names of the documented alphabet.
- Responses: every `function_call` / `custom_tool_call` with its output and every output with
  its call (by `call_id`; with `previous_response_id`, the calls of the response it names
  count as sent); a `reasoning` item followed by the item it belongs to; reasoning
  items this provider issued resent with their `id` and encrypted content unchanged.
- Gemini `generateContent`: `cachepilot_bench.gemini_rules` (signatures echoed, results in
  call order, nothing next to a `cachedContent`).

The checks read the body once (linear in its size) and never modify it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from cachepilot.wire import Api, WireError
from cachepilot_bench.gemini_rules import GeminiRules

__all__ = ["MAX_CACHE_CONTROL_BLOCKS", "ProviderRules", "anthropic_cache_blocks"]

MAX_CACHE_CONTROL_BLOCKS = 4
"""Anthropic's limit on `cache_control` blocks per request."""

_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
_AFTER_REASONING = frozenset({"message", "function_call", "custom_tool_call", "web_search_call"})


def _mark_ttls(blocks: Any, out: list[str]) -> None:
    """Append the ttl of every marked block of `blocks` (and of tool result contents)."""
    if not isinstance(blocks, list):
        return
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        mark = block.get("cache_control")
        if isinstance(mark, Mapping):
            out.append(str(mark.get("ttl", "5m")))
        if block.get("type") == "tool_result":
            _mark_ttls(block.get("content"), out)


def anthropic_cache_blocks(body: Mapping[str, Any]) -> list[str]:
    """The ttls of the `cache_control` marks of a Messages body, in the provider's order
    (tools, system, messages), the request-level mark first."""
    ttls: list[str] = []
    top = body.get("cache_control")
    if isinstance(top, Mapping):
        ttls.append(str(top.get("ttl", "5m")))
    _mark_ttls(body.get("tools"), ttls)
    _mark_ttls(body.get("system"), ttls)
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, Mapping):
                _mark_ttls(message.get("content"), ttls)
    return ttls


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


class ProviderRules:
    """Checks request bodies against the providers' rules (thread-safe).

    It remembers the reasoning items it was told the provider issued (`issued_reasoning`),
    so a resent item whose id or encrypted content changed is refused like the real API does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasoning: dict[str, str | None] = {}
        self.gemini = GeminiRules()
        """Gemini's rules, with the signatures the provider issued (`GeminiRules.issued`)."""
        self.refusals: list[str] = []
        """The message of every refused request, in order."""

    def issued_reasoning(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Remember the reasoning items of a reply (Responses output items)."""
        with self._lock:
            for item in items:
                if item.get("type") == "reasoning" and isinstance(item.get("id"), str):
                    content = item.get("encrypted_content")
                    self._reasoning[item["id"]] = content if isinstance(content, str) else None

    def check(
        self, api: Api, body: Mapping[str, Any], open_calls: frozenset[str] = frozenset()
    ) -> None:
        """Raise `WireError` with the provider's message when `body` breaks a rule.

        `open_calls`: the call ids a Responses body's `previous_response_id` left unanswered
        (its outputs answer them, and must answer all of them).
        """
        try:
            if api == "anthropic":
                self._anthropic(body)
            elif api == "chat":
                self._chat(body)
            elif api == "gemini":
                self.gemini.check(body)
            else:
                self._responses(body, open_calls)
        except WireError as exc:
            with self._lock:
                self.refusals.append(str(exc))
            raise

    # ------------------------------------------------------------------ anthropic

    @staticmethod
    def _anthropic(body: Mapping[str, Any]) -> None:
        ttls = anthropic_cache_blocks(body)
        if len(ttls) > MAX_CACHE_CONTROL_BLOCKS:
            raise WireError(
                f"A maximum of {MAX_CACHE_CONTROL_BLOCKS} blocks with cache_control may be "
                f"provided. Found {len(ttls)}.",
            )
        seen_short = False
        for ttl in ttls:
            if ttl == "1h" and seen_short:
                raise WireError(
                    "a ttl='1h' cache_control block must not come after a ttl='5m' "
                    "cache_control block. Note that blocks are processed in the following "
                    "order: `tools`, `system`, `messages`."
                )
            seen_short = seen_short or ttl != "1h"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise WireError("messages: at least one message is required", "messages")
        seen_ids: set[str] = set()
        pending: list[str] = []  # tool_use ids of the previous assistant message
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping) or message.get("role") not in (
                "user",
                "assistant",
            ):
                raise WireError(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            blocks = _blocks(message.get("content"))
            if message["role"] == "user":
                results: list[str] = []
                after_other = False
                for k, block in enumerate(blocks):
                    if block.get("type") == "tool_result":
                        use_id = block.get("tool_use_id")
                        if not isinstance(use_id, str) or use_id not in pending:
                            raise WireError(
                                f"messages.{i}.content.{k}: unexpected `tool_use_id` found in "
                                f"`tool_result` blocks: {use_id}. Each `tool_result` block must "
                                "have a corresponding `tool_use` block in the previous message."
                            )
                        if after_other:
                            raise WireError(
                                f"messages.{i}: `tool_result` blocks must come first in the "
                                "content of a user message that answers `tool_use` blocks"
                            )
                        results.append(use_id)
                    else:
                        after_other = True
                missing = [p for p in pending if p not in results]
                if missing:
                    raise WireError(
                        f"messages.{i - 1}: `tool_use` ids were found without `tool_result` "
                        f"blocks immediately after: {', '.join(missing)}. Each `tool_use` block "
                        "must have a corresponding `tool_result` block in the next message."
                    )
                pending = []
                continue
            if pending:
                raise WireError(
                    f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(pending)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
            for k, block in enumerate(blocks):
                if block.get("type") == "tool_result":
                    raise WireError(
                        f"messages.{i}.content.{k}: `tool_result` blocks are only allowed in "
                        "user messages"
                    )
                if block.get("type") != "tool_use":
                    continue
                use_id = block.get("id")
                if not isinstance(use_id, str) or not _TOOL_USE_ID.match(use_id):
                    raise WireError(
                        f"messages.{i}.content.{k}.tool_use.id: String should match pattern "
                        "'^[a-zA-Z0-9_-]+$'"
                    )
                if use_id in seen_ids:
                    raise WireError(
                        f"messages.{i}.content.{k}: `tool_use` ids must be unique, found "
                        f"duplicate: {use_id}"
                    )
                seen_ids.add(use_id)
                pending.append(use_id)
        # A final assistant message with tool_use and no answer is an unfinished prefill.
        if pending and messages and messages[-1].get("role") == "assistant":
            raise WireError(
                f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
                f"blocks immediately after: {', '.join(pending)}. Each `tool_use` block must "
                "have a corresponding `tool_result` block in the next message."
            )

    # ------------------------------------------------------------------ chat

    @staticmethod
    def _chat(body: Mapping[str, Any]) -> None:
        for i, tool in enumerate(body.get("tools") or []):
            function = tool.get("function") if isinstance(tool, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
                raise WireError(
                    f"Invalid 'tools[{i}].function.name': string does not match pattern. "
                    "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                    f"tools[{i}].function.name",
                )
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise WireError("Invalid type for 'messages': expected an array.", "messages")
        open_ids: list[str] = []
        answerable: set[str] = set()
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise WireError(f"Invalid type for 'messages[{i}]'.", f"messages[{i}]")
            role = message.get("role")
            if role == "tool":
                call_id = message.get("tool_call_id")
                if not isinstance(call_id, str) or call_id not in answerable:
                    raise WireError(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                        f"messages.[{i}].role",
                    )
                answerable.discard(call_id)
                if call_id in open_ids:
                    open_ids.remove(call_id)
                continue
            if open_ids:
                raise WireError(
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                    f"response messages: {', '.join(open_ids)}",
                    "messages",
                )
            answerable = set()
            if role == "assistant":
                for call in message.get("tool_calls") or []:
                    call_id = call.get("id") if isinstance(call, Mapping) else None
                    if not isinstance(call_id, str) or not call_id:
                        raise WireError(
                            f"Missing required parameter: 'messages[{i}].tool_calls[].id'.",
                            f"messages[{i}].tool_calls",
                        )
                    open_ids.append(call_id)
                    answerable.add(call_id)
        if open_ids:
            raise WireError(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(open_ids)}",
                "messages",
            )

    # ------------------------------------------------------------------ responses

    def _responses(self, body: Mapping[str, Any], open_calls: frozenset[str]) -> None:
        items = body.get("input")
        if not isinstance(items, list):
            if open_calls:
                missing_id = sorted(open_calls)[0]
                raise WireError(f"No tool output found for function call {missing_id}.", "input")
            return  # a string input has no items to pair
        calls: set[str] = set(open_calls)
        outputs: set[str] = set()
        typed = [(i, it) for i, it in enumerate(items) if isinstance(it, Mapping)]
        for position, (i, item) in enumerate(typed):
            kind = item.get("type", "message")
            if kind in _CALL_ITEMS:
                call_id = item.get("call_id")
                if not isinstance(call_id, str) or not call_id:
                    raise WireError(f"Missing required parameter: 'input[{i}].call_id'.")
                calls.add(call_id)
            elif kind in _OUTPUT_ITEMS:
                call_id = item.get("call_id")
                if not isinstance(call_id, str) or call_id not in calls:
                    raise WireError(
                        f"No tool call found for function call output with call_id {call_id}.",
                        "input",
                    )
                outputs.add(call_id)
            elif kind == "reasoning":
                self._reasoning_item(i, item, typed[position + 1 :])
        missing = sorted(calls - outputs)
        if missing:
            raise WireError(f"No tool output found for function call {missing[0]}.", "input")

    def _reasoning_item(
        self, i: int, item: Mapping[str, Any], rest: Sequence[tuple[int, Mapping[str, Any]]]
    ) -> None:
        item_id = item.get("id")
        following = next((it for _, it in rest if it.get("type") != "reasoning"), None)
        kind = following.get("type", "message") if following is not None else None
        role = following.get("role", "assistant") if following is not None else None
        if kind not in _AFTER_REASONING or (kind == "message" and role != "assistant"):
            raise WireError(
                f"Item '{item_id}' of type 'reasoning' was provided without its required "
                "following item.",
                "input",
            )
        if item_id is None:
            return
        with self._lock:
            known = item_id in self._reasoning
            content = self._reasoning.get(item_id)
        if not known:
            raise WireError(f"Item with id '{item_id}' not found.", f"input[{i}].id")
        if content is not None and item.get("encrypted_content") != content:
            raise WireError(
                f"The encrypted content for item {item_id} could not be verified.",
                f"input[{i}].encrypted_content",
            )

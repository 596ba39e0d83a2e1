"""Where to put explicit prompt-cache breakpoints (Anthropic `cache_control` marks).

A provider with explicit breakpoints caches a prefix only where a request marks one (at most
four per request), and a later request reads an earlier prefix only when it ends at most
`lookback_blocks` content blocks (Anthropic: 20) before one of its own marks. Tokens are
billed as written only past the cache hit, once, however many marks a request carries, so a
mark costs nothing by itself; what it buys depends on where it sits. The caller's own marks
are always kept and count against the limit *one by one*, as the provider counts them: two
marked system blocks take two slots although both end the same planner position (the
header). In the slots left, marks are added in this order, each only where its prefix
reaches the profile's minimum cacheable length:

1. **the last message**: the next call of the thread reads everything up to it;
2. **a bridge** to the end of the previous request (given, else the message before the
   newest model reply, which is where an agent loop's previous call ended) when no mark
   reaches it within the lookback window: a turn with many parallel tool calls and their
   results adds more than 20 blocks, and without the bridge the previous write is not found;
3. **stable anchors** the caller names (`stable`): messages before the first one it may
   rewrite later (e.g. the next maintenance point's first stub). Marked on every call, their
   prefix stays written and fresh, so a history rewrite after them still reads it;
4. **the end of tools + system**: survives any rewrite of the history.

The result is a pure function of its inputs (deterministic). `plan_breakpoints` works on a
request rendered by the simulator (`cachepilot.sim.render_request`), `request_breakpoints`
on a neutral request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from cachepilot.messages import Message
from cachepilot.sim import ProviderProfile, RenderedRequest, Request, common_prefix, render_request
from cachepilot.tokens import TokenCounter, get_counter

__all__ = ["DEFAULT_MAX_BREAKPOINTS", "HEADER", "plan_breakpoints", "request_breakpoints"]

HEADER = -1
"""The breakpoint index of the end of tools + system (as in `Request.cache_breakpoints`)."""
DEFAULT_MAX_BREAKPOINTS = 4
"""Breakpoints per request when the profile sets no limit (Anthropic's limit)."""
_UNLIMITED = 1 << 30


def _segment(rendered: RenderedRequest, index: int) -> int | None:
    """The segment a breakpoint index marks (None when it marks nothing that exists)."""
    if index == HEADER:
        return rendered.first_message - 1 if rendered.first_message > 0 else None
    if 0 <= index < rendered.n_messages:
        return rendered.first_message + index
    return None


def _reaches(rendered: RenderedRequest, target: int, points: set[int], lookback: int) -> bool:
    """A lookup from one of `points` (segments) walks back to the end of `target` in the window."""
    segments = rendered.segments
    for point in points:
        if point < target:
            continue
        blocks = 0
        for k in range(point, target, -1):
            blocks += segments[k].blocks
            if blocks > lookback:
                break
        else:
            return True
    return False


def _bridge_target(rendered: RenderedRequest, previous: RenderedRequest | None) -> int | None:
    """The segment where the previous request of the thread ended, when this one extends it."""
    if previous is not None:
        _, same = common_prefix(previous, rendered)
        if same == len(previous.segments) and previous.segments:
            return len(previous.segments) - 1
        return None
    first = rendered.first_message
    for k in range(len(rendered.segments) - 1, first - 1, -1):
        if rendered.segments[k].role == "assistant":
            return k - 1 if k - 1 >= 0 else None
    return None


def plan_breakpoints(
    rendered: RenderedRequest,
    client: Sequence[int] = (),
    previous: RenderedRequest | None = None,
    profile: ProviderProfile | None = None,
    *,
    stable: Sequence[int] = (),
) -> list[int]:
    """Breakpoints to add to a request, beyond the caller's own (see the module docstring).

    Args:
        rendered: the request as it will be sent (`render_request`, no hidden prefix).
        client: the caller's own marks, one entry per mark on the wire: message indices,
            `HEADER` (-1) for a mark in tools + system. A position marked twice (two system
            blocks, two blocks of one message) appears twice: each mark takes a slot.
        previous: the thread's previous request as sent, when known (the bridge then targets
            its exact end; without it, the message before the newest assistant message).
        profile: the provider profile (limit, lookback, minimum); Anthropic's rules when None.
        stable: message indices of stable anchors, most important first.

    Returns:
        Message indices to mark (`HEADER` for tools + system), sorted, none of them the
        caller's; together with `client` at most the profile's limit (none when the caller's
        marks use every slot, or more).

    Raises:
        ValueError: when `client` names a message the request does not have.
    """
    limit = DEFAULT_MAX_BREAKPOINTS
    minimum = 1024
    lookback = 20
    if profile is not None:
        limit = profile.max_breakpoints or DEFAULT_MAX_BREAKPOINTS
        minimum = profile.min_cacheable_tokens
        lookback = profile.lookback_blocks if profile.lookback_blocks is not None else _UNLIMITED
    marked: set[int] = set()
    for index in client:
        segment = _segment(rendered, index)
        if segment is None and index != HEADER:
            raise ValueError(
                f"client breakpoint {index} out of range: the request has "
                f"{rendered.n_messages} messages (use -1 for the end of tools + system)"
            )
        if segment is not None:
            marked.add(segment)
    budget = limit - len(client)
    if budget <= 0 or rendered.n_messages == 0:
        return []
    last = len(rendered.segments) - 1
    added: list[int] = []

    def take(segment: int | None) -> None:
        if (
            segment is not None
            and 0 <= segment <= last
            and len(added) < budget
            and segment not in marked
            and segment not in added
            and rendered.ends[segment] >= minimum
        ):
            added.append(segment)

    take(last)
    target = _bridge_target(rendered, previous)
    if (
        target is not None
        and target < last
        and not _reaches(rendered, target, marked | set(added), lookback)
    ):
        take(target)
    for index in stable:
        segment = _segment(rendered, index)
        if segment is not None and segment < last:
            take(segment)
    take(_segment(rendered, HEADER))
    header = rendered.first_message - 1
    return sorted(HEADER if s == header else s - rendered.first_message for s in added)


def request_breakpoints(
    system: str | None,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] = (),
    profile: ProviderProfile | None = None,
    *,
    client: Sequence[int] = (),
    stable: Sequence[int] = (),
    counter: TokenCounter | None = None,
    hidden_prefix_tokens: int = 0,
) -> list[int]:
    """`plan_breakpoints` for a neutral request (tools, system, messages as they are sent;
    `hidden_prefix_tokens`: what the provider adds before the tools)."""
    rendered = render_request(
        Request(system=system, messages=messages, tools=tools),
        counter or get_counter(),
        hidden_prefix_tokens=hidden_prefix_tokens,
    )
    return plan_breakpoints(rendered, client, None, profile, stable=stable)


class CacheAnchors(BaseModel):
    """A thread's stable anchor between calls (kept in its pilot state).

    The anchor is the last view message before the first one a maintenance point could
    rewrite. It is marked on every call, so its prefix stays written and fresh; on the call
    that rewrites history the anchor of the call before is marked too: its prefix is the one
    still in the provider's cache.
    """

    call: int = -1
    """The call (`PilotState.calls`) the anchor was computed at (-1: never)."""
    before: str | None = None
    """Key of the anchor in force before that call."""
    now: str | None = None
    """Key of the anchor computed at that call."""


def advance_anchors(
    anchors: CacheAnchors, call: int, keys: Sequence[str], first_rewritable: int | None
) -> tuple[CacheAnchors, list[int]]:
    """The anchors after call `call` and the view indices to mark as stable at it.

    Args:
        anchors: the thread's anchors so far (returned as the same object when unchanged).
        call: the call's ordinal; asking twice at one call gives the same answer.
        keys: the view's message keys.
        first_rewritable: view index of the first message a maintenance point could rewrite
            (None when there is none yet).

    Returns:
        (new anchors, stable indices: the previous anchor when it differs and is still in the
        view, then the current one).
    """
    now = keys[first_rewritable - 1] if first_rewritable is not None and first_rewritable else None
    if anchors.call != call:
        anchors = CacheAnchors(call=call, before=anchors.now, now=now)
    elif anchors.now != now:
        anchors = anchors.model_copy(update={"now": now})
    out: list[int] = []
    before = anchors.before
    if before is not None and before != now and before in keys:
        out.append(list(keys).index(before))  # absent once a fold took it
    if now is not None and first_rewritable is not None:
        out.append(first_rewritable - 1)
    return anchors, out

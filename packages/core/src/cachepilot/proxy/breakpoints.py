"""Where the proxy adds Anthropic `cache_control` breakpoints.

Anthropic caches a prompt prefix only up to an explicit breakpoint (at most 4 per request),
and a request reads an earlier prefix only if it ends at most 20 content blocks before one of
the request's own breakpoints. The client's own marks are always kept and count against the
4; in the slots left, the proxy adds, in this order:

1. the last message, when the request reaches the profile's minimum cacheable length: the
   next call of the thread reads everything up to it (the write premium, 0.25x on new tokens,
   is repaid by one read at 0.1x instead of 1x);
2. a bridge: the end of the thread's previous request, when this request extends it by more
   blocks than the lookback window, so the previous write is still found;
3. the end of tools + system, when it reaches the minimum on its own: free (a request is
   billed for tokens written past its cache hit, not per breakpoint), and it survives any
   rewrite of the history.

Lengths, block counts and the lookback come from the simulator's rendering and profile.
"""

from __future__ import annotations

from collections.abc import Sequence

from cachepilot.sim import ProviderProfile, RenderedRequest, common_prefix

__all__ = ["plan_breakpoints"]


def _reaches(rendered: RenderedRequest, target: int, points: Sequence[int], lookback: int) -> bool:
    """A lookup from one of `points` (segments) walks back to `target` within the window."""
    for point in points:
        if point < target:
            continue
        blocks = sum(rendered.segments[k].blocks for k in range(target + 1, point + 1))
        if blocks <= lookback:
            return True
    return False


def plan_breakpoints(
    rendered: RenderedRequest,
    client: Sequence[int],
    previous: RenderedRequest | None,
    profile: ProviderProfile,
) -> list[int]:
    """Message indices (-1: end of tools + system) to mark, beyond the client's own.

    Args:
        rendered: the request as it will be sent (no hidden prefix).
        client: the client's marks (message indices, -1 for tools + system).
        previous: the thread's previous request as sent, when there is one.
        profile: a breakpoint profile (`anthropic`, `anthropic-1h`).
    """
    budget = (profile.max_breakpoints or 4) - len(set(client))
    if budget <= 0 or rendered.n_messages == 0:
        return []
    first = rendered.first_message
    minimum = profile.min_cacheable_tokens
    lookback = profile.lookback_blocks if profile.lookback_blocks is not None else 1 << 30
    marked = {first + i for i in client if i >= 0}
    if -1 in client and first > 0:
        marked.add(first - 1)
    added: list[int] = []
    last = len(rendered.segments) - 1
    if last not in marked and rendered.ends[last] >= minimum:
        added.append(last)
    if previous is not None and len(added) < budget:
        _, same = common_prefix(previous, rendered)
        end = len(previous.segments) - 1
        if (
            same == len(previous.segments)
            and first <= end < last
            and end not in marked
            and not _reaches(rendered, end, sorted(marked | set(added)), lookback)
            and rendered.ends[end] >= minimum
        ):
            added.append(end)
    header = first - 1
    if (
        len(added) < budget
        and header >= 0
        and header not in marked
        and rendered.ends[header] >= minimum
    ):
        added.append(header)
    return sorted(-1 if s == header else s - first for s in added[:budget])

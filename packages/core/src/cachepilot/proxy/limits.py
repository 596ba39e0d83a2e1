"""Limits at the proxy's boundary: what a client may send before the proxy reads any of it.

* body size: a `Content-Length` over the limit is refused at once, and a body that grows past
  it while it is read (chunked) is refused there (413);
* body time: a body that stops arriving (a `Content-Length` larger than what is sent) or
  dribbles in is answered 408 once no byte came for `idle` seconds or the whole body took
  longer than `total`;
* header time: a connection whose request line and headers are not complete within
  `header_timeout` seconds is answered 408 and closed
  (`cachepilot.proxy.http_protocol.HeaderTimeoutProtocol`), so slow connections cannot hold
  the server's sockets;
* JSON nesting: a body nested deeper than `max_depth` is refused (400), checked without
  recursion (`nesting_depth`), so no `RecursionError` reaches the server.

Each check is linear in what it reads and holds no more than the limit in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["BodyRefusedError", "nesting_depth", "read_body"]

_CONTAINERS = (dict, list)
"""What `json.loads` makes that holds other values."""


class BodyRefusedError(Exception):
    """A request body the proxy will not read further (`status`: 413 or 408)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_body(
    chunks: AsyncIterator[bytes],
    *,
    declared: str | None,
    max_bytes: int,
    idle: float,
    total: float,
) -> bytes:
    """The whole body from `chunks`, within the limits (see the module docstring).

    Args:
        chunks: the body as it arrives.
        declared: the request's `Content-Length` header (None: not sent).
        max_bytes: the largest body read.
        idle: seconds to wait for each next chunk.
        total: seconds to wait for the whole body.

    Raises:
        BodyRefusedError: 413 (too large) or 408 (too slow).
    """
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            size = -1
        if size > max_bytes:
            raise BodyRefusedError(413, f"request body over the proxy's limit of {max_bytes} bytes")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + total
    parts: list[bytes] = []
    received = 0
    iterator = aiter(chunks)
    while True:
        wait = min(idle, deadline - loop.time())
        if wait <= 0:
            raise BodyRefusedError(408, f"request body not received within {total:g} s")
        try:
            chunk = await asyncio.wait_for(anext(iterator), wait)
        except StopAsyncIteration:
            break
        except TimeoutError:
            slow = wait < idle
            raise BodyRefusedError(
                408,
                f"request body not received within {total:g} s"
                if slow
                else f"request body stalled: nothing received for {idle:g} s",
            ) from None
        received += len(chunk)
        if received > max_bytes:
            raise BodyRefusedError(413, f"request body over the proxy's limit of {max_bytes} bytes")
        if chunk:
            parts.append(chunk)
    return b"".join(parts)


def nesting_depth(value: Any, limit: int) -> int:
    """The nesting depth of a parsed JSON value (1 for a scalar), counted without recursion
    and given up at once past `limit` (then `limit + 1` is returned)."""
    if type(value) not in _CONTAINERS:
        return 1
    deepest = 1
    # One level at a time: the containers of a level, then theirs (no recursion, and no
    # per-value tuple: a 300 KB request body has tens of thousands of values).
    level: list[Any] = [value]
    while level:
        if deepest > limit:
            return limit + 1
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below.extend(v for v in children if type(v) in _CONTAINERS)
        if below:
            deepest += 1
        level = below
    return deepest

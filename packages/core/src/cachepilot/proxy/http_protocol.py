"""uvicorn's h11 protocol with a deadline on each request's line and headers (408 after it).

uvicorn closes a connection that idles between requests (its keep-alive timeout) but waits
for the headers of a request as long as they trickle in; this protocol closes a connection
whose request line and headers are not complete within `HeaderTimeoutProtocol.header_timeout`
seconds, so slow connections cannot hold the server's sockets (`cachepilot.proxy.limits`).
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderTimeoutProtocol"]

logger = logging.getLogger(__name__)

_TIMEOUT_REPLY = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 35\r\n\r\nrequest headers took too long: 408\n"
)


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's line and headers.

    The deadline (`header_timeout`, which the server process sets from its settings) runs from the
    connection's first byte of a request (or from the connection itself) until its headers
    are complete; keep-alive idling between requests stays uvicorn's own timeout.
    """

    header_timeout: float = 10.0
    """Seconds a request's line and headers may take (a class setting: uvicorn builds one
    protocol object per connection)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the deadline for the first request's headers."""
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Feed the connection; keep the deadline while a request's headers are incomplete."""
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and data:
            if self._header_timer is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the deadline with the connection."""
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        """The next request's deadline starts with its first byte (keep-alive idles first)."""
        self._disarm()
        super().on_response_complete()

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is being written: its own request's headers came long ago
        logger.info(
            "closing a connection whose request headers took over %g s", self.header_timeout
        )
        self.transport.write(_TIMEOUT_REPLY)
        self.transport.close()

"""Bounded decompression of recorded HTTP bodies (gzip, deflate).

A cassette is a file handed to the CLI: a small compressed body may expand a thousandfold. The
output is produced in bounded steps and decompression stops as soon as it passes the limit:
`max_bytes`, and `max_ratio` times the compressed size (small bodies may always reach
`floor_bytes`), so memory stays proportional to the limit whatever the input.
"""

from __future__ import annotations

import zlib

__all__ = [
    "FLOOR_BYTES",
    "MAX_BODY_BYTES",
    "MAX_RATIO",
    "BodyTooLargeError",
    "body_limit",
    "inflate",
]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""No decompressed body is larger than this (32 MiB)."""
MAX_RATIO = 100
"""…nor larger than this many times its compressed size…"""
FLOOR_BYTES = 1024 * 1024
"""…except that any body may reach 1 MiB."""

_GZIP_MAGIC = b"\x1f\x8b"
_STEP = 1024 * 1024


class BodyTooLargeError(ValueError):
    """A body that would expand past its limit (nothing beyond the limit was produced)."""

    def __init__(self, compressed: int, limit: int) -> None:
        super().__init__(
            f"expands past {limit:,} bytes from {compressed:,} compressed "
            f"(limits: {MAX_BODY_BYTES:,} bytes, {MAX_RATIO}× the compressed size)"
        )
        self.compressed = compressed
        self.limit = limit


def body_limit(
    compressed: int,
    *,
    max_bytes: int = MAX_BODY_BYTES,
    max_ratio: int = MAX_RATIO,
    floor_bytes: int = FLOOR_BYTES,
) -> int:
    """The most bytes a body of `compressed` bytes may expand to."""
    return min(max_bytes, max(floor_bytes, max_ratio * compressed))


def _stream(raw: bytes, wbits: int, limit: int, out: bytearray) -> bytes:
    """Inflate one stream into `out`; returns the input left after it."""
    engine = zlib.decompressobj(wbits)
    data = raw
    while True:
        room = limit - len(out)
        # Ask for at most one step more than the room: a body at the limit is still accepted,
        # one byte past it is refused, and no call produces more than a step.
        chunk = engine.decompress(data, min(_STEP, room + 1))
        out += chunk
        if len(out) > limit:
            raise BodyTooLargeError(len(raw), limit)
        data = engine.unconsumed_tail
        if engine.eof:
            return engine.unused_data
        if not data and not chunk:
            raise zlib.error("truncated stream")


def inflate(raw: bytes, encoding: str, limit: int | None = None) -> bytes:
    """Decompress a `gzip` (every member) or `deflate` (zlib or raw) body within `limit`.

    Args:
        raw: the compressed bytes.
        encoding: `gzip` or `deflate`.
        limit: the most bytes to produce (default: `body_limit(len(raw))`).

    Raises:
        BodyTooLargeError: when the output would pass `limit`.
        zlib.error: when the data is not valid for the encoding.
    """
    cap = body_limit(len(raw)) if limit is None else limit
    out = bytearray()
    if encoding == "gzip":
        rest = raw
        while rest[:2] == _GZIP_MAGIC:  # concatenated members, as gzip.decompress reads them
            rest = _stream(rest, 16 + zlib.MAX_WBITS, cap, out)
        if not out and raw[:2] != _GZIP_MAGIC:
            raise zlib.error("not gzip data")
        return bytes(out)
    if encoding == "deflate":
        try:
            _stream(raw, zlib.MAX_WBITS, cap, out)
        except zlib.error:
            out.clear()
            _stream(raw, -zlib.MAX_WBITS, cap, out)  # servers that send raw deflate
        return bytes(out)
    raise ValueError(f"unsupported content encoding: {encoding!r}")

"""Bounded decompression of recorded HTTP bodies (gzip, deflate, zstd, br).

A cassette is a file handed to the CLI: a small compressed body may expand a thousandfold. The
output is produced in bounded steps and decompression stops as soon as it passes the limit:
`max_bytes`, and `max_ratio` times the compressed size (small bodies may always reach
`floor_bytes`), so memory stays proportional to the limit whatever the input.

gzip and deflate use the standard library. zstd uses `compression.zstd` (Python 3.14+) or the
`zstandard` package, br the `brotli` package (both in the `cassettes` extra); without a decoder
`inflate` raises `DecoderMissingError`, which callers report instead of dropping the body.
"""

from __future__ import annotations

import importlib
import io
import zlib
from typing import Any

__all__ = [
    "ENCODINGS",
    "FLOOR_BYTES",
    "MAX_BODY_BYTES",
    "MAX_RATIO",
    "BodyTooLargeError",
    "DecoderMissingError",
    "body_limit",
    "inflate",
]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""No decompressed body is larger than this (32 MiB)."""
MAX_RATIO = 100
"""…nor larger than this many times its compressed size…"""
FLOOR_BYTES = 1024 * 1024
"""…except that any body may reach 1 MiB."""

ENCODINGS = ("gzip", "deflate", "zstd", "br")
"""Content encodings `inflate` knows."""

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
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


class DecoderMissingError(ValueError):
    """A body in an encoding whose decoder is not installed."""

    def __init__(self, encoding: str, package: str) -> None:
        super().__init__(
            f"no {encoding} decoder installed (pip install {package!r}, or "
            "pip install 'cachepilot[cassettes]')"
        )
        self.encoding = encoding
        self.package = package


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
    """Decompress a `gzip` (every member), `deflate` (zlib or raw), `zstd` or `br` body.

    Args:
        raw: the compressed bytes.
        encoding: one of `ENCODINGS`.
        limit: the most bytes to produce (default: `body_limit(len(raw))`).

    Raises:
        BodyTooLargeError: when the output would pass `limit`.
        DecoderMissingError: when the encoding's decoder is not installed.
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
    if encoding == "zstd":
        return _zstd(raw, cap)
    if encoding == "br":
        return _brotli(raw, cap)
    raise ValueError(f"unsupported content encoding: {encoding!r}")


def _optional(name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _read_bounded(reader: Any, raw: bytes, limit: int) -> bytes:
    """Read a decompressing file object in steps, refusing output past `limit`."""
    out = bytearray()
    while True:
        chunk = reader.read(min(_STEP, limit - len(out) + 1))
        if not chunk:
            return bytes(out)
        out += chunk
        if len(out) > limit:
            raise BodyTooLargeError(len(raw), limit)


def _zstd(raw: bytes, limit: int) -> bytes:
    if raw[:4] != _ZSTD_MAGIC:
        raise zlib.error("not zstd data")
    stdlib = _optional("compression.zstd")  # Python 3.14+
    try:
        if stdlib is not None:
            with stdlib.ZstdFile(io.BytesIO(raw)) as reader:
                return _read_bounded(reader, raw, limit)
        package = _optional("zstandard")
        if package is None:
            raise DecoderMissingError("zstd", "zstandard")
        decompressor = package.ZstdDecompressor()
        with decompressor.stream_reader(io.BytesIO(raw), read_across_frames=True) as reader:
            return _read_bounded(reader, raw, limit)
    except (BodyTooLargeError, DecoderMissingError):
        raise
    except Exception as exc:  # each decoder raises its own error type on bad data
        raise zlib.error(f"not valid zstd data: {exc}") from None


_BROTLI_FEED = 64
"""Compressed bytes fed to a brotli decoder per step when it cannot cap its own output."""


def _brotli(raw: bytes, limit: int) -> bytes:
    package = _optional("brotli")
    if package is None:
        raise DecoderMissingError("br", "brotli")
    decoder = package.Decompressor()
    out = bytearray()
    try:
        # Small input steps bound the output of each call (the brotli API takes no output cap
        # in older releases), and the total is checked after every step.
        for start in range(0, len(raw), _BROTLI_FEED):
            out += decoder.process(raw[start : start + _BROTLI_FEED])
            if len(out) > limit:
                raise BodyTooLargeError(len(raw), limit)
        finished = getattr(decoder, "is_finished", None)
        if finished is not None and not finished():
            raise zlib.error("truncated brotli stream")
    except (BodyTooLargeError, zlib.error):
        raise
    except Exception as exc:  # brotli.error and friends
        raise zlib.error(f"not valid brotli data: {exc}") from None
    return bytes(out)

"""Turn whatever a tool returned into text plus the exact original payload to archive."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel

__all__ = ["ResultKind", "ToolResult", "decode_image", "guess_media_type", "normalize_output"]

logger = logging.getLogger(__name__)

ResultKind: TypeAlias = Literal["text", "json", "binary", "empty", "image", "invalid_utf8"]

_SNIFF_BYTES = 8_192
_BINARY_RATIO = 0.10
_DATA_URL = re.compile(r"data:(image/[A-Za-z0-9.+-]+);base64,", re.ASCII)

_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),
    (b"BM", 0, "image/bmp"),
    (b"%PDF-", 0, "application/pdf"),
    (b"PK\x03\x04", 0, "application/zip"),
    (b"\x1f\x8b", 0, "application/gzip"),
    (b"BZh", 0, "application/x-bzip2"),
    (b"\xfd7zXZ\x00", 0, "application/x-xz"),
    (b"7z\xbc\xaf\x27\x1c", 0, "application/x-7z-compressed"),
    (b"\x7fELF", 0, "application/x-elf"),
    (b"\x00asm", 0, "application/wasm"),
    (b"SQLite format 3\x00", 0, "application/vnd.sqlite3"),
    (b"ID3", 0, "audio/mpeg"),
    (b"ftyp", 4, "video/mp4"),
    (b"OggS", 0, "audio/ogg"),
)
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's output as the pipeline sees it.

    Attributes:
        text: what the model would see without reduction.
        original: the exact payload to archive (`str` or `bytes`).
        kind: `text`, `json`, `binary`, `empty`, `image` or `invalid_utf8`.
        media_type: a MIME type (guessed for binary payloads).
        exact: True when `text` represents `original` exactly (text, JSON text, valid UTF-8
            bytes, an image as a base64 data URL); False for binary and invalid UTF-8, whose
            view is a lossy decoding (their original is always archived).
    """

    text: str
    original: str | bytes
    kind: ResultKind = "text"
    media_type: str | None = None
    exact: bool = True

    @property
    def size(self) -> int:
        """Size of the original: bytes for a bytes payload, characters for text."""
        return len(self.original)


def guess_media_type(data: bytes) -> str | None:
    """MIME type from a payload's magic number, or None when unknown."""
    for magic, offset, media_type in _MAGIC:
        if data[offset : offset + len(magic)] == magic:
            if media_type == "image/webp" and not data.startswith(b"RIFF"):
                continue
            return media_type
    return None


def normalize_output(output: object) -> ToolResult:
    """Normalize a tool's return value. Total: never raises.

    `str` is kept as is; `bytes` are decoded as UTF-8 (images become a data URL, undecodable
    payloads are classified as binary or invalid UTF-8); `None` and empty payloads are
    `empty`; dicts, lists, scalars, pydantic models and dataclasses become JSON text (the
    serialisation LangGraph's `ToolNode` uses: `json.dumps(value, ensure_ascii=False)`);
    anything else becomes `str(value)`.
    """
    try:
        return _normalize(output)
    except Exception as exc:  # a hostile __str__ or __getattr__: keep the turn going
        logger.warning(
            "tool output of type %s could not be normalized (%s)",
            type(output).__name__,
            type(exc).__name__,
        )
        text = f"[unprintable tool output of type {type(output).__name__}]"
        return ToolResult(text=text, original=text, kind="text", media_type="text/plain")


def _normalize(output: object) -> ToolResult:
    if output is None:
        return ToolResult(text="", original="", kind="empty", media_type="text/plain")
    if isinstance(output, str):
        return _from_str(output)
    if isinstance(output, bytes | bytearray | memoryview):
        return _from_bytes(bytes(output))
    if isinstance(output, BaseModel):
        return _from_json(output.model_dump(mode="json"))
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        return _from_json(dataclasses.asdict(output))
    if isinstance(output, dict | list | tuple | int | float | bool):
        return _from_json(output)
    text = str(output)
    return _from_str(text)


def _from_str(text: str) -> ToolResult:
    if not text:
        return ToolResult(text="", original="", kind="empty", media_type="text/plain")
    match = _DATA_URL.match(text)
    if match is not None:
        return ToolResult(text=text, original=text, kind="image", media_type=match.group(1))
    return ToolResult(text=text, original=text, kind="text", media_type="text/plain")


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:
            return sorted(value, key=repr)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _from_json(value: Any) -> ToolResult:
    try:
        text = json.dumps(value, ensure_ascii=False, default=_json_default)
    except (ValueError, TypeError, RecursionError):  # circular or undumpable
        return _from_str(str(value))
    return ToolResult(text=text, original=text, kind="json", media_type="application/json")


def _looks_binary(sample: str) -> bool:
    if not sample:
        return False
    if "\x00" in sample:
        return True
    bad = sum(1 for ch in sample if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\f\b\x1b"))
    return bad / len(sample) > _BINARY_RATIO


def _from_bytes(data: bytes) -> ToolResult:
    if not data:
        return ToolResult(text="", original=data, kind="empty", media_type="text/plain")
    sniffed = guess_media_type(data)
    if sniffed in _IMAGE_TYPES:
        url = f"data:{sniffed};base64," + base64.b64encode(data).decode("ascii")
        return ToolResult(text=url, original=data, kind="image", media_type=sniffed)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        exact = False
    else:
        exact = True
    if sniffed is not None or _looks_binary(text[:_SNIFF_BYTES]):
        return ToolResult(
            text=text,
            original=data,
            kind="binary",
            media_type=sniffed or "application/octet-stream",
            exact=exact,
        )
    if not exact:
        return ToolResult(
            text=text, original=data, kind="invalid_utf8", media_type="text/plain", exact=False
        )
    return ToolResult(text=text, original=data, kind="text", media_type="text/plain")


def decode_image(result: ToolResult) -> bytes | None:
    """The raw bytes of an image result (from its bytes or its base64 data URL)."""
    if isinstance(result.original, bytes):
        return result.original
    match = _DATA_URL.match(result.original)
    if match is None:
        return None
    try:
        return base64.b64decode(result.original[match.end() :], validate=False)
    except (binascii.Error, ValueError):
        return None

"""Images inside structured tool output: found in every common block shape, downsampled.

Tools return images as content blocks of several shapes; all of them are recognised:

* LangChain standard blocks: `{"type": "image", "base64": …, "mime_type": …}` or with `url`;
* MCP / generic: `{"type": "image", "data": …, "mimeType" | "mime_type" | "media_type": …}`;
* Anthropic: `{"type": "image", "source": {"type": "base64", "media_type": …, "data": …}}`;
* OpenAI Chat / LangChain legacy: `{"type": "image_url", "image_url": {"url": "data:…"}}`;
* the Agents SDK's `ToolOutputImage` and Responses input images:
  `{"type": "image" | "input_image", "image_url": "data:…"}`.

Two uses. Images the provider renders (a tool message's image parts, a framework's structured
output) are downsampled to `ReduceConfig.image_max_bytes` with Pillow (the `images` extra),
keeping the block's shape (`image_replacement`, `downsample_image_blocks`). Images that reach
the model as *text* (a JSON tool output carrying base64) are useless there and costly: their
payload is replaced by a short marker naming the recall ref (`passes.image_blocks`), the rest of
the JSON stays. Every walk is linear in the value and bounded in depth.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from cachepilot.messages import ImagePart
from cachepilot.reduce.passes.payload import downsample_image
from cachepilot.reduce.stubs import image_stub
from cachepilot.refs import make_ref

__all__ = [
    "DATA_URL",
    "IMAGE_BLOCK_TYPES",
    "downsample_data_url",
    "downsample_image_blocks",
    "image_replacement",
    "map_image_payloads",
]

logger = logging.getLogger(__name__)

IMAGE_BLOCK_TYPES = frozenset({"image", "image_url", "input_image"})
"""`type` values of the content blocks that carry an image."""
DATA_URL = re.compile(r"data:(image/[A-Za-z0-9.+-]+);base64,", re.ASCII)
"""The head of a base64 image data URL (group 1: the media type)."""
_MEDIA_KEYS = ("mime_type", "mimeType", "media_type")
_MAX_DEPTH = 64

Replace = Callable[[str, str | None, bool], tuple[str, str | None] | None]
"""`(payload, media type, is a data URL) -> (new payload, new media type)`, or None to keep it."""


def _decode(payload: str, is_url: bool) -> tuple[str | None, bytes] | None:
    media: str | None = None
    data = payload
    if is_url:
        match = DATA_URL.match(payload)
        if match is None:
            return None
        media, data = match.group(1), payload[match.end() :]
    try:
        return media, base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return None


def _shrunk(raw: bytes, max_bytes: int) -> tuple[str, bytes] | None:
    try:
        return downsample_image(raw, max_bytes)
    except Exception as exc:  # corrupt image, decompression bomb, SVG, codec missing
        logger.debug("image could not be downsampled (%s)", type(exc).__name__)
        return None


def downsample_data_url(url: str, max_bytes: int) -> str | None:
    """A data URL of the image re-encoded to at most `max_bytes`, or None when the image is
    within the limit already, is not a base64 data URL, or cannot be downsampled."""
    decoded = _decode(url, True)
    if decoded is None or len(decoded[1]) <= max_bytes:
        return None
    shrunk = _shrunk(decoded[1], max_bytes)
    if shrunk is None:
        return None
    return f"data:{shrunk[0]};base64," + base64.b64encode(shrunk[1]).decode("ascii")


def image_replacement(part: ImagePart, max_bytes: int) -> str | None:
    """What an image part of a tool result becomes in the model's view.

    None when it stays as it is (a URL, or a data URL within `max_bytes`); a smaller data URL
    when Pillow can downsample it; else a text stub naming `recall(ref=…)` of the original
    data URL (archive it under `make_ref(part.url)`).
    """
    decoded = _decode(part.url, True)
    if decoded is None or len(decoded[1]) <= max_bytes:
        return None
    smaller = downsample_data_url(part.url, max_bytes)
    if smaller is not None:
        return smaller
    media = decoded[0] or part.media_type or "image"
    return image_stub(len(decoded[1]), media, max_bytes, make_ref(part.url))


def _media_of(block: Mapping[str, Any]) -> tuple[str | None, str | None]:
    for key in _MEDIA_KEYS:
        value = block.get(key)
        if isinstance(value, str):
            return key, value
    return None, None


def _replace_in_block(block: Mapping[str, Any], replace: Replace) -> dict[str, Any] | None:
    """The block with its payload replaced, or None when it carries none or keeps it."""
    source = block.get("source")
    if isinstance(source, Mapping) and isinstance(source.get("data"), str):
        media_key, media = _media_of(source)
        done = replace(source["data"], media, False)
        if done is None:
            return None
        new_source = {**source, "data": done[0]}
        if media_key is not None and done[1] is not None:
            new_source[media_key] = done[1]
        return {**block, "source": new_source}
    for key in ("data", "base64"):
        if isinstance(block.get(key), str):
            media_key, media = _media_of(block)
            done = replace(block[key], media, False)
            if done is None:
                return None
            out = {**block, key: done[0]}
            if media_key is not None and done[1] is not None:
                out[media_key] = done[1]
            return out
    for key in ("image_url", "url"):
        value = block.get(key)
        if isinstance(value, str) and value.startswith("data:"):
            done = replace(value, None, True)
            return None if done is None else {**block, key: done[0]}
        if key == "image_url" and isinstance(value, Mapping):
            url = value.get("url")
            if isinstance(url, str) and url.startswith("data:"):
                done = replace(url, None, True)
                return None if done is None else {**block, key: {**value, "url": done[0]}}
    return None


def map_image_payloads(value: Any, replace: Replace, *, _depth: int = 0) -> Any:
    """`value` with the payload of every image block passed through `replace`.

    Dicts and lists are copied only where something changed (the same object otherwise).
    """
    if _depth >= _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        if value.get("type") in IMAGE_BLOCK_TYPES:
            replaced = _replace_in_block(value, replace)
            return value if replaced is None else replaced
        changed = False
        out: dict[str, Any] = {}
        for key, item in value.items():
            new = map_image_payloads(item, replace, _depth=_depth + 1)
            changed = changed or new is not item
            out[key] = new
        return out if changed else value
    if isinstance(value, list):
        items = [map_image_payloads(item, replace, _depth=_depth + 1) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def downsample_image_blocks(value: Any, max_bytes: int) -> Any:
    """`value` (a block, a list of blocks, any JSON-like structure) with every image over
    `max_bytes` downsampled in place of the original, block shapes and media-type fields kept.
    Images that cannot be downsampled (no Pillow, undecodable) are left as they are."""

    def shrink(payload: str, media: str | None, is_url: bool) -> tuple[str, str | None] | None:
        if is_url:
            smaller = downsample_data_url(payload, max_bytes)
            return None if smaller is None else (smaller, None)
        decoded = _decode(payload, False)
        if decoded is None or len(decoded[1]) <= max_bytes:
            return None
        shrunk = _shrunk(decoded[1], max_bytes)
        if shrunk is None:
            return None
        return base64.b64encode(shrunk[1]).decode("ascii"), shrunk[0]

    return map_image_payloads(value, shrink)

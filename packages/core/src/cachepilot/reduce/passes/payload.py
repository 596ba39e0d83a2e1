"""Non-text payloads: binary stubs, image downsampling, invalid UTF-8 notes."""

from __future__ import annotations

import base64
import io
import logging

from cachepilot.reduce.normalize import decode_image
from cachepilot.reduce.passes.base import PassContext, ReductionPass
from cachepilot.reduce.stubs import binary_stub, image_stub, invalid_utf8_note

__all__ = ["BinaryPass", "ImagePass", "InvalidUtf8Pass", "downsample_image", "pillow_available"]

logger = logging.getLogger(__name__)

_MIN_SIDE = 32
_ATTEMPTS = 8


def pillow_available() -> bool:
    """True when Pillow can be imported (image downsampling is then enabled)."""
    try:
        import PIL.Image  # noqa: F401
    except ImportError:
        return False
    return True


def downsample_image(data: bytes, max_bytes: int) -> tuple[str, bytes] | None:
    """Re-encode an image to at most `max_bytes` (media type, bytes), or None.

    Needs Pillow; returns None without it, or when the image cannot be decoded or shrunk.
    Deterministic for a given Pillow build (no metadata, fixed quality steps).
    """
    try:
        from PIL import Image
    except ImportError:
        return None
    with Image.open(io.BytesIO(data)) as opened:
        opened.load()
        alpha = opened.mode in {"RGBA", "LA", "PA"} or "transparency" in opened.info
        image = opened.convert("RGBA" if alpha else "RGB")
    scale = min(1.0, (max_bytes / max(len(data), 1)) ** 0.5)
    for _ in range(_ATTEMPTS):
        size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
        if min(size) < _MIN_SIDE and scale < 1.0:
            return None
        resized = image.resize(size, Image.Resampling.LANCZOS) if scale < 1.0 else image
        buffer = io.BytesIO()
        if alpha:
            resized.save(buffer, format="PNG", optimize=True)
            media_type = "image/png"
        else:
            resized.save(buffer, format="JPEG", quality=80, optimize=True)
            media_type = "image/jpeg"
        payload = buffer.getvalue()
        if len(payload) <= max_bytes:
            return media_type, payload
        scale *= 0.7
    return None


class BinaryPass(ReductionPass):
    """Binary payloads become a stub with their size and guessed media type."""

    name = "binary"
    lossless = False
    mandatory = True
    scans = False
    kinds = frozenset({"binary"})

    def apply(self, text: str, ctx: PassContext) -> str | None:
        result = ctx.result
        return binary_stub(
            result.size, result.media_type or "application/octet-stream", ctx.shown_ref
        )


class ImagePass(ReductionPass):
    """Images over `image_max_bytes`: downsampled (a data URL) with Pillow, else a stub."""

    name = "image"
    lossless = False
    mandatory = True
    scans = False
    kinds = frozenset({"image"})

    def apply(self, text: str, ctx: PassContext) -> str | None:
        limit = ctx.config.image_max_bytes
        data = decode_image(ctx.result)
        media_type = ctx.result.media_type or "image"
        if data is not None and len(data) <= limit:
            return None
        shrunk: tuple[str, bytes] | None = None
        if data is not None:
            try:
                shrunk = downsample_image(data, limit)
            except Exception as exc:  # corrupt image, decompression bomb, codec missing
                logger.warning(
                    "image could not be downsampled (%s); replaced by a stub", type(exc).__name__
                )
        if shrunk is not None:
            return f"data:{shrunk[0]};base64," + base64.b64encode(shrunk[1]).decode("ascii")
        size = len(data) if data is not None else ctx.result.size
        return image_stub(size, media_type, limit, ctx.shown_ref)


class InvalidUtf8Pass(ReductionPass):
    """Output that was not valid UTF-8: a note saying so and naming the original bytes."""

    name = "invalid_utf8"
    lossless = True
    scans = False
    kinds = frozenset({"invalid_utf8"})

    def apply(self, text: str, ctx: PassContext) -> str | None:
        note = invalid_utf8_note(ctx.shown_ref)
        return f"{text}\n{note}" if text else note

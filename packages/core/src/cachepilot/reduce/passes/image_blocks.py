"""Image blocks inside a JSON tool output read as text: base64 payloads become markers."""

from __future__ import annotations

import json

from cachepilot.reduce.images import DATA_URL, map_image_payloads
from cachepilot.reduce.passes.base import PassContext, ReductionPass
from cachepilot.reduce.stubs import clean_label, pointer

__all__ = ["ImageBlocksPass"]

_TEXT_PAYLOAD_MIN = 1_000
"""Inside text, an image payload longer than this is replaced by a marker."""


def _marker(payload: str, media: str | None, is_url: bool, ref: str | None) -> str:
    kind = media
    if is_url:
        match = DATA_URL.match(payload)
        kind = match.group(1) if match is not None else kind
    return (
        f"[{clean_label(kind or 'image')} image, {len(payload):,} chars of base64 not shown "
        f"as text; {pointer(ref, 'full output')}]"
    )


class ImageBlocksPass(ReductionPass):
    """Image blocks inside a JSON tool output read as text: base64 payloads become markers.

    The model cannot see an image in text, only its base64; the block keeps its shape (type,
    media type) and the whole output stays recallable.
    """

    name = "image_blocks"
    lossless = False

    def apply(self, text: str, ctx: PassContext) -> str | None:
        stripped = text.lstrip()
        if not stripped.startswith(("{", "[")) or "image" not in text:
            return None
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return None
        ref = ctx.shown_ref

        def mark(payload: str, media: str | None, is_url: bool) -> tuple[str, str | None] | None:
            if len(payload) <= _TEXT_PAYLOAD_MIN:
                return None
            return _marker(payload, media, is_url, ref), None

        try:
            reduced = map_image_payloads(value, mark)
        except RecursionError:
            return None
        if reduced is value:
            return None
        return json.dumps(reduced, ensure_ascii=False)

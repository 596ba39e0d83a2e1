"""Large inline media in tool results: archived, and shown to the model as a short note.

A tool may return an image or a file as inline data (a data URL or base64); the SDK sends it in
the `function_call_output` item. Past `max_media_chars` the model reads a note naming the
archived payload instead (`recall` returns it). The archive is content-addressed, so the note
is the same on every call and in every process. URLs and file ids cost a few tokens and are
always kept; the run's own items are never changed.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from cachepilot import CachePilot

__all__ = ["MediaNotes"]

logger = logging.getLogger(__name__)

_MEMO_MAX = 4_096


def _inline(part: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, inline data) of an image / file content part carrying inline data."""
    kind = part.get("type")
    if kind == "input_image":
        url = part.get("image_url")
        if isinstance(url, str) and url.startswith("data:"):
            return "image", url
    elif kind == "input_file":
        data = part.get("file_data")
        if isinstance(data, str) and data:
            return "file", data
    return None


class MediaNotes:
    """Replaces large inline media parts of tool results with archived notes (memoised)."""

    def __init__(self, pilot: CachePilot, max_chars: int) -> None:
        self._pilot = pilot
        self._max_chars = max_chars
        self._lock = threading.Lock()
        self._memo: OrderedDict[tuple[str, str, int, int, str], str | None] = OrderedDict()

    def apply(self, items: list[Any], thread: str) -> list[Any]:
        """`items` with large inline media of tool results replaced (new dicts; never mutated).

        Returns `items` itself when nothing was replaced.
        """
        out: list[Any] = []
        changed = False
        for item in items:
            output = item.get("output") if isinstance(item, Mapping) else None
            if (
                isinstance(item, Mapping)
                and item.get("type") == "function_call_output"
                and isinstance(output, list)
                and any(isinstance(p, Mapping) and _inline(p) for p in output)
            ):
                parts = [
                    self._part(p, thread, str(item.get("call_id")), i) for i, p in enumerate(output)
                ]
                if any(a is not b for a, b in zip(parts, output, strict=True)):
                    out.append({**item, "output": parts})
                    changed = True
                    continue
            out.append(item)
        return out if changed else items

    def _part(self, part: Any, thread: str, call_id: str, index: int) -> Any:
        if not isinstance(part, Mapping):
            return part
        found = _inline(part)
        if found is None or len(found[1]) <= self._max_chars:
            return part
        kind, data = found
        key = (thread, call_id, index, len(data), data[-64:])
        with self._lock:
            ref = self._memo.get(key)
            hit = key in self._memo
        if not hit:
            ref = self._archive(thread, call_id, kind, data, part)
            with self._lock:
                self._memo[key] = ref
                while len(self._memo) > _MEMO_MAX:
                    self._memo.popitem(last=False)
        if ref is None:
            return part
        name = part.get("filename") or kind
        return {
            "type": "input_text",
            "text": (
                f"[{kind} {name!s} omitted: {len(data):,} characters of inline data; "
                f'archived as recall(ref="{ref}")]'
            ),
        }

    def _archive(
        self, thread: str, call_id: str, kind: str, data: str, part: Mapping[str, Any]
    ) -> str | None:
        try:
            ref = self._pilot.store.put(
                thread,
                data,
                meta={
                    "call_id": call_id,
                    "reason": f"{kind}-too-large",
                    "kind": kind,
                    "original_chars": len(data),
                    "filename": part.get("filename"),
                },
            )
        except Exception:
            logger.error("a large %s could not be archived; kept inline", kind)
            logger.debug("the %s not archived: call %s", kind, call_id)
            return None
        logger.info("a %s of %d chars archived (ref %s)", kind, len(data), ref)
        logger.debug("the %s archived: call %s", kind, call_id)
        return ref

    def forget(self, thread: str) -> None:
        """Drop the memo entries of `thread`."""
        with self._lock:
            for key in [k for k in self._memo if k[0] == thread]:
                del self._memo[key]

"""Reduced views of tool results: what the model reads in place of each tool's own return.

The framework keeps the plain transcript (tool outputs exactly as the tools returned them);
cachepilot changes only the model's input. Each tool result is ingested once (reduced, its
original archived when the reduction is lossy), and the same reduced text is shown on every
later call, so the cached prefix stays byte-stable.

A result is known by its *view key*: the call id plus a digest of the content. When a
redaction or guardrail rewrites a result before the model reads it, the digest changes and the
rewritten text is ingested as a new result: the text it replaced was never archived.

The text of each reduced view is kept in memory per thread and, so that a new process shows
the same bytes, in the artifact store (`kind="view"`); `PilotState.views` maps each key to the
view's ref (`""` when the model reads the result unchanged). That map wins over memory: a text
held in memory is shown only while the state names the same ref, so after a state saved by
another process is loaded, every process shows the view that state names; a view the state
does not name (made while the archive was down, or by a preparation that was rolled back) is
made again rather than kept, except while the archive is still down (it would come out the
same, at the cost of reducing the output again on every call).
"""

from __future__ import annotations

import hashlib
import logging
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cachepilot.messages import ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.reduce.images import DATA_URL

__all__ = [
    "IMAGE_KEY_PREFIX",
    "VIEW_KIND",
    "ResultViews",
    "Shrink",
    "image_key",
    "result_text",
    "view_key",
    "views_meta",
    "with_text",
]

logger = logging.getLogger(__name__)

VIEW_KIND = "view"
"""`meta["kind"]` of an archived reduced view (the text the model read, not an original)."""

Ingest = Callable[[str, str, object, str, str], str]
"""`(tool name, arguments JSON, output, call id, view key) -> model-facing text`: reduces and
archives one new result and records its view (ingestion never raises)."""

Shrink = Callable[[ImagePart, str], str | None]
"""`(image part, image key) -> replacement`: a smaller data URL, a text stub, or None to keep
the image; archives the original and records the view under the key (never raises)."""

IMAGE_KEY_PREFIX = "img:"
"""Prefix of the view key of an image part of a tool result."""


def image_key(part: ImagePart) -> str:
    """The view key of one image part: a digest of its URL."""
    digest = hashlib.sha256(part.url.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return IMAGE_KEY_PREFIX + digest


def result_text(message: Message) -> str:
    """The text a tool message carries (non-text parts are kept aside, see `with_text`)."""
    if isinstance(message.content, str):
        return message.content
    return "".join(p.text for p in message.content if isinstance(p, TextPart))


def with_text(message: Message, text: str) -> Message:
    """`message` carrying `text` (images and other non-text parts kept after it)."""
    content = message.content
    if isinstance(content, str):
        return message if text == content else replace(message, content=text)
    if text == result_text(message):
        return message
    others: list[ImagePart | ReasoningPart] = [p for p in content if not isinstance(p, TextPart)]
    if not others:
        return replace(message, content=text)
    return replace(message, content=(TextPart(text), *others))


def view_key(message: Message) -> str:
    """The view key of a tool message: a digest of its call id and its content."""
    digest = hashlib.sha256(str(message.tool_call_id).encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    if isinstance(message.content, str):
        digest.update(message.content.encode("utf-8", "surrogatepass"))
    else:
        for part in message.content:
            digest.update(part.type.encode())
            digest.update(b"\x00")
            value = part.url if isinstance(part, ImagePart) else part.text
            digest.update(value.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
    return digest.hexdigest()[:20]


class _Tracker:
    """One thread's last input and output, so that a call costs O(new messages)."""

    __slots__ = ("inputs", "lock", "outputs")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inputs: list[Message] = []
        self.outputs: list[Message] = []


class ResultViews:
    """Per-thread memory of the reduced view of each tool result (see the module docstring).

    Args:
        skip: tool names whose results are shown as they are (the recall tool's own answers,
            already capped).
    """

    def __init__(self, skip: Sequence[str] = (), max_threads: int = 1024) -> None:
        self._skip = frozenset(skip)
        self._max_threads = max_threads
        self._lock = threading.Lock()
        # Memory is a cache (the persisted map and the archive hold the views): bounded LRU.
        # Per key: (the ref the text was stored under, or None when it was not, the text).
        self._texts: OrderedDict[str, dict[str, tuple[str | None, str | None]]] = OrderedDict()
        self._trackers: OrderedDict[str, _Tracker] = OrderedDict()

    def forget(self, thread: str) -> None:
        """Drop what memory holds for `thread` (its persisted views stay)."""
        with self._lock:
            self._texts.pop(thread, None)
            self._trackers.pop(thread, None)

    def remember(self, thread: str, key: str, text: str | None, ref: str | None = "") -> None:
        """Hold the text of a view in memory (None: the result is read unchanged), with the ref
        the thread's state names for it (None: the state names none)."""
        with self._lock:
            texts = self._texts.get(thread)
            if texts is None:
                texts = self._texts[thread] = {}
                while len(self._texts) > self._max_threads:
                    self._texts.popitem(last=False)
            self._texts.move_to_end(thread)
            texts[key] = (ref, text)

    def held(self, thread: str, key: str, ref: str | None = "") -> tuple[bool, str | None]:
        """(found, text) of a view held in memory under `ref` (the ref the thread's state
        names for the key, None: none); text None means "unchanged". A text held under
        another ref is not found: the state's view wins."""
        with self._lock:
            texts = self._texts.get(thread)
            if texts is None or key not in texts:
                return False, None
            held_ref, text = texts[key]
            if held_ref != ref:
                return False, None
            return True, text

    def apply(
        self,
        thread: str,
        messages: Sequence[Message],
        views: dict[str, str],
        *,
        ingest: Ingest,
        load: Callable[[str], str | None],
        shrink: Shrink | None = None,
        native: Container[str] = frozenset(),
        calls: Mapping[str, ToolCall] | None = None,
        archive_down: Callable[[], bool] | None = None,
    ) -> list[Message]:
        """`messages` with every tool result shown as its reduced view.

        Args:
            thread: the scope.
            messages: the plain transcript (never mutated; unchanged messages are returned as
                the same objects).
            views: the thread's persisted key -> view ref map (`PilotState.views`); new
                results are added to it.
            ingest: reduces and archives one new result (see `Ingest`); returns the text.
            load: the text of a persisted view by its ref (None when the archive lost it).
            shrink: what an image part of a result becomes (downsampled, a stub, or kept);
                None keeps every image.
            native: call ids of results that a native context manager (the provider's or
                the framework's own) already replaced by its placeholder: shown as they are
                and never ingested, so a placeholder is never archived as a tool output.
            calls: calls that `messages` do not hold, by id (what a result answering one
                of them is reduced as); a call in `messages` wins.
            archive_down: whether the archive is still failing: a view made while it was,
                which the state does not name, is shown again as it was (None: never).
        """
        with self._lock:
            tracker = self._trackers.get(thread)
            if tracker is None:
                tracker = self._trackers[thread] = _Tracker()
                while len(self._trackers) > self._max_threads:
                    self._trackers.popitem(last=False)
            self._trackers.move_to_end(thread)
        with tracker.lock:  # one thread of conversation at a time: each result ingested once
            known = len(tracker.inputs)
            extends = known <= len(messages) and all(map(operator.is_, tracker.inputs, messages))
            if not extends:
                known = 0
                tracker.inputs, tracker.outputs = [], []
            tail = messages[known:]
            found = _calls_by_id(messages if known == 0 else tail, tracker.inputs)
            calls = {**calls, **found} if calls else found
            down = archive_down is not None and archive_down()
            out = [
                self._view(
                    thread, m, calls, views, ingest=ingest, load=load, shrink=shrink, down=down
                )
                if m.role == "tool" and str(m.tool_call_id) not in native
                else m
                for m in tail
            ]
            tracker.inputs.extend(tail)
            tracker.outputs.extend(out)
            return list(tracker.outputs)

    def _view(
        self,
        thread: str,
        /,
        message: Message,
        calls: Mapping[str, ToolCall],
        views: dict[str, str],
        *,
        ingest: Ingest,
        load: Callable[[str], str | None],
        shrink: Shrink | None = None,
        down: bool = False,
    ) -> Message:
        call = calls.get(str(message.tool_call_id))
        name = call.name if call is not None else (message.name or "")
        if name in self._skip:
            return message
        if not isinstance(message.content, str) and not any(
            isinstance(p, TextPart) for p in message.content
        ):
            return message  # images or files only: nothing to reduce, no text to add
        key = view_key(message)
        ref = views.get(key)  # the state's view wins over what memory holds
        found, text = self.held(thread, key, ref) if ref is not None or down else (False, None)
        if not found and ref is not None:
            text = load(ref) if ref else None
            found = text is not None or not ref
            if not found:
                logger.info("a reduced view is no longer archived; reducing it again")
        if not found:
            original = result_text(message)
            arguments = call.arguments if call is not None else "{}"
            reduced = ingest(name, arguments, original, str(message.tool_call_id), key)
            text = None if reduced == original else reduced
            ref = views.get(key)
        self.remember(thread, key, text, ref)
        out = message if text is None else with_text(message, text)
        if shrink is None or isinstance(out.content, str):
            return out
        parts = tuple(
            self._image(thread, p, views, shrink=shrink, load=load)
            if isinstance(p, ImagePart)
            else p
            for p in out.content
        )
        if all(a is b for a, b in zip(parts, out.content, strict=True)):
            return out
        return replace(out, content=parts)

    def _image(
        self,
        thread: str,
        part: ImagePart,
        views: dict[str, str],
        *,
        shrink: Shrink,
        load: Callable[[str], str | None],
    ) -> ImagePart | TextPart:
        """One image part as the model reads it (the same bytes on every call and process)."""
        key = image_key(part)
        ref = views.get(key)
        found, text = self.held(thread, key, ref) if ref is not None else (False, None)
        if not found and ref is not None:
            text = load(ref) if ref else None
            found = text is not None or not ref
        if not found:
            text = shrink(part, key)
            ref = views.get(key)
        self.remember(thread, key, text, ref)
        if text is None:
            return part
        match = DATA_URL.match(text)
        if match is None:
            return TextPart(text)
        return ImagePart(url=text, media_type=match.group(1), detail=part.detail)


def _calls_by_id(messages: Sequence[Message], earlier: Sequence[Message]) -> dict[str, ToolCall]:
    """The tool calls answered by the tool results in `messages`, by id.

    Results answer calls of the same or earlier assistant messages; `earlier` is searched
    from its end only for ids not found in `messages` (normally the last turn or two).
    """
    found: dict[str, ToolCall] = {}
    wanted: set[str] = set()
    for message in messages:
        if message.role == "assistant":
            for call in message.tool_calls:
                found[call.id] = call
        elif message.role == "tool" and message.tool_call_id not in found:
            wanted.add(str(message.tool_call_id))
    wanted -= found.keys()
    for message in reversed(earlier):
        if not wanted:
            break
        for call in message.tool_calls:
            if call.id in wanted:
                found[call.id] = call
                wanted.discard(call.id)
    return found


def views_meta(key: str, original_ref: str | None, call_id: str) -> dict[str, Any]:
    """Metadata of an archived view."""
    return {"kind": VIEW_KIND, "view_key": key, "of": original_ref, "call_id": call_id}

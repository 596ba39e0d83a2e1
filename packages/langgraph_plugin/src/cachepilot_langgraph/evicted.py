"""Tool outputs a host moved to its virtual filesystem, read as cachepilot's view of them.

deepagents' `FilesystemMiddleware` replaces every tool output over its eviction limit by a
short preview and writes the output to `/large_tool_results/<call id>` (in graph state under
`"files"` with its default `StateBackend`). The preview keeps a few head and tail lines, so
the line that matters (an error in the middle of a build log) is gone from the model's view.

`EvictedViews` finds such results in a model call (a tool message naming the file of its own
call id, which holds the text) and shows the model cachepilot's reduction of that text
instead of the preview: the original is ingested like any result (the reduced view names
its ref, `recall` finds the line), and the host's line naming the file stays first, so the
model can still read the file with the host's own tools (DESIGN §2.7). Graph state, the
preview and the file stay as the host made them. Only what the host itself stored in the
file is read or archived, so a result a middleware rewrote before the host evicted it stays
rewritten.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from cachepilot import CachePilot
from cachepilot.messages import Message
from cachepilot.reduce.handles import HANDLE_LINE_CHARS
from cachepilot.reduce.views import result_text, view_key
from cachepilot.support.log_labels import thread_label

__all__ = ["EVICTED_DIR", "EvictedViews", "evicted_file_name"]

logger = logging.getLogger(__name__)

EVICTED_DIR = "large_tool_results"
"""Folder deepagents writes evicted tool outputs to (under its artifacts root)."""

_ALIAS = "evicted:"
"""Prefix of the `PilotState.views` alias of an evicted result (call id -> view key)."""

_MAX_NAME_BYTES = 128


def evicted_file_name(call_id: str) -> str:
    """The file name deepagents gives the evicted output of `call_id`."""
    name = call_id.replace(".", "_").replace("/", "_").replace("\\", "_")
    if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        return f"call-{hashlib.sha256(call_id.encode('utf-8')).hexdigest()}"
    return name


def _evicted_index(files: Mapping[object, object]) -> dict[str, str]:
    """File name -> path of the files in an eviction folder."""
    index: dict[str, str] = {}
    for path in files:
        if not isinstance(path, str):
            continue
        folder, _, name = path.rpartition("/")
        if name and folder.endswith("/" + EVICTED_DIR):
            index[name] = path
    return index


def _text_of(data: object) -> str | None:
    if not isinstance(data, Mapping) or data.get("encoding", "utf-8") != "utf-8":
        return None
    content = data.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(line, str) for line in content):
        return "\n".join(content)  # older deepagents kept a list of lines
    return None


class EvictedViews:
    """Per-middleware memory of the views shown for evicted results (see the module doc).

    Args:
        max_entries: how many shown views stay in memory (the pilot's state and archive
            keep them all).
    """

    def __init__(self, max_entries: int = 4_096) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._lock = threading.Lock()
        self._shown: OrderedDict[tuple[str, str], tuple[Message, Message]] = OrderedDict()
        self._max = max_entries

    def apply(
        self,
        pilot: CachePilot,
        thread: str,
        core: Sequence[Message],
        state: Mapping[str, object],
    ) -> tuple[list[Message], frozenset[str]]:
        """`core` with each evicted result carrying its view, and their call ids (shown as
        they are by `reduce_results`). Unchanged when the state holds no evicted files."""
        files = state.get("files")
        if not isinstance(files, Mapping) or not files:
            return list(core), frozenset()
        index: dict[str, str] | None = None
        out: list[Message] | None = None
        ids: set[str] = set()
        for position, message in enumerate(core):
            call_id = message.tool_call_id
            if message.role != "tool" or not call_id:
                continue
            shown = self._held(thread, call_id, message)
            if shown is None:
                if index is None:
                    index = _evicted_index(files)
                    if not index:
                        return list(core), frozenset()
                path = index.get(evicted_file_name(call_id))
                if path is None or path not in result_text(message):
                    continue
                shown = self._view(
                    pilot, thread, core, message, _text_of(files.get(path)), path=path
                )
                if shown is None:
                    continue
            if out is None:
                out = list(core)
            out[position] = shown
            ids.add(call_id)
        return (list(core) if out is None else out), frozenset(ids)

    def _held(self, thread: str, call_id: str, message: Message) -> Message | None:
        with self._lock:
            hit = self._shown.get((thread, call_id))
            if hit is None or hit[0] is not message:
                return None
            self._shown.move_to_end((thread, call_id))
            return hit[1]

    def _view(
        self,
        pilot: CachePilot,
        thread: str,
        core: Sequence[Message],
        message: Message,
        original: str | None,
        *,
        path: str,
    ) -> Message | None:
        """`message` carrying the view of `original` (ingested on first sight), after the
        host's line naming `path`: the model can still read the file the host points to."""
        if original is None:
            return None
        call_id = str(message.tool_call_id)
        name, arguments = _call_of(core, call_id)
        try:
            known = pilot.view_of(thread, _ALIAS + call_id)
            key = view_key(Message(role="tool", content=original, tool_call_id=call_id))
            if known is None or known[0] != key:
                alias = _ALIAS + call_id
                pilot.ingest_view(name, arguments, original, call_id, thread, alias=alias)
                known = pilot.view_of(thread, _ALIAS + call_id)
            if known is None:
                return None
            ref = known[1]
            if not ref:
                text = original  # the reduction kept it whole
            else:
                found = pilot.store.get(thread, ref)
                if found is None:
                    return None
                text = found.text
        except Exception:  # the preview is still a valid view
            logger.warning(
                "thread %s: no view of an evicted call; the model reads the preview",
                thread_label(thread),
                exc_info=True,
            )
            logger.debug("the evicted call without a view: %s", call_id)
            return None
        preview = result_text(message)
        if len(text) >= len(preview) and not ref:
            return None  # never show more than the preview for nothing
        shown = replace(message, content=f"{_pointer(preview, path)}\n{text}")
        with self._lock:
            self._shown[(thread, call_id)] = (message, shown)
            while len(self._shown) > self._max:
                self._shown.popitem(last=False)
        return shown


def _pointer(preview: str, path: str) -> str:
    """The host's line of `preview` that names `path` (its own handle on the full output),
    or a short one naming it when that line is too long to repeat."""
    for line in preview.splitlines():
        if path in line:
            stripped = line.strip()
            if len(stripped) <= HANDLE_LINE_CHARS:
                return stripped
            break
    return f"[the host saved the full output at {path}]"


def _call_of(core: Sequence[Message], call_id: str) -> tuple[str, str]:
    """(tool name, arguments JSON) of the call `call_id` answers ("" when not found)."""
    for message in reversed(core):
        for call in message.tool_calls:
            if call.id == call_id:
                return call.name, call.arguments
    return "", ""

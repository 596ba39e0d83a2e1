"""The recall tool, framework-neutral: fetch an archived original, or a slice of it.

`recall` never raises on model input: an unknown ref, a malformed line range or an invalid regex
become a helpful message in `RecallResult.render()`. Slices are exact substrings of the original
(recalled content is never reduced again, only capped by `max_chars`), so following the
continuation hints reconstructs the original exactly.

Every argument comes from the model and is bounded: a grep pattern is at most
`MAX_GREP_CHARS` characters, its matching runs with the `regex` engine under a total budget of
`GREP_TIME_LIMIT` seconds per recall with the interpreter lock released (a catastrophic pattern
such as ``(a|aa)+$`` falls back to a literal search and says so, other threads and the event
loop keep running), and what the header echoes of a pattern or range is clipped.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from cachepilot.artifacts.base import Artifact, ArtifactInfo, ArtifactStore, check_thread
from cachepilot.recall.grep import GREP_TIME_LIMIT, MAX_GREP_CHARS
from cachepilot.recall.result import DEFAULT_MAX_CHARS, RECALL_TOOL_NAME, RecallResult
from cachepilot.recall.slicing import slice_artifact
from cachepilot.refs import validate_ref

__all__ = [
    "DEFAULT_MAX_CHARS",
    "GREP_TIME_LIMIT",
    "MAX_GREP_CHARS",
    "RECALL_TOOL_DESCRIPTION",
    "RECALL_TOOL_NAME",
    "RECALL_TOOL_PARAMETERS",
    "RECALL_TOOL_SCHEMA",
    "RecallResult",
    "arecall",
    "recall",
]

logger = logging.getLogger(__name__)


# Sent with every request, so kept to its least (89 tokens as canonical JSON) and byte-stable:
# every shortened output names its own recall call and every long answer its continuation, so
# the schema only has to say what the arguments are.
RECALL_TOOL_DESCRIPTION: Final = (
    "Read the original of a shortened tool output by its ref; "
    'lines ("120-180") or grep (regex) select part.'
)


RECALL_TOOL_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "ref": {"type": "string"},
        "lines": {"type": "string"},
        "grep": {"type": "string"},
        "max_chars": {"type": "integer"},
    },
    "required": ["ref"],
    "additionalProperties": False,
}


RECALL_TOOL_SCHEMA: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL_NAME,
        "description": RECALL_TOOL_DESCRIPTION,
        "parameters": RECALL_TOOL_PARAMETERS,
    },
}
"""OpenAI function-tool schema (Chat Completions shape). Part of the cached prefix: never
mutate it; copy (`json.loads(json.dumps(...))`) before changing anything."""


_RECENT_REFS = 5

_OFFLOAD_BYTES = 1 << 20  # arecall slices artifacts larger than this in a worker thread


def recall(  # noqa: PLR0917 - mirrors the tool's arguments
    store: ArtifactStore,
    thread: str,
    ref: object,
    lines: object = None,
    grep: object = None,
    max_chars: object = DEFAULT_MAX_CHARS,
    *,
    on_access: Callable[[Artifact], object] | None = None,
    max_chars_cap: int | None = None,
) -> RecallResult:
    """Fetch an archived original (or a slice of it) from `store`.

    Model-supplied arguments are taken leniently and never raise: problems become a message in
    the result. A successful lookup counts an access (`store.record_access`) and calls
    `on_access(artifact)`.

    Args:
        store: The artifact store.
        thread: The conversation the call belongs to (refs of other threads are not found).
        ref: The ref the model passed.
        lines: Line range, e.g. "120-180", "120-", "-50", "42", or a continuation "7:20001-9".
        grep: Regular expression selecting lines (a literal substring when it does not compile).
        max_chars: Characters to return at most (a positive int; default 20,000).
        on_access: Called with the artifact after a successful lookup (feeds the recall gate).
        max_chars_cap: Upper bound the caller imposes on the model's `max_chars`.

    Raises:
        ValueError: for an empty or non-str thread id (misuse by the caller, not the model).
    """
    check_thread(thread)
    key, shown_ref = _normalize(ref)
    if key is None:
        return _not_found(shown_ref, _recent(_safe_list(store, thread)))
    try:
        artifact = store.get(thread, key)
    except Exception as exc:
        logger.warning("recall %s: the artifact store failed: %r", key, exc, exc_info=True)
        return _store_failed(key, exc)
    if artifact is None:
        removed = _removed(store, thread, key)
        if removed is not None:
            return RecallResult(ref=key, found=False, removed=removed)
        return _not_found(key, _recent(_safe_list(store, thread)))
    try:
        store.record_access(thread, key)
    except Exception as exc:
        logger.warning("recall %s: could not record the access: %r", key, exc)
    _notify(on_access, artifact)
    return slice_artifact(artifact, lines, grep, max_chars, max_chars_cap)


async def arecall(  # noqa: PLR0917 - mirrors the tool's arguments
    store: ArtifactStore,
    thread: str,
    ref: object,
    lines: object = None,
    grep: object = None,
    max_chars: object = DEFAULT_MAX_CHARS,
    *,
    on_access: Callable[[Artifact], object] | None = None,
    max_chars_cap: int | None = None,
) -> RecallResult:
    """Async twin of `recall` (`on_access` may be a coroutine function)."""
    check_thread(thread)
    key, shown_ref = _normalize(ref)
    if key is None:
        return _not_found(shown_ref, _recent(await _asafe_list(store, thread)))
    try:
        artifact = await store.aget(thread, key)
    except Exception as exc:
        logger.warning("recall %s: the artifact store failed: %r", key, exc, exc_info=True)
        return _store_failed(key, exc)
    if artifact is None:
        removed = await _aremoved(store, thread, key)
        if removed is not None:
            return RecallResult(ref=key, found=False, removed=removed)
        return _not_found(key, _recent(await _asafe_list(store, thread)))
    try:
        await store.arecord_access(thread, key)
    except Exception as exc:
        logger.warning("recall %s: could not record the access: %r", key, exc)
    outcome = _notify(on_access, artifact)
    if inspect.isawaitable(outcome):
        try:
            await outcome
        except Exception:
            logger.exception("recall %s: on_access callback failed", key)
    if artifact.size > _OFFLOAD_BYTES or (grep is not None and grep != ""):
        # A grep may run up to GREP_TIME_LIMIT: never on the event loop.
        return await asyncio.to_thread(
            slice_artifact, artifact, lines, grep, max_chars, max_chars_cap
        )
    return slice_artifact(artifact, lines, grep, max_chars, max_chars_cap)


def _normalize(ref: object) -> tuple[str | None, str]:
    try:
        key = validate_ref(ref)
    except ValueError:
        shown = ref if isinstance(ref, str) else repr(ref)
        return None, shown[:80]
    return key, key


def _notify(on_access: Callable[[Artifact], object] | None, artifact: Artifact) -> object:
    if on_access is None:
        return None
    try:
        return on_access(artifact)
    except Exception:
        logger.exception("recall %s: on_access callback failed", artifact.ref)
        return None


def _removed(store: ArtifactStore, thread: str, ref: str) -> str | None:
    """Why the store no longer holds `ref` (stores without the `removed` method: None)."""
    method = getattr(store, "removed", None)
    if not callable(method):
        return None
    try:
        reason = method(thread, ref)
    except Exception as exc:
        logger.warning("recall: could not ask why %s is gone: %r", ref, exc)
        return None
    return reason if isinstance(reason, str) else None


async def _aremoved(store: ArtifactStore, thread: str, ref: str) -> str | None:
    method = getattr(store, "aremoved", None)
    if not callable(method):
        return None
    try:
        reason = await method(thread, ref)
    except Exception as exc:
        logger.warning("recall: could not ask why %s is gone: %r", ref, exc)
        return None
    return reason if isinstance(reason, str) else None


def _safe_list(store: ArtifactStore, thread: str) -> list[ArtifactInfo]:
    try:
        return store.list(thread)
    except Exception as exc:
        logger.warning("recall: could not list artifacts: %r", exc)
        return []


async def _asafe_list(store: ArtifactStore, thread: str) -> list[ArtifactInfo]:
    try:
        return await store.alist(thread)
    except Exception as exc:
        logger.warning("recall: could not list artifacts: %r", exc)
        return []


def _recent(infos: Sequence[ArtifactInfo]) -> tuple[tuple[str, str | None], ...]:
    ordered = sorted(infos, key=lambda info: info.created_at)  # stable: keeps store order
    return tuple((info.ref, info.tool) for info in reversed(ordered[-_RECENT_REFS:]))


def _not_found(ref: str, recent: tuple[tuple[str, str | None], ...]) -> RecallResult:
    return RecallResult(ref=ref, found=False, recent=recent)


def _store_failed(ref: str, exc: Exception) -> RecallResult:
    return RecallResult(
        ref=ref,
        found=False,
        message=f"The archive could not be read just now ({type(exc).__name__}); try again.",
    )

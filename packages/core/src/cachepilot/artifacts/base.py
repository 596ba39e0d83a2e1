"""Artifact model, the `ArtifactStore` protocol and helpers shared by the stores."""

from __future__ import annotations

import abc
import asyncio
import builtins
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable

from cachepilot.refs import REF_LENGTH, content_digest, is_ref, validate_ref

__all__ = [
    "DEFAULT_MAX_BYTES_PER_THREAD",
    "DEFAULT_MAX_TOTAL_BYTES",
    "DEFAULT_RETENTION_SECONDS",
    "REMOVED_BY_RETENTION",
    "REMOVED_BY_SIZE",
    "Artifact",
    "ArtifactInfo",
    "ArtifactStore",
    "BaseArtifactStore",
    "Clock",
    "StoreLimits",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

Clock = Callable[[], float]
"""Returns the current time in seconds (like `time.time`)."""

DEFAULT_RETENTION_SECONDS: float = 7 * 24 * 3600
"""Artifacts not accessed for this long are removed by `prune` (7 days)."""
DEFAULT_MAX_BYTES_PER_THREAD: int = 256 * 1024 * 1024
"""Per-thread size cap (256 MiB); least-recently-accessed artifacts are evicted first."""
DEFAULT_MAX_TOTAL_BYTES: int = 2 * 1024 * 1024 * 1024
"""Whole-store size cap (2 GiB); least-recently-accessed artifacts are evicted first."""

REMOVED_BY_RETENTION = "retention period"
"""`removed` reason: the artifact was not accessed for longer than the retention."""
REMOVED_BY_SIZE = "size limit"
"""`removed` reason: evicted (least recently used) to respect a size cap."""
REMOVED_BY_FORGET = "owner's request to forget the conversation"
"""`removed` reason: the whole thread was forgotten (`forget_thread`, `CachePilot.forget`)."""
FORGOTTEN_MARK = "*"
"""The tombstone ref that stands for every ref of a forgotten thread."""
TOMBSTONE_SECONDS: float = 30 * 24 * 3600
"""How long a store remembers why an artifact is gone (at least the retention)."""

TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
BINARY_MEDIA_TYPE = "application/octet-stream"
AUTO_PRUNE_INTERVAL_SECONDS = 600.0
"""Retention runs on `put` at most this often (by the store's clock)."""

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"\x1f\x8b", "application/gzip"),
    (b"PK\x03\x04", "application/zip"),
)


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """Metadata of an archived payload (everything but the bytes).

    Attributes:
        ref: Short content-addressed id (see `cachepilot.refs`).
        thread: The namespace (conversation / thread id) it belongs to.
        is_text: The original payload was a `str`.
        media_type: MIME type (given at `put`, or guessed).
        meta: JSON-able metadata of the first `put` (tool, args, call id, sizes, reason...).
        created_at: Clock time of the first `put`.
        last_access: Clock time of the latest `put` or recorded access.
        access_count: How often the artifact was recalled (`record_access`).
        size: Size of the stored bytes.
        sha256: Full sha256 hex digest of the stored bytes.
    """

    ref: str
    thread: str
    is_text: bool
    media_type: str
    meta: dict[str, Any]
    created_at: float
    last_access: float
    access_count: int
    size: int
    sha256: str

    @property
    def tool(self) -> str | None:
        """The tool name recorded in `meta["tool"]`, when there is one."""
        value = self.meta.get("tool")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Artifact(ArtifactInfo):
    """An archived payload: its metadata plus the exact original bytes.

    Attributes:
        data: The exact original bytes (a `str` payload is stored UTF-8 encoded with
            ``surrogatepass``, so lone surrogates survive).
    """

    data: bytes

    @property
    def text(self) -> str:
        """The payload as text.

        For a text artifact this is the exact original `str`. For a binary one it is the bytes
        decoded with ``surrogateescape``: ``text.encode("utf-8", "surrogateescape") == data``.
        """
        if self.is_text:
            return self.data.decode("utf-8", "surrogatepass")
        return self.data.decode("utf-8", "surrogateescape")

    def info(self) -> ArtifactInfo:
        """The metadata without the bytes."""
        return ArtifactInfo(**{**_info_fields(self), "meta": dict(self.meta)})


def _info_fields(info: ArtifactInfo) -> dict[str, Any]:
    return {field.name: getattr(info, field.name) for field in fields(ArtifactInfo)}


def artifact_from(info: ArtifactInfo, data: bytes) -> Artifact:
    """The artifact made of `info` and its bytes."""
    return Artifact(**_info_fields(info), data=data)


@runtime_checkable
class ArtifactStore(Protocol):
    """Archive of original payloads, namespaced per thread.

    A ref is only visible in the thread it was put in: `get` of a ref from another thread returns
    None. `put` is idempotent by content within a thread. Every method has an async twin.
    """

    def put(
        self,
        thread: str,
        payload: str | bytes,
        *,
        meta: Mapping[str, Any] | None = None,
        media_type: str | None = None,
    ) -> str:
        """Archive `payload` in `thread` and return its ref."""
        ...

    def get(self, thread: str, ref: str) -> Artifact | None:
        """The artifact, or None for an unknown, malformed or foreign ref."""
        ...

    def record_access(self, thread: str, ref: str) -> bool:
        """Count one access (a recall); True when the artifact exists."""
        ...

    def list(self, thread: str) -> builtins.list[ArtifactInfo]:
        """Metadata of the thread's artifacts, oldest first."""
        ...

    def delete(self, thread: str, ref: str) -> bool:
        """Remove one artifact; True when it existed."""
        ...

    def delete_thread(self, thread: str) -> int:
        """Remove all artifacts of a thread; returns how many."""
        ...

    def prune(self, now: float | None = None) -> int:
        """Apply retention and size caps; returns how many artifacts were removed."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...

    async def aput(
        self,
        thread: str,
        payload: str | bytes,
        *,
        meta: Mapping[str, Any] | None = None,
        media_type: str | None = None,
    ) -> str:
        """Async `put`."""
        ...

    async def aget(self, thread: str, ref: str) -> Artifact | None:
        """Async `get`."""
        ...

    async def arecord_access(self, thread: str, ref: str) -> bool:
        """Async `record_access`."""
        ...

    async def alist(self, thread: str) -> builtins.list[ArtifactInfo]:
        """Async `list`."""
        ...

    async def adelete(self, thread: str, ref: str) -> bool:
        """Async `delete`."""
        ...

    async def adelete_thread(self, thread: str) -> int:
        """Async `delete_thread`."""
        ...

    async def aprune(self, now: float | None = None) -> int:
        """Async `prune`."""
        ...


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """Validated retention and size caps (None disables one).

    Raises:
        ValueError: for a non-positive or non-numeric value.
    """

    retention_seconds: float | None = DEFAULT_RETENTION_SECONDS
    max_bytes_per_thread: int | None = DEFAULT_MAX_BYTES_PER_THREAD
    max_total_bytes: int | None = DEFAULT_MAX_TOTAL_BYTES

    def __post_init__(self) -> None:
        retention = self.retention_seconds
        if retention is not None:
            if (
                isinstance(retention, bool)
                or not isinstance(retention, int | float)
                or math.isnan(retention)
                or retention <= 0
            ):
                raise ValueError(
                    f"retention_seconds must be a positive number of seconds or None, "
                    f"got {retention!r}"
                )
            if math.isinf(retention):
                object.__setattr__(self, "retention_seconds", None)
        for name in ("max_bytes_per_thread", "max_total_bytes"):
            cap = getattr(self, name)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
                raise ValueError(f"{name} must be a positive int (bytes) or None, got {cap!r}")


def check_thread(thread: object) -> str:
    """Return `thread` when it is a usable thread id.

    Raises:
        ValueError: for a non-str, empty, or non-UTF-8-encodable thread id.
    """
    if not isinstance(thread, str) or not thread:
        raise ValueError(f"thread must be a non-empty str, got {thread!r}")
    try:
        thread.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"thread id must be encodable as UTF-8 (no lone surrogates), got {thread!r}"
        ) from None
    return thread


def normalize_ref(ref: object) -> str | None:
    """The canonical form of `ref`, or None when it is malformed."""
    if isinstance(ref, str) and is_ref(ref):
        return ref
    try:
        return validate_ref(ref)
    except ValueError:
        return None


def check_clock(clock: object) -> Clock:
    """Return `clock` when callable.

    Raises:
        ValueError: when it is not callable.
    """
    if not callable(clock):
        raise ValueError(f"clock must be a callable returning seconds, got {clock!r}")
    return clock


@dataclass(frozen=True, slots=True)
class Encoded:
    """A payload ready to store."""

    ref: str
    sha256: str
    data: bytes
    is_text: bool
    media_type: str
    meta_json: str


def encode_payload(payload: object, meta: object = None, media_type: object = None) -> Encoded:
    """Validate and encode a `put` call's arguments.

    Raises:
        ValueError: for a payload that is not str or bytes-like, meta that is not a mapping, or
            a media type that is not a non-empty str.
    """
    if isinstance(payload, str):
        data = payload.encode("utf-8", "surrogatepass")
        is_text = True
    elif isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
        is_text = False
    else:
        raise ValueError(f"payload must be str or bytes, got {type(payload).__name__}")
    if meta is not None and not isinstance(meta, Mapping):
        raise ValueError(f"meta must be a mapping or None, got {type(meta).__name__}")
    if media_type is None:
        media_type = TEXT_MEDIA_TYPE if is_text else guess_media_type(data)
    elif not isinstance(media_type, str) or not media_type.strip():
        raise ValueError(f"media_type must be a non-empty str or None, got {media_type!r}")
    digest = content_digest(data)
    return Encoded(
        ref=digest[:REF_LENGTH],
        sha256=digest,
        data=data,
        is_text=is_text,
        media_type=media_type.strip(),
        meta_json=dump_meta(meta),
    )


def guess_media_type(data: bytes) -> str:
    """A MIME type for raw bytes from magic numbers (text/plain when they are valid UTF-8)."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return BINARY_MEDIA_TYPE
    return TEXT_MEDIA_TYPE


def _jsonable(value: object, depth: int = 0) -> Any:
    if depth > 50:
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [_jsonable(item, depth + 1) for item in items]
    return repr(value)


def dump_meta(meta: Mapping[str, Any] | object | None) -> str:
    """Serialize metadata as canonical JSON (non-JSON values become their repr)."""
    if meta is None:
        return "{}"
    return json.dumps(_jsonable(meta), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def load_meta(text: str) -> dict[str, Any]:
    """Parse metadata stored by `dump_meta` (an empty dict when it is unreadable)."""
    try:
        value = json.loads(text)
    except ValueError:
        logger.warning("unreadable artifact metadata; using {}")
        return {}
    return value if isinstance(value, dict) else {}


def now_from(clock: Clock, now: float | None) -> float:
    """`now` when given, else the clock's time."""
    return float(clock() if now is None else now)


def check_same_content(enc: Encoded, sha256: str) -> None:
    """Check that an artifact already stored under `enc.ref` holds the same bytes.

    Raises:
        RuntimeError: when its digest differs (two payloads share a ref in one thread).
    """
    if sha256 != enc.sha256:
        raise RuntimeError(f"artifact ref collision in one thread: {enc.ref}")


class BaseArtifactStore(abc.ABC):
    """Base class for stores: argument checks, bookkeeping and the async twins live here.

    Subclasses call `_init_store` from their constructor and implement the storage hooks
    (`_insert`, `_fetch`, `_count_access`, `_list_thread`, `_delete_one`, `_delete_all`) and
    `prune`; the hooks get a checked thread id and a canonical ref. Stores whose methods block
    on I/O set `offload_async = True` so the twins run them in a worker thread
    (`asyncio.to_thread`); in-memory stores call them directly. Stores are context managers
    (`close` on exit).
    """

    offload_async: ClassVar[bool] = False
    _logger: ClassVar[logging.Logger] = logger
    """Where `put` logs (each store names its own module's logger)."""

    limits: StoreLimits
    _clock: Clock
    _next_auto_prune: float

    def _init_store(
        self,
        retention_seconds: float | None,
        max_bytes_per_thread: int | None,
        max_total_bytes: int | None,
        clock: Clock,
    ) -> None:
        """Validate and set the limits and the clock; no automatic retention run is due yet.

        Raises:
            ValueError: for a non-positive retention or cap, or a non-callable clock.
        """
        self.limits = StoreLimits(retention_seconds, max_bytes_per_thread, max_total_bytes)
        self._clock = check_clock(clock)
        self._next_auto_prune = 0.0

    def _auto_prune_due(self, now: float) -> bool:
        """True (and the next run scheduled) when `put` should apply retention at `now`."""
        if not now >= self._next_auto_prune:  # (a NaN clock never prunes)
            return False
        self._next_auto_prune = now + AUTO_PRUNE_INTERVAL_SECONDS
        return True

    def put(
        self,
        thread: str,
        payload: str | bytes,
        *,
        meta: Mapping[str, Any] | None = None,
        media_type: str | None = None,
    ) -> str:
        """Archive `payload` in `thread` and return its ref.

        Idempotent by content within a thread: the same payload gives the same ref, keeps the
        first put's metadata and refreshes `last_access`. May evict least-recently-accessed
        artifacts to respect the caps (never the one just put).

        Raises:
            ValueError: for an empty thread id, a non-str/bytes payload or non-mapping meta.
        """
        check_thread(thread)
        enc = encode_payload(payload, meta, media_type)
        evicted = self._insert(thread, enc, now_from(self._clock, None))
        if evicted is not None:
            self._logger.debug(
                "archived artifact %s (%d bytes), evicted %d", enc.ref, len(enc.data), evicted
            )
        return enc.ref

    def get(self, thread: str, ref: str) -> Artifact | None:
        """The artifact, or None for an unknown, malformed or foreign ref (read-only)."""
        key = self._key(thread, ref)
        return None if key is None else self._fetch(thread, key)

    def record_access(self, thread: str, ref: str) -> bool:
        """Count one access (a recall) and refresh `last_access`; True when it exists."""
        key = self._key(thread, ref)
        if key is None:
            return False
        return self._count_access(thread, key, now_from(self._clock, None))

    def list(self, thread: str) -> builtins.list[ArtifactInfo]:
        """Metadata of the thread's artifacts, oldest first."""
        return self._list_thread(check_thread(thread))

    def delete(self, thread: str, ref: str) -> bool:
        """Remove one artifact; True when it existed."""
        key = self._key(thread, ref)
        return False if key is None else self._delete_one(thread, key)

    def removed(self, thread: str, ref: str) -> str | None:
        """Why an artifact the thread once held is gone (`REMOVED_BY_RETENTION` or
        `REMOVED_BY_SIZE`), or None when it was never held here, was deleted on purpose, or
        is too old to be remembered (`TOMBSTONE_SECONDS`)."""
        key = self._key(thread, ref)
        return None if key is None else self._removed_reason(thread, key)

    def _removed_reason(self, thread: str, ref: str) -> str | None:
        """Hook of `removed`: stores that remember evictions override it."""
        return None

    def delete_thread(self, thread: str) -> int:
        """Remove all artifacts of a thread; returns how many."""
        return self._delete_all(check_thread(thread))

    def forget_thread(self, thread: str) -> int:
        """Remove all artifacts of a thread and remember only that it was forgotten (no ref,
        no content), so a later recall of one of its refs says it was removed; returns how
        many artifacts were removed."""
        count = self._delete_all(check_thread(thread))
        self._mark_forgotten(thread)
        return count

    def _mark_forgotten(self, thread: str) -> None:
        """Hook of `forget_thread`: stores that remember removals override it."""
        return None

    @abc.abstractmethod
    def prune(self, now: float | None = None) -> int:
        """Apply retention and size caps; returns how many artifacts were removed."""

    @staticmethod
    def _key(thread: str, ref: str) -> str | None:
        check_thread(thread)
        return normalize_ref(ref)

    # -- storage hooks -------------------------------------------------------------------

    @abc.abstractmethod
    def _insert(self, thread: str, enc: Encoded, now: float) -> int | None:
        """Store `enc` at `now`; when the thread holds it already, refresh its `last_access`.

        Returns how many artifacts were evicted to respect the caps, or None when the artifact
        was there already (see `check_same_content`).
        """

    @abc.abstractmethod
    def _fetch(self, thread: str, ref: str) -> Artifact | None:
        """The artifact, or None when the thread has no such ref."""

    @abc.abstractmethod
    def _count_access(self, thread: str, ref: str, now: float) -> bool:
        """Count one access at `now`; True when the artifact exists."""

    @abc.abstractmethod
    def _list_thread(self, thread: str) -> builtins.list[ArtifactInfo]:
        """Metadata of the thread's artifacts, oldest first."""

    @abc.abstractmethod
    def _delete_one(self, thread: str, ref: str) -> bool:
        """Remove one artifact; True when it existed."""

    @abc.abstractmethod
    def _delete_all(self, thread: str) -> int:
        """Remove all artifacts of a thread; returns how many."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (nothing by default)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def _call(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        if self.offload_async:
            return await asyncio.to_thread(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    async def aput(
        self,
        thread: str,
        payload: str | bytes,
        *,
        meta: Mapping[str, Any] | None = None,
        media_type: str | None = None,
    ) -> str:
        """Async `put`."""
        return await self._call(self.put, thread, payload, meta=meta, media_type=media_type)

    async def aget(self, thread: str, ref: str) -> Artifact | None:
        """Async `get`."""
        return await self._call(self.get, thread, ref)

    async def arecord_access(self, thread: str, ref: str) -> bool:
        """Async `record_access`."""
        return await self._call(self.record_access, thread, ref)

    async def alist(self, thread: str) -> builtins.list[ArtifactInfo]:
        """Async `list`."""
        return await self._call(self.list, thread)

    async def adelete(self, thread: str, ref: str) -> bool:
        """Async `delete`."""
        return await self._call(self.delete, thread, ref)

    async def aremoved(self, thread: str, ref: str) -> str | None:
        """Async `removed`."""
        return await self._call(self.removed, thread, ref)

    async def adelete_thread(self, thread: str) -> int:
        """Async `delete_thread`."""
        return await self._call(self.delete_thread, thread)

    async def aforget_thread(self, thread: str) -> int:
        """Async `forget_thread`."""
        return await self._call(self.forget_thread, thread)

    async def aprune(self, now: float | None = None) -> int:
        """Async `prune`."""
        return await self._call(self.prune, now)

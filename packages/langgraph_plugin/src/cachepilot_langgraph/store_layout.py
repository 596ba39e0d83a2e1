"""How `LangGraphArtifactStore` lays artifacts out in a `BaseStore`: namespaces and thread
labels, the item formats (metadata, payload, tombstone), parsing and checks of the values,
the eviction order."""

from __future__ import annotations

import builtins
import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from cachepilot.artifacts.base import (
    ArtifactInfo,
    check_thread,
    load_meta,
)

__all__ = [
    "DEFAULT_ARTIFACT_NAMESPACE",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_PAGE_SIZE",
    "INLINE_FORMAT",
    "PAYLOAD_FORMAT",
    "TOMBSTONE_FORMAT",
    "TOMBSTONE_PREFIX",
    "VALUE_FORMAT",
    "Record",
    "ascii_meta",
    "check_media_type",
    "check_namespace",
    "check_positive_int",
    "lru_victims",
    "parse_record",
    "thread_from_label",
    "thread_label",
]


DEFAULT_ARTIFACT_NAMESPACE: tuple[str, ...] = ("cachepilot", "artifacts")
"""Namespace prefix of the artifacts in the `BaseStore` (the thread label is appended)."""


DEFAULT_MAX_PAYLOAD_BYTES: int = 128 * 1024 * 1024
"""Largest payload one item holds (128 MiB: about 171 MiB of base64, under PostgreSQL's
``jsonb`` limit)."""


VALUE_FORMAT = "cachepilot.artifact/2"
"""The ``format`` field of every artifact's metadata item (its payload is a separate item)."""


INLINE_FORMAT = "cachepilot.artifact/1"
"""The first layout: metadata and payload (``data_b64``) in one item; still read."""


PAYLOAD_FORMAT = "cachepilot.payload/1"
"""The ``format`` field of a payload item."""


TOMBSTONE_FORMAT = "cachepilot.removed/1"
"""The ``format`` field of the item that says why an artifact is gone."""


TOMBSTONE_PREFIX = "removed-"

_SAFE_LABEL_CHARS = frozenset(string.ascii_letters + string.digits + "-_")

DEFAULT_PAGE_SIZE = 100


def thread_label(thread: str) -> str:
    """The namespace label of a thread: UTF-8 percent-encoding of all but ``[A-Za-z0-9_-]``.

    Raises:
        ValueError: for an empty or non-UTF-8-encodable thread id.
    """
    check_thread(thread)
    return "".join(
        char if char in _SAFE_LABEL_CHARS else "".join(f"%{b:02X}" for b in char.encode("utf-8"))
        for char in thread
    )


def thread_from_label(label: str) -> str | None:
    """The thread id of a label made by `thread_label`, or None for a label it cannot make."""
    try:
        thread = unquote(label, errors="strict")
    except UnicodeDecodeError:
        return None
    if not thread or thread_label(thread) != label:
        return None
    return thread


@dataclass(frozen=True, slots=True)
class Record:
    """A parsed artifact value (without its payload)."""

    info: ArtifactInfo
    seq: int

    def lru_key(self) -> tuple[float, float, int]:
        return (self.info.last_access, self.info.created_at, self.seq)

    def age_key(self) -> tuple[float, int]:
        return (self.info.created_at, self.seq)


def parse_record(value: object, thread: str, ref: str) -> Record | None:
    """The record of an artifact value, or None when it is not one of ours."""
    if not isinstance(value, Mapping) or value.get("format") not in (VALUE_FORMAT, INLINE_FORMAT):
        return None
    try:
        flags = (value["is_text"], value["media_type"], value["meta_json"], value["sha256"])
        if not isinstance(flags[0], bool) or not all(isinstance(f, str) for f in flags[1:]):
            return None
        if value["format"] == INLINE_FORMAT and not isinstance(value["data_b64"], str):
            return None
        info = ArtifactInfo(
            ref=ref,
            thread=thread,
            is_text=flags[0],
            media_type=flags[1],
            meta=load_meta(flags[2]),
            created_at=float(value["created_at"]),
            last_access=float(value["last_access"]),
            access_count=int(value["access_count"]),
            size=int(value["size"]),
            sha256=flags[3],
        )
        return Record(info, int(value.get("seq", 0)))
    except (KeyError, TypeError, ValueError):
        return None


def ascii_meta(meta_json: str) -> str:
    """`meta_json` re-escaped to ASCII (no NUL, no lone surrogate reaches the backend)."""
    return json.dumps(
        json.loads(meta_json), sort_keys=True, ensure_ascii=True, separators=(",", ":")
    )


def check_media_type(media_type: str) -> str:
    if not media_type.isascii() or not media_type.isprintable():
        raise ValueError(f"media_type must be printable ASCII, got {media_type!r}")
    return media_type


def check_namespace(namespace: object) -> tuple[str, ...]:
    if isinstance(namespace, str) or not isinstance(namespace, Sequence) or not namespace:
        raise ValueError(f"namespace must be a non-empty tuple of str labels, got {namespace!r}")
    labels = tuple(namespace)
    for label in labels:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise ValueError(
                f"namespace labels must be non-empty str without '.' or NUL, got {label!r}"
            )
    if labels[0] == "langgraph":
        raise ValueError("namespace must not start with 'langgraph' (reserved by LangGraph)")
    return labels


def check_positive_int(name: str, value: object, *, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        kind = "a positive int or None" if allow_none else "a positive int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


def lru_victims(
    records: builtins.list[Record], excess: int, protected: set[tuple[str, str]]
) -> builtins.list[Record]:
    """Least-recently-accessed records whose removal brings the size down by `excess`."""
    victims: builtins.list[Record] = []
    if excess <= 0:
        return victims
    for record in sorted(records, key=Record.lru_key):
        if excess <= 0:
            break
        if (record.info.thread, record.info.ref) in protected:
            continue
        victims.append(record)
        excess -= record.info.size
    return victims

"""LangGraph SQLite checkpoints read as plain data: nothing in the file is imported or run.

LangGraph's serializer revives objects by importing the module and calling the name a
checkpoint names (a message class, but also any importable callable), so decoding an
untrusted checkpoint with it runs code chosen by whoever wrote the file. This reader decodes
the same formats (`msgpack` with LangGraph's extension types, legacy `json`) without any
import or call: an allow-list of data types becomes plain values (message and pydantic
models their field dicts, sets lists, UUIDs, dates and paths strings), and everything else
is left out and named in `Decoded.skipped`. `pickle` payloads are never decoded.

Needs `ormsgpack` (installed with `langgraph`) for msgpack checkpoints.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Decoded", "decode_typed", "latest_channel_values", "thread_ids"]

# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus).
_EXT_CONSTRUCTOR_SINGLE_ARG = 0
_EXT_CONSTRUCTOR_POS_ARGS = 1
_EXT_CONSTRUCTOR_KW_ARGS = 2
_EXT_METHOD_SINGLE_ARG = 3
_EXT_PYDANTIC_V1 = 4
_EXT_PYDANTIC_V2 = 5
_EXT_NUMPY_ARRAY = 6
_EXT_DELTA_SNAPSHOT = 7

_MODEL_MODULES = ("langchain_core.messages.", "cachepilot.", "cachepilot_langgraph.")
"""Pydantic models from these modules become their field dicts (graph messages, pilot state)."""
_SEQUENCES = frozenset({("builtins", "set"), ("builtins", "frozenset"), ("collections", "deque")})
_STRINGS = frozenset(
    {
        ("uuid", "UUID"),
        ("decimal", "Decimal"),
        ("zoneinfo", "ZoneInfo"),
        ("ipaddress", "IPv4Address"),
        ("ipaddress", "IPv4Interface"),
        ("ipaddress", "IPv4Network"),
        ("ipaddress", "IPv6Address"),
        ("ipaddress", "IPv6Interface"),
        ("ipaddress", "IPv6Network"),
    }
)
_PATHS = frozenset(
    (module, name)
    for module in ("pathlib", "pathlib._local")
    for name in ("Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath")
)
_DATES = frozenset(
    {
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
    }
)
_METHODS = frozenset({("datetime", "datetime", "fromisoformat")})
_LC_MESSAGE_IDS = ("langchain", "schema", "messages")
_MAX_SKIPPED_NAMES = 20


@dataclass(slots=True)
class Decoded:
    """A decoded value and what could not be decoded."""

    value: Any
    skipped: Counter[str] = field(default_factory=Counter)
    """What was left out, by what it named (`os.mkdir`, `pickle payload`), with counts."""

    def describe_skipped(self) -> str | None:
        """One line naming what was left out, or None."""
        if not self.skipped:
            return None
        names = [
            f"{name} ×{count}" if count > 1 else name
            for name, count in self.skipped.most_common(_MAX_SKIPPED_NAMES)
        ]
        more = len(self.skipped) - len(names)
        return ", ".join(names) + (f", … {more} more" if more > 0 else "")


def _name(parts: Any) -> tuple[str, str] | None:
    if (
        isinstance(parts, list | tuple)
        and len(parts) >= 2
        and isinstance(parts[0], str)
        and isinstance(parts[1], str)
    ):
        return parts[0], parts[1]
    return None


def _ext_hook(skipped: Counter[str]) -> Callable[[int, bytes], Any]:
    import ormsgpack

    def unpack(data: bytes) -> Any:
        return ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)

    def hook(code: int, data: bytes) -> Any:
        if code == _EXT_DELTA_SNAPSHOT:
            return unpack(data)
        if code == _EXT_NUMPY_ARRAY:
            skipped["numpy array"] += 1
            return None
        if code not in (
            _EXT_CONSTRUCTOR_SINGLE_ARG,
            _EXT_CONSTRUCTOR_POS_ARGS,
            _EXT_CONSTRUCTOR_KW_ARGS,
            _EXT_METHOD_SINGLE_ARG,
            _EXT_PYDANTIC_V1,
            _EXT_PYDANTIC_V2,
        ):
            skipped[f"extension type {code}"] += 1
            return None
        parts = unpack(data)
        named = _name(parts)
        if named is None or len(parts) < 3:
            skipped[f"malformed extension {code}"] += 1
            return None
        return _as_data(code, named, parts, skipped)

    return hook


def _as_data(code: int, named: tuple[str, str], parts: Any, skipped: Counter[str]) -> Any:
    """The plain-data form of one allowed extension value (None and a note otherwise)."""
    module, name = named
    arg = parts[2]
    if code == _EXT_METHOD_SINGLE_ARG:
        method = parts[3] if len(parts) > 3 else None
        if (module, name, method) in _METHODS and isinstance(arg, str):
            return arg
    elif code in (_EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2):
        if module.startswith(_MODEL_MODULES) and isinstance(arg, Mapping):
            return dict(arg)
    elif named in _SEQUENCES and isinstance(arg, list | tuple):
        return list(arg)
    elif named in _STRINGS and isinstance(arg, str | int):
        return str(arg)
    elif named in _PATHS and isinstance(arg, list | tuple):
        return "/".join(str(p) for p in arg).replace("//", "/")
    elif named in _DATES:
        return arg
    skipped[f"{module}.{name}"] += 1
    return None


def _json_hook(skipped: Counter[str]) -> Callable[[dict[str, Any]], Any]:
    def hook(value: dict[str, Any]) -> Any:
        if value.get("lc") not in (1, 2) or "type" not in value or "id" not in value:
            return value
        ident = value.get("id")
        path = ".".join(str(p) for p in ident) if isinstance(ident, list) else str(ident)
        kwargs = value.get("kwargs")
        if (
            value.get("type") == "constructor"
            and isinstance(ident, list)
            and tuple(ident[:3]) == _LC_MESSAGE_IDS
            and isinstance(kwargs, dict)
        ):
            return kwargs
        skipped[path] += 1
        return None

    return hook


def decode_typed(kind: str | None, data: bytes | None) -> Decoded:
    """Decode one serialized value (`type`, `blob` as LangGraph stores them) as plain data.

    Raises:
        ValueError: when the payload is malformed, or msgpack is needed and `ormsgpack` is
            not installed.
    """
    skipped: Counter[str] = Counter()
    if kind in (None, "null") or data is None:
        return Decoded(None, skipped)
    if kind in ("bytes", "bytearray"):
        return Decoded(bytes(data), skipped)
    if kind == "json":
        try:
            return Decoded(json.loads(data, object_hook=_json_hook(skipped)), skipped)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"malformed JSON checkpoint ({type(exc).__name__})") from None
    if kind == "msgpack":
        try:
            import ormsgpack
        except ImportError as exc:
            raise ValueError(
                "reading a LangGraph checkpoint needs ormsgpack (installed with langgraph)"
            ) from exc
        hook = _ext_hook(skipped)
        try:
            value = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ValueError(f"malformed msgpack checkpoint ({type(exc).__name__})") from None
        return Decoded(value, skipped)
    skipped[f"{kind} payload" if kind == "pickle" else f"serialization type {kind!r}"] += 1
    return Decoded(None, skipped)


def thread_ids(conn: sqlite3.Connection) -> list[str]:
    """The thread ids of a LangGraph checkpoint database, sorted."""
    rows = conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY 1").fetchall()
    return [str(row[0]) for row in rows]


def latest_channel_values(conn: sqlite3.Connection, thread_id: str) -> Decoded | None:
    """The channel values of a thread's latest root checkpoint, as plain data.

    The same checkpoint `SqliteSaver.get_tuple` returns (namespace `""`, highest id); None
    when the thread has none.

    Raises:
        ValueError: when the checkpoint is malformed.
    """
    row = conn.execute(
        "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
        "ORDER BY checkpoint_id DESC LIMIT 1",
        (thread_id,),
    ).fetchone()
    if row is None:
        return None
    kind, blob = row
    decoded = decode_typed(kind, bytes(blob) if blob is not None else None)
    checkpoint = decoded.value
    values = checkpoint.get("channel_values") if isinstance(checkpoint, Mapping) else None
    return Decoded(dict(values) if isinstance(values, Mapping) else {}, decoded.skipped)

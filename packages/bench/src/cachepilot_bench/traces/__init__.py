"""Loaders for real agent trajectory formats into neutral `Session`s.

Formats (`FORMATS`): Claude Code JSONL, mini-swe-agent (v1 text actions and v1.1 native
tool calls), SWE-agent `.traj`, tau-bench results, OpenHands eval records, Reasonix
transcripts. In every session each assistant message is one model call whose request was
everything before it, and tool calls pair with their results (repaired deterministically
when the raw data does not; `meta["repairs"]` counts the repairs).

Unknown or broken files are skipped with one warning each; `load_paths` never raises for a
bad file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from cachepilot_bench.traces import (
    claude_code,
    mini_swe_agent,
    openhands,
    reasonix,
    swe_agent,
    tau_bench,
)
from cachepilot_bench.traces.detect import detect_format
from cachepilot_bench.traces.session import RecordedCall, Session, split_system

__all__ = [
    "FORMATS",
    "TRACE_SUFFIXES",
    "Loader",
    "RecordedCall",
    "Session",
    "detect_format",
    "load_file",
    "load_paths",
    "split_system",
]

logger = logging.getLogger(__name__)

Loader = Callable[[Path, str], list[Session]]
"""`loader(path, session_id_base) -> sessions`; raises on a file of the wrong shape."""

FORMATS: Mapping[str, Loader] = MappingProxyType(
    {
        claude_code.FORMAT: claude_code.load,
        mini_swe_agent.FORMAT: mini_swe_agent.load,
        swe_agent.FORMAT: swe_agent.load,
        tau_bench.FORMAT: tau_bench.load,
        openhands.FORMAT: openhands.load,
        reasonix.FORMAT: reasonix.load,
    }
)
"""Format name (as `detect_format` returns it) -> loader."""

TRACE_SUFFIXES = frozenset({".json", ".jsonl", ".traj"})
"""File suffixes `load_paths` considers when walking a folder (other files are ignored)."""


def load_file(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    root: str | os.PathLike[str] | None = None,
) -> list[Session]:
    """Load every session of one trace file.

    Args:
        path: the file.
        fmt: force a format from `FORMATS` instead of detecting it.
        root: folder the session ids are made relative to (default: ids start with the
            file name).

    Returns:
        The sessions, in file order; `[]` (with one warning) when the file is unknown,
        unreadable or broken.
    """
    file = Path(path)
    rel = file.name
    if root is not None:
        try:
            rel = file.relative_to(Path(root)).as_posix()
        except ValueError:
            rel = file.name
    fmt = fmt or detect_format(file)
    if fmt is None:
        reason = (
            "empty file"
            if file.is_file() and file.stat().st_size == 0
            else "unknown or unreadable format"
        )
        logger.warning("skipping trace file %s: %s", file, reason)
        return []
    loader = FORMATS.get(fmt)
    if loader is None:
        logger.warning("skipping trace file %s: unknown format %r", file, fmt)
        return []
    try:
        sessions = loader(file, rel)
    except Exception as exc:  # a bad file must never stop a bulk load
        logger.warning("skipping trace file %s (%s): %s: %s", file, fmt, type(exc).__name__, exc)
        return []
    if not sessions:
        logger.warning("skipping trace file %s (%s): no session with a model call", file, fmt)
    return sessions


def _walk(folder: Path) -> list[Path]:
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            file = Path(dirpath) / name
            if name.startswith(".") or file.suffix.lower() not in TRACE_SUFFIXES:
                continue
            found.append((file.relative_to(folder).as_posix(), file))
    return [file for _, file in sorted(found)]


def load_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Session]:
    """Load sessions from files and folders (folders recursively, files in sorted order).

    Paths are taken in the given order; a folder contributes its `TRACE_SUFFIXES` files sorted
    by relative path, with session ids relative to that folder; a file given directly gets
    ids starting with its name. A file reached twice is loaded once; repeated ids get a
    `@<n>` suffix. Never raises for a bad file (see `load_file`).
    """
    sessions: list[Session] = []
    seen_files: set[Path] = set()
    seen_ids: dict[str, int] = {}
    for entry in paths:
        base = Path(entry)
        targets: list[tuple[Path, Path | None]]
        if base.is_dir():
            targets = [(file, base) for file in _walk(base)]
        elif base.is_file():
            targets = [(base, None)]
        else:
            logger.warning("skipping trace path %s: not found", base)
            continue
        for file, root in targets:
            key = file.resolve()
            if key in seen_files:
                continue
            seen_files.add(key)
            for session in load_file(file, root=root):
                count = seen_ids.get(session.id, 0)
                seen_ids[session.id] = count + 1
                if count:
                    session.id = f"{session.id}@{count + 1}"
                sessions.append(session)
    return sessions

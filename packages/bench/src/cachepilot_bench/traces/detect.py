"""Cheap trace format detection: sniff the first and last bytes of a file, never parse it all."""

from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["HEAD_BYTES", "TAIL_BYTES", "detect_format", "sniff"]

logger = logging.getLogger(__name__)

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 4 * 1024

_CLAUDE_KEYS = ('"parentUuid"', '"sessionId"', '"leafUuid"', '"file-history-snapshot"')


def sniff(head: bytes, tail: bytes = b"", name: str = "") -> str | None:
    """Format name for a file's first bytes (`head`), last bytes (`tail`) and file name.

    Returns one of `claude-code`, `mini-swe-agent`, `swe-agent`, `tau-bench`, `openhands`,
    `reasonix`, or
    None (empty, binary or unknown content).
    """
    if b"\x00" in head or b"\x00" in tail:
        return None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if not text:
        return None
    both = text + tail.decode("utf-8", errors="replace")
    lower = name.lower()
    if text.startswith("["):
        if '"traj"' in both and '"task_id"' in both:
            return "tau-bench"
        if '"history"' in text and '"instance_id"' in text:
            return "openhands"
        return None
    if not text.startswith("{"):
        return None
    first_line = text.split("\n", 1)[0]
    if first_line.startswith('{"role":"_meta"') or (
        '"_meta"' in first_line and '"role"' in first_line and '"assistant_final"' in both
    ):
        return "reasonix"
    if any(key in first_line for key in _CLAUDE_KEYS):
        return "claude-code"
    if ('"trajectory_format"' in both and "mini-swe-agent" in both) or '"mini_version"' in both:
        return "mini-swe-agent"
    if '"instance_id"' in text and ('"agent_class"' in text or '"llm_config"' in text):
        return "openhands"
    if lower.endswith(".traj") or ('"trajectory"' in text and '"history"' in both):
        return "swe-agent"
    if lower.endswith(".traj.json") and '"messages"' in both:
        return "mini-swe-agent"
    if lower.endswith(".jsonl") and '"history"' in text and '"instance_id"' in text:
        return "openhands"
    return None


def detect_format(path: str | os.PathLike[str]) -> str | None:
    """Detect a file's trace format from its content and name; None when unknown or unreadable."""
    file = Path(path)
    try:
        with file.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
            size = fh.seek(0, os.SEEK_END)
            tail = b""
            if size > HEAD_BYTES:
                fh.seek(max(HEAD_BYTES, size - TAIL_BYTES))
                tail = fh.read()
    except OSError as exc:
        logger.debug("cannot read %s: %s", file, exc)
        return None
    return sniff(head, tail, file.name)

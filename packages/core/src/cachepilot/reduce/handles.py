"""The host's own handles on an output: lines saying where the full text was saved.

Hosts that cap tool output themselves point to the whole of it: deepagents writes "the result
of this tool call … was saved in the filesystem at this path: /large_tool_results/<id>",
Claude Code "Output too large … Full output saved to: /…/tool-results/<id>.txt". Such a line
is how the model gets the full text back through the host's own tools, so cachepilot's
previews keep it next to their ref (DESIGN §2.7: the host's own handles stay).

Maintenance keeps them too: a stub that replaces an old result (`maintenance.stub_text`) and
a fold of a stretch of results (`fold.request.fold_handles_block`) carry the handle lines of
what they replace.

Only the first and the last `HANDLE_SCAN_CHARS` characters are read (hosts put the pointer at
the head or the tail of their preview), each line on at most `HANDLE_LINE_CHARS`: linear and
bounded whatever the output's size.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from cachepilot.reduce.stubs import reduced_stub
from cachepilot.support.redact import redact

__all__ = [
    "HANDLED_SLACK",
    "HANDLE_LINE_CHARS",
    "HANDLE_SCAN_CHARS",
    "MAX_HANDLES",
    "host_handles",
    "is_handle_line",
    "with_handles",
]

HANDLE_SCAN_CHARS: Final = 4_096
"""Characters read at each end of an output."""
HANDLE_LINE_CHARS: Final = 400
"""Longest handle line kept (a longer line is no pointer note)."""
MAX_HANDLES: Final = 2
"""Handle lines kept at most."""
HANDLED_SLACK: Final = 0.1
"""An output that points to where its host saved the full text (the host's own capped
preview) is not reduced while it stays within this share over the tool's limit."""

# What a host writes when it caps an output: the output or result (or the full log, text,
# ...) was saved, then within a short span a path (absolute, home-relative or a Windows
# drive). A line that only says some file is written somewhere ("build logs are written to
# /var/log/...") is content, not a pointer. Bounded repetitions only.
_HANDLE = re.compile(
    r"\b(?:(?:full|entire|complete|whole|untruncated)\s+"
    r"(?:output|result|log|text|content|response)s?"
    r"|(?:tool\s+)?(?:output|result|response)s?)\b"
    r"[^\n]{0,80}?\b(?:saved|written|stored|persisted|wrote|dumped|offloaded|spilled)\b"
    r"[^\n]{0,160}?(?<![\w.])(?:~/|/|[A-Za-z]:\\)[\w.~\-/\\]{2,}",
    re.IGNORECASE,
)


def _window(text: str) -> str:
    """The lines of `text` handles are looked for in: all of them, or those of its head and
    tail (the line each cuts through left out)."""
    if len(text) <= 2 * HANDLE_SCAN_CHARS:
        return text
    head = text[:HANDLE_SCAN_CHARS].splitlines()[:-1]
    tail = text[-HANDLE_SCAN_CHARS:].splitlines()[1:]
    return "\n".join([*head, *tail])


def host_handles(text: str) -> list[str]:
    """The lines of `text` that point to where the host saved the full output (at most
    `MAX_HANDLES`, stripped, credentials redacted, in order; empty when there is none).

    Redacted here, since stubs and fold headers copy these lines as they are. Memoised by
    the scanned window: a fold reads every output of its range again."""
    return list(_handles(_window(text)))


@lru_cache(maxsize=4_096)
def _handles(window: str) -> tuple[str, ...]:
    found: list[str] = []
    for line in window.splitlines():
        stripped = line.strip()
        if not stripped or len(stripped) > HANDLE_LINE_CHARS or stripped in found:
            continue
        if _HANDLE.search(stripped) is not None:
            found.append(redact(stripped))
            if len(found) >= MAX_HANDLES:
                break
    return tuple(found)


def is_handle_line(line: str) -> bool:
    """True when `line` alone is a handle line `host_handles` would keep."""
    return host_handles(line) == [line]


def with_handles(preview: str, handles: list[str], *, before: int, ref: str | None) -> str:
    """`preview` with the handle lines it lost put first (unchanged when it kept them all).

    The size stub of the preview (`reduced_stub(before, len(preview), ref)`) is restated
    with the final size, which includes the handle lines.
    """
    missing = [line for line in handles if line not in preview]
    if not missing:
        return preview
    lead = "\n".join(missing) + "\n"
    stub = reduced_stub(before, len(preview), ref)
    if stub not in preview:
        return lead + preview
    after = len(lead) + len(preview)
    for _ in range(5):  # the stub states the final size, which includes the stub itself
        restated = lead + preview.replace(stub, reduced_stub(before, after, ref), 1)
        if len(restated) == after:
            break
        after = len(restated)
    return restated

"""The host's own handles stay in view (DESIGN §2.7).

Where the host already capped an output and points to the whole of it (deepagents'
`/large_tool_results/<id>`, Claude Code's saved tool-results file), cachepilot's preview keeps
that line next to its own ref, and a host's own capped preview a few characters over the limit
is not reduced again.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot import CachePilot, Config, InMemoryArtifactStore
from cachepilot.reduce.handles import HANDLE_SCAN_CHARS, host_handles, with_handles
from cachepilot.reduce.stubs import reduced_stub

CLAUDE_CODE = (
    "Output too large (212.4KB). Full output saved to: "
    "/home/dev/.claude/projects/app/tool-results/toolu_01AbC.txt"
)
DEEPAGENTS = (
    "Tool result too large, the result of this tool call call_7 was saved in the filesystem "
    "at this path: /large_tool_results/call_7"
)
STATED = re.compile(r"\[output reduced ([\d,]+) → ([\d,]+) chars")


def _log(lines: int, start: int = 0) -> str:
    return "\n".join(f"{i:06d} compiling module_{i % 97} ... ok" for i in range(start, lines))


def _varied(lines: int, start: int = 0) -> str:
    return "\n".join(
        f"{hashlib.sha256(str(i).encode()).hexdigest()[:24]} built" for i in range(start, lines)
    )


def test_host_handles_finds_the_pointer_lines() -> None:
    assert host_handles(f"<persisted-output>\n{CLAUDE_CODE}\n\nPreview:\n{_log(40)}") == [
        CLAUDE_CODE
    ]
    assert host_handles(f"{DEEPAGENTS}\n\nYou can read the result...\n{_log(40)}") == [DEEPAGENTS]
    assert host_handles(f"{_log(2_000)}\nfull log written to ~/logs/build-17.txt") == [
        "full log written to ~/logs/build-17.txt"
    ]
    # Ordinary output is no pointer, and a pointer deep in the middle is not looked for.
    assert host_handles(_log(2_000)) == []
    assert host_handles("saved 3 files\nwritten in Rust\nsaved: ok") == []
    middle = f"{_log(1_000)}\n{CLAUDE_CODE}\n{_log(2_000, 1_000)}"
    assert len(middle) > 4 * HANDLE_SCAN_CHARS and host_handles(middle) == []


def test_with_handles_restates_the_final_size() -> None:
    stub = reduced_stub(90_000, 0, "0123456789ab")
    preview = "head\n" + stub + "\ntail"
    fixed = len(preview) - len(stub)
    after = fixed + len(reduced_stub(90_000, fixed + len(stub), "0123456789ab"))
    preview = "head\n" + reduced_stub(90_000, after, "0123456789ab") + "\ntail"
    assert len(preview) == after
    shown = with_handles(preview, [CLAUDE_CODE], before=90_000, ref="0123456789ab")
    assert shown.startswith(CLAUDE_CODE + "\n")
    stated = STATED.search(shown)
    assert stated is not None and int(stated.group(2).replace(",", "")) == len(shown)
    assert with_handles(shown, [CLAUDE_CODE], before=90_000, ref="0123456789ab") == shown


def _pilot() -> CachePilot:
    return CachePilot(Config(), store=InMemoryArtifactStore())


def test_a_hosts_short_preview_passes_as_it_is() -> None:
    pilot = _pilot()
    preview = f"<persisted-output>\n{CLAUDE_CODE}\n\nPreview (first 2KB):\n{_log(60)}"
    assert pilot.ingest("Bash", {"command": "make"}, preview, "c1", "t") == preview


def test_a_hosts_capped_output_a_few_characters_over_the_limit_is_not_reduced_again() -> None:
    pilot = _pilot()
    limit = Config().reduction.shell_limit  # the shell tools' limit
    body = _log(2_000)[:limit]
    capped = f"{body}\n[output truncated by the host; {CLAUDE_CODE}]"
    assert limit < len(capped) < limit + 500
    assert pilot.ingest("bash", {"command": "make"}, capped, "c1", "t") == capped
    # Without a host's handle the tool's limit holds as before.
    plain = body + "\n" + _log(2_012, 2_000)
    assert limit < len(plain) < limit + 500
    assert len(pilot.ingest("bash", {"command": "make"}, plain, "c2", "t")) < len(plain) // 5


@pytest.mark.parametrize("where", ["head", "tail"])
def test_the_preview_keeps_the_hosts_pointer_next_to_its_ref(where: str) -> None:
    pilot = _pilot()
    note = f"[full output saved to /tmp/host/out-{where}.log]"
    # Lines of different shapes (nothing folds as similar); the note sits past the head the
    # preview keeps (or before the tail it keeps), where only the handle rule keeps it.
    near, far = _varied(40), _varied(6_000, 40)
    output = f"{near}\n{note}\n{far}" if where == "head" else f"{far}\n{note}\n{near}"
    shown = pilot.ingest("bash", {"command": "make"}, output, "c1", "t")
    assert len(shown) < 5_000
    assert note in shown and 'recall(ref="' in shown
    stated = STATED.search(shown)  # a size stub states the final size, handle included
    assert stated is None or int(stated.group(2).replace(",", "")) == len(shown)
    ref = re.search(r'recall\(ref="([0-9a-f]{12})"', shown)
    assert ref is not None
    assert pilot.recall(ref.group(1), thread="t", grep="saved to").count(note) == 1


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=3_000), st.booleans())
def test_host_handles_is_bounded_and_returns_lines_of_the_text(text: str, pad: bool) -> None:
    if pad:
        text = "x" * 50_000 + "\n" + text
    found = host_handles(text)
    assert len(found) <= 2
    assert all(line in text and "\n" not in line and len(line) <= 400 for line in found)

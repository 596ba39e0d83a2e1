"""Every ```python block of the READMEs and the documentation pages runs as written.

A block runs in a fresh interpreter, in an empty folder, with a private cachepilot home and no
API keys (top-level `await` allowed). An HTML comment on the line before a block changes that:

- `<!-- snippet: skip (why) -->`: not run (say why: a live endpoint, a fragment, ...);
- `<!-- snippet: env NAME ... (why) -->`: run with each NAME set to a dummy value and every
  OpenAI-compatible client pointed at a closed loopback port, for blocks that only build
  clients; a block that tried to call one would fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = [
    ROOT / "README.md",
    ROOT / "packages" / "core" / "README.md",
    ROOT / "packages" / "langgraph_plugin" / "README.md",
    ROOT / "packages" / "openai_agents_plugin" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_MARK = re.compile(r"<!--\s*snippet:\s*(skip|env)\b([^>]*?)-->\s*$")
_SECRETS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "LANGSMITH_API_KEY")
_CLOSED_PORT = "http://127.0.0.1:9/v1"  # discard port: nothing listens, a call fails at once

RUNNER = """
import ast, asyncio, sys
path = sys.argv[1]
source = open(path, encoding="utf-8").read()
code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""


@dataclass(frozen=True)
class Snippet:
    """One python block of a README and what its marker asks."""

    readme: Path
    line: int
    code: str
    action: str  # "run", "skip" or "env"
    argument: str

    @property
    def id(self) -> str:
        return f"{self.readme.relative_to(ROOT)}:{self.line}"


def snippets(readme: Path) -> list[Snippet]:
    """The python blocks of one README, with their markers."""
    text = readme.read_text(encoding="utf-8")
    found: list[Snippet] = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARK.search(before)
        action, argument = (marker.group(1), marker.group(2).strip()) if marker else ("run", "")
        line = text.count("\n", 0, match.start()) + 1
        found.append(Snippet(readme, line, match.group(1), action, argument))
    return found


ALL = [s for readme in READMES if readme.is_file() for s in snippets(readme)]


def test_the_readmes_have_runnable_snippets() -> None:
    """The collector sees the blocks (a parser that found nothing would pass everything)."""
    top = [s for s in ALL if s.readme == READMES[0]]
    assert len(top) >= 3
    assert sum(s.action != "skip" for s in top) >= 2
    assert any(s.readme == READMES[1] and s.action == "run" for s in ALL)
    for snippet in ALL:
        if snippet.action == "skip":
            assert re.search(r"\(.+\)", snippet.argument), f"{snippet.id}: say why it is skipped"


def test_markers_parse() -> None:
    readme = ROOT / "README.md"
    marked = [s for s in snippets(readme) if s.action == "env"]
    assert marked and all(s.argument.split()[0].isupper() for s in marked)


@pytest.mark.parametrize("snippet", ALL, ids=[s.id for s in ALL])
def test_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    if snippet.action == "skip":
        pytest.skip(f"marked: {snippet.argument}")
    env = {k: v for k, v in os.environ.items() if k not in _SECRETS}
    env |= {
        "CACHEPILOT_HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "OPENAI_BASE_URL": _CLOSED_PORT,
        "PYTHONUNBUFFERED": "1",
    }
    if snippet.action == "env":
        names = re.findall(r"\b[A-Z][A-Z0-9_]+\b", snippet.argument.split("(")[0])
        assert names, f"{snippet.id}: env marker names no variable"
        env |= {name: "sk-snippet-test-not-a-key" for name in names}
    work = tmp_path / "work"
    work.mkdir()
    code = work / "snippet.py"
    code.write_text(snippet.code, encoding="utf-8")
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(runner), str(code)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, f"{snippet.id} failed:\n{out.stderr[-3000:]}"

"""Fidelity: are the facts the agent uses later still in front of it?

A *fact* is a path, identifier, number or quoted string that first appears in a tool output
and later appears in an assistant message (its text or tool-call arguments). At that later
call the fact is *visible* when the strategy's view contains it, and *recoverable* when it is
visible or the strategy archived an original that contains it (and the agent can recall).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from cachepilot.messages import Message, ReasoningPart, TextPart

__all__ = [
    "Fact",
    "FactIndex",
    "count_candidates",
    "extract_candidates",
    "message_search_text",
    "view_text",
]

_PATH = r"(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+"
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?"
_SNAKE = r"[A-Za-z]\w*_\w+"
_CAMEL = r"[a-z]+[A-Z]\w+|[A-Z][a-z]+[A-Z]\w+"
_NUMBER = r"(?<![\w.])\d{4,}(?:\.\d+)?(?![\w.])|(?<![\w.])\d+\.\d+\.\d+(?![\w.])"
_HEX = r"\b[0-9a-f]{7,40}\b"
_QUOTED = r"\"([^\"\n]{4,80})\"|'([^'\n]{4,80})'"
_CANDIDATE = re.compile(
    "|".join(f"(?:{p})" for p in (_PATH, _DOTTED, _SNAKE, _CAMEL, _NUMBER, _HEX))
)
_QUOTE = re.compile(_QUOTED)

# Every candidate is made of these characters only, so a run of them bounds where a match can
# start and end. The patterns backtrack over a whole run at each of its positions (`\w*`
# before a `_` that never comes): quadratic in a run's length. Runs up to `_LONG_RUN`
# characters (all of them in ordinary text) are scanned with the patterns as they are; a
# longer run (a base64 blob, minified code, a megabyte without a space) with the same
# patterns bounded to `_BOUND` characters a piece (a path or a dotted name of several pieces
# stays whole), which keeps the scan linear; it differs from the unbounded patterns only inside
# such runs, on names longer than a piece.
_RUN_CHARS = r"[\w./()-]"
_LONG_RUN = 256
_BOUND = 40
_LONG_RUNS = re.compile(rf"(?<!{_RUN_CHARS}){_RUN_CHARS}{{{_LONG_RUN + 1},}}")
_B = f"{{1,{_BOUND}}}"
_B0 = f"{{0,{_BOUND}}}"
_CANDIDATE_BOUNDED = re.compile(
    "|".join(
        f"(?:{p})"
        for p in (
            rf"(?:\.{{0,2}}/)?(?:[\w.-]{_B}/){{1,16}}[\w.-]{_B}",
            rf"[A-Za-z_]\w{_B0}(?:\.[A-Za-z_]\w{_B0}){{1,16}}(?:\(\))?",
            rf"[A-Za-z]\w{_B0}_\w{_B}",
            rf"[a-z]{_B}[A-Z]\w{_B}|[A-Z][a-z]{_B}[A-Z]\w{_B}",
            _NUMBER,
            _HEX,
        )
    )
)


def _candidate_matches(text: str) -> Iterator[str]:
    """What `_CANDIDATE.finditer(text)` matches, in order, in time linear in `text` (runs
    longer than `_LONG_RUN` scanned with bounded patterns: see above)."""
    at = 0
    for run in _LONG_RUNS.finditer(text):
        for m in _CANDIDATE.finditer(text, at, run.start()):
            yield m.group(0)
        for m in _CANDIDATE_BOUNDED.finditer(run.group(0)):
            yield m.group(0)
        at = run.end()
    for m in _CANDIDATE.finditer(text, at):
        yield m.group(0)


_MAX_FACTS_PER_CALL = 24
_MIN_LEN = 4


def message_search_text(message: Message) -> str:
    """All text of a message the model sees: parts, reasoning, tool names and arguments."""
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart | ReasoningPart):
            pieces.append(part.text)
    for call in message.tool_calls:
        pieces.append(call.name)
        pieces.append(call.arguments)
    return "\n".join(pieces)


def view_text(system: str | None, messages: Iterable[Message]) -> str:
    """The searchable text of a whole request."""
    head = [system] if system else []
    return "\n".join([*head, *(message_search_text(m) for m in messages)])


def count_candidates(text: str) -> dict[str, int]:
    """How often each fact-shaped substring occurs in `text` (one pass over it)."""
    counts: dict[str, int] = {}
    for match in _candidate_matches(text):
        value = match.strip()
        if len(value) >= _MIN_LEN:
            counts[value] = counts.get(value, 0) + 1
    for m in _QUOTE.finditer(text):
        value = (m.group(1) or m.group(2)).strip()
        if len(value) >= _MIN_LEN:
            counts[value] = counts.get(value, 0) + 1
    return counts


def extract_candidates(text: str) -> set[str]:
    """Fact-shaped substrings of `text` (paths, identifiers, numbers, hex ids, quoted strings)."""
    return set(count_candidates(text))


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact needed at a call, with the tool output it first came from."""

    text: str
    source_index: int
    """Index (in the transcript) of the tool message where it first appeared."""


class FactIndex:
    """Facts needed at each call of one transcript (computed once, shared by all strategies)."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._needed: dict[int, list[Fact]] = {}
        seen_outside_tools: set[str] = set()
        tool_texts: list[str] = []
        tool_starts: list[int] = []  # offset of each tool text in the joined corpus
        tool_indices: list[int] = []
        corpus = ""
        corpus_parts = 0
        offset = 0
        first_tool_source: dict[str, int] = {}
        for index, message in enumerate(messages):
            text = message_search_text(message)
            if message.role == "assistant":
                if corpus_parts != len(tool_texts):
                    corpus = "\x00".join(tool_texts)
                    corpus_parts = len(tool_texts)
                facts: list[Fact] = []
                for cand in sorted(extract_candidates(text)):
                    if cand in seen_outside_tools:
                        continue
                    source = first_tool_source.get(cand)
                    if source is None:
                        at = corpus.find(cand)
                        if at < 0:
                            continue
                        source = tool_indices[bisect_right(tool_starts, at) - 1]
                        first_tool_source[cand] = source
                    facts.append(Fact(cand, source))
                if facts:
                    # Longest first: the most specific facts are the most informative.
                    facts.sort(key=lambda f: (-len(f.text), f.text))
                    self._needed[index] = facts[:_MAX_FACTS_PER_CALL]
            if message.role == "tool":
                tool_starts.append(offset)
                offset += len(text) + 1
                tool_texts.append(text)
                tool_indices.append(index)
            else:
                # Facts the user, system or the agent itself stated are not tool-derived.
                for cand in extract_candidates(text):
                    if cand not in first_tool_source:
                        seen_outside_tools.add(cand)

    def needed_at(self, index: int) -> list[Fact]:
        """Facts the assistant message at `index` uses."""
        return self._needed.get(index, [])

    @property
    def total(self) -> int:
        """Number of (call, fact) pairs."""
        return sum(len(v) for v in self._needed.values())

"""How much of Claude Code's own compaction summary does a zero-LLM resume block name?

Claude Code traces split at each compaction: the part after it (`<id>#2`, …) starts with the
`isCompactSummary` message (`Session.meta["compact_summary"]`). For every such part, the
session memory is built from the part before it (the history the summary covers), resume
blocks are rendered at each budget, and the report gives the share of the file paths and
identifiers named in the summary that each block also names, with the block sizes.

The memory never sees the summary; the summary is only read to score the blocks.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cachepilot.memory import RESUME_TIERS, SessionMemory
from cachepilot.memory.patterns import FILE_EXTENSIONS
from cachepilot.tokens import TokenCounter, get_counter
from cachepilot_bench.traces import Session, load_paths

__all__ = [
    "ResumeReport",
    "SessionResult",
    "TierResult",
    "compaction_pairs",
    "evaluate_resume",
    "evaluate_session",
    "names",
    "summary_terms",
]

logger = logging.getLogger(__name__)

_BOILERPLATE = (
    "This session is being continued from a previous conversation",
    "If you need specific details from before compaction",
    "Please continue the conversation from where we left off",
)
_EXT = "|".join(sorted(FILE_EXTENSIONS, key=lambda e: (-len(e), e)))
_SUMMARY_PATH = re.compile(
    r"(?<![\w./@:~-])(?:"
    r"(?:[\w.@-]{1,120}/){1,30}[\w-]{1,120}(?:\.[\w-]{1,60}){0,4}\.(?:" + _EXT + r")"
    r"|(?:~|\.{1,2})?/(?:[\w.@:-]{1,120}/){0,30}[\w.@:-]{1,120}/?"
    r"|[\w-]{1,120}(?:\.[\w-]{1,60}){0,4}\.(?:" + _EXT + r")"
    r")(?![\w/])"
)
_CAMEL = re.compile(
    r"(?<![\w])(?:[A-Z][a-z0-9]{1,40}(?:[A-Z][a-z0-9]{0,40}){1,10}"
    r"|[a-z][a-z0-9]{0,40}(?:[A-Z][a-z0-9]{0,40}){1,10})(?![\w])"
)
_SNAKE = re.compile(r"(?<![\w])_?[A-Za-z][A-Za-z0-9]{0,40}(?:_[A-Za-z0-9]{1,40}){1,12}(?![\w])")
_BACKTICK = re.compile(r"`([^`\s]{2,80})`")
_BACKTICK_NAME = re.compile(r"[:@]?[A-Za-z_][\w.?!-]{0,79}")
_ARITY = re.compile(r"(?:/\d{1,2}|\(\))$")


def summary_terms(summary: str) -> tuple[list[str], list[str]]:
    """File paths and identifiers a compaction summary names (sorted, unique).

    Paths: tokens with a `/` that start at a root (`/`, `./`, `~/`) or end in a file
    extension, and bare `name.ext` file names. Identifiers (outside paths): CamelCase and
    snake_case words, and backticked names without spaces (`:state`, `length/1` → `length`).
    Claude Code's fixed wrapper text (and the transcript path it names) is left out.
    """
    text = "\n".join(
        line for line in summary.splitlines() if not any(b in line for b in _BOILERPLATE)
    )
    paths: set[str] = set()

    def mask(match: re.Match[str]) -> str:
        paths.add(match.group(0).rstrip("/"))
        return " " * len(match.group(0))

    rest = _SUMMARY_PATH.sub(mask, text)
    idents = {m.group(0) for m in _CAMEL.finditer(rest)}
    idents |= {m.group(0) for m in _SNAKE.finditer(rest)}
    for match in _BACKTICK.finditer(rest):
        value = _ARITY.sub("", match.group(1)).rstrip(".,:;")
        if len(value) >= 3 and _BACKTICK_NAME.fullmatch(value) and not value.startswith("/"):
            idents.add(value)
    paths = {p for p in paths if len(p) >= 3}
    return sorted(paths), sorted(idents - paths)


def names(block: str, term: str) -> bool:
    """True when `block` contains `term` as a whole token (no word character either side)."""
    pattern = r"(?<![A-Za-z0-9_])" + re.escape(term) + r"(?![A-Za-z0-9_])"
    return re.search(pattern, block) is not None


@dataclass(frozen=True, slots=True)
class TierResult:
    """One resume block scored against one summary."""

    budget: int | None
    """Token budget (None: uncapped)."""
    tokens: int
    """The block's real size in tokens."""
    paths_named: int
    identifiers_named: int
    paths_total: int
    identifiers_total: int

    @property
    def path_share(self) -> float:
        """Share of the summary's paths the block names."""
        return self.paths_named / self.paths_total if self.paths_total else 1.0

    @property
    def identifier_share(self) -> float:
        """Share of the summary's identifiers the block names."""
        total = self.identifiers_total
        return self.identifiers_named / total if total else 1.0

    @property
    def share(self) -> float:
        """Share of all the summary's paths and identifiers the block names."""
        total = self.paths_total + self.identifiers_total
        return (self.paths_named + self.identifiers_named) / total if total else 1.0


@dataclass(frozen=True, slots=True)
class SessionResult:
    """The blocks of one compacted session."""

    session_id: str
    """Id of the part after the compaction (the one carrying the summary)."""
    history_messages: int
    """Messages before the compaction (what the memory was built from)."""
    summary_tokens: int
    paths: tuple[str, ...]
    identifiers: tuple[str, ...]
    tiers: tuple[TierResult, ...]


@dataclass(frozen=True, slots=True)
class ResumeReport:
    """All compacted sessions found, scored at every budget."""

    budgets: tuple[int | None, ...]
    sessions: tuple[SessionResult, ...]

    def mean_share(self, budget: int | None) -> float:
        """Mean (over sessions) share of summary terms named at `budget`."""
        shares = [t.share for s in self.sessions for t in s.tiers if t.budget == budget]
        return sum(shares) / len(shares) if shares else 0.0

    def pooled_share(self, budget: int | None) -> float:
        """Share of all sessions' summary terms together named at `budget`."""
        named = total = 0
        for session in self.sessions:
            for tier in session.tiers:
                if tier.budget == budget:
                    named += tier.paths_named + tier.identifiers_named
                    total += tier.paths_total + tier.identifiers_total
        return named / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (shares included)."""
        out: dict[str, Any] = {"budgets": list(self.budgets), "sessions": []}
        for session in self.sessions:
            row = asdict(session)
            for tier_row, tier in zip(row["tiers"], session.tiers, strict=True):
                tier_row["share"] = round(tier.share, 4)
                tier_row["path_share"] = round(tier.path_share, 4)
                tier_row["identifier_share"] = round(tier.identifier_share, 4)
            out["sessions"].append(row)
        out["mean_share"] = {_label(b): round(self.mean_share(b), 4) for b in self.budgets}
        out["pooled_share"] = {_label(b): round(self.pooled_share(b), 4) for b in self.budgets}
        return out

    def format_table(self) -> str:
        """A plain-text table: per session, terms in the summary, share named, block size."""
        heads = [_label(b) for b in self.budgets]
        lines = [
            "session | msgs | summary tok | paths | idents | "
            + " | ".join(f"share@{h} (P/I)" for h in heads)
            + " | "
            + " | ".join(f"tok@{h}" for h in heads)
        ]
        for s in self.sessions:
            shares = [
                f"{t.share:.0%} ({t.path_share:.0%}/{t.identifier_share:.0%})" for t in s.tiers
            ]
            sizes = [str(t.tokens) for t in s.tiers]
            lines.append(
                f"{_short(s.session_id)} | {s.history_messages} | {s.summary_tokens} | "
                f"{len(s.paths)} | {len(s.identifiers)} | "
                + " | ".join(shares)
                + " | "
                + " | ".join(sizes)
            )
        lines.append(
            "mean | | | | | " + " | ".join(f"{self.mean_share(b):.0%}" for b in self.budgets)
        )
        lines.append(
            "pooled | | | | | " + " | ".join(f"{self.pooled_share(b):.0%}" for b in self.budgets)
        )
        return "\n".join(lines)


def _label(budget: int | None) -> str:
    return "uncapped" if budget is None else str(budget)


def _short(session_id: str) -> str:
    return session_id.rsplit("/", 1)[-1]


def compaction_pairs(sessions: Iterable[Session]) -> list[tuple[Session, Session]]:
    """`(before, after)` pairs: the part a compaction summarised and the part carrying it.

    The loader names the part after the n-th compact boundary `<id>#<n+1>`; the part
    before is `<id>` (n = 1) or `<id>#<n>`.
    """
    by_id = {s.id: s for s in sessions}
    pairs: list[tuple[Session, Session]] = []
    for session in by_id.values():
        if "compact_summary" not in session.meta or "#" not in session.id:
            continue
        base, _, number = session.id.rpartition("#")
        if not number.isdigit():
            continue
        previous = base if int(number) == 2 else f"{base}#{int(number) - 1}"
        before = by_id.get(previous)
        if before is None:
            logger.warning("no pre-compaction part %s for %s", previous, session.id)
            continue
        pairs.append((before, session))
    pairs.sort(key=lambda pair: pair[1].id)
    return pairs


def evaluate_session(
    before: Session,
    after: Session,
    budgets: Sequence[int | None] = (*RESUME_TIERS, None),
    counter: TokenCounter | None = None,
) -> SessionResult:
    """Score resume blocks of `before` against the compaction summary `after` carries."""
    counter = counter or get_counter()
    summary = str(after.meta.get("compact_summary", ""))
    paths, idents = summary_terms(summary)
    memory = SessionMemory()
    memory.update(before.messages)
    tiers: list[TierResult] = []
    for budget in budgets:
        block = memory.resume_block(budget, counter)
        tiers.append(
            TierResult(
                budget=budget,
                tokens=counter.count(block),
                paths_named=sum(names(block, p) for p in paths),
                identifiers_named=sum(names(block, i) for i in idents),
                paths_total=len(paths),
                identifiers_total=len(idents),
            )
        )
    return SessionResult(
        session_id=after.id,
        history_messages=len(before.messages),
        summary_tokens=counter.count(summary),
        paths=tuple(paths),
        identifiers=tuple(idents),
        tiers=tuple(tiers),
    )


def evaluate_resume(
    paths: Sequence[str | os.PathLike[str]] = (),
    *,
    sessions: Sequence[Session] | None = None,
    budgets: Sequence[int | None] = (*RESUME_TIERS, None),
    counter: TokenCounter | None = None,
) -> ResumeReport:
    """Evaluate every compacted Claude Code session found in `paths` (or `sessions`).

    Args:
        paths: trace files or folders (loaded with `traces.load_paths`).
        sessions: already loaded sessions (used instead of `paths` when given).
        budgets: token budgets to render (None: uncapped).
        counter: token counter (default: `tokens.get_counter()`).
    """
    loaded = list(sessions) if sessions is not None else load_paths(paths)
    results = [
        evaluate_session(before, after, budgets, counter)
        for before, after in compaction_pairs(s for s in loaded if s.source == "claude-code")
    ]
    return ResumeReport(budgets=tuple(budgets), sessions=tuple(results))

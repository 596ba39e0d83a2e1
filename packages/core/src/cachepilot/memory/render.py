"""Budgeted resume blocks rendered from a `SessionMemory` (zero-LLM session summary).

A block has fixed sections (Goal / Done / Open work / Files / Errors / Commands / Facts /
Decisions / Environment). Every candidate line gets a priority (section weight minus a step
per rank inside the section, so sections interleave: the top file beats the fifth decision);
the highest-priority lines are kept until the token budget is full, then the block is counted
exactly and trimmed until it fits. Same memory, budget and counter → the same bytes.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cachepilot.memory import patterns
from cachepilot.memory.model import ACTION_WEIGHTS, ItemKind, MemoryItem, Relation, Status
from cachepilot.memory.tools import READ_PROGRAMS
from cachepilot.support.redact import redact
from cachepilot.tokens import TokenCounter, get_counter

__all__ = ["HEADER", "RESUME_TIERS", "SECTIONS", "MemoryView", "project_root", "resume_block"]

logger = logging.getLogger(__name__)


class MemoryView(Protocol):
    """What rendering reads of a session memory (`cachepilot.memory.SessionMemory` is one)."""

    @property
    def seq(self) -> int:
        """Messages processed (the clock of `first_seen` / `last_seen`)."""
        ...

    @property
    def items(self) -> Mapping[str, MemoryItem]:
        """The items, by id."""
        ...

    def by_kind(self, kind: ItemKind) -> list[MemoryItem]:
        """Items of one kind, in first-seen order."""
        ...

    def get(self, kind: ItemKind, key: str) -> MemoryItem | None:
        """The item of `kind` with `key`, if present."""
        ...

    def neighbours(self, iid: str, rel: Relation | None = None) -> list[str]:
        """Ids linked to `iid`, optionally by one relation."""
        ...


RESUME_TIERS: tuple[int, ...] = (100, 300, 600)
"""The standard resume block budgets (tokens)."""

HEADER = "## Session memory"

SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("goal", "Goal:", "line"),
    ("done", "Done:", "bullets"),
    ("open", "Open work:", "bullets"),
    ("created", "Files created:", "list"),
    ("edited", "Files edited:", "list"),
    ("read", "Files read:", "list"),
    ("seen", "Files seen:", "list"),
    ("errors", "Errors:", "bullets"),
    ("commands", "Commands:", "bullets"),
    ("facts", "Facts:", "list"),
    ("decisions", "Decisions:", "bullets"),
    ("env", "Environment:", "list"),
)
"""`(name, label, style)` in output order; style `line`, `list` (comma-joined) or `bullets`."""

_SECTION_INDEX = {name: i for i, (name, _, _) in enumerate(SECTIONS)}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ROOT_MARKERS = _words(
    "src lib test tests app packages docs config priv assets scripts bin cmd internal pkg "
    "spec include examples benchmarks"
)
"""Conventional top-level folders: their parent is taken as the project root."""
_ROOT_FILES = _words(
    "pyproject.toml setup.py setup.cfg package.json mix.exs Cargo.toml go.mod Gemfile "
    "pom.xml build.gradle Makefile CMakeLists.txt README.md .gitignore"
)
"""Project files: the folder holding one is a project root."""
_FILE_GROUP = {
    "create": "created",
    "edit": "edited",
    "delete": "edited",
    "run": "read",
    "read": "read",
}
_MAX_FILL_TRIES = 40

PRIORITY: dict[str, tuple[float, float]] = {
    "open": (72.0, 10.0),
    "changed": (68.0, 0.0),
    "last_step": (64.0, 0.0),
    "plan": (58.0, 0.0),
    "open_error": (63.0, 6.0),
    "files": (60.0, 2.0),
    "facts": (56.0, 1.1),
    "cwd": (52.0, 0.0),
    "done": (44.0, 6.0),
    "env": (40.0, 4.0),
    "decisions": (37.0, 8.0),
    "commands": (33.0, 6.0),
    "commands_other": (24.0, 6.0),
    "fixed_error": (30.0, 6.0),
}
"""`(base, step)` per kind of line: a line's priority is `base - step * rank` (rank inside its
kind). Higher priorities are kept first; equal steps interleave sections."""


def _priority(kind: str, rank: int) -> float:
    base, step = PRIORITY[kind]
    return base - step * rank


@dataclass(frozen=True, slots=True)
class _Entry:
    section: str
    priority: float
    order: float
    text: str
    dedupe: str | None = None
    """Skip the entry when this value is already named by a kept entry (of `scope`)."""
    scope: str = "all"
    """`file`: dedupe only against entries listing files; `all`: against every kept entry."""


@dataclass(frozen=True, slots=True)
class _Limits:
    goal: int
    line: int


def _limits(budget: int | None) -> _Limits:
    if budget is None:
        return _Limits(goal=600, line=240)
    if budget <= 150:
        return _Limits(goal=110, line=75)
    if budget <= 400:
        return _Limits(goal=200, line=130)
    return _Limits(goal=320, line=170)


def project_root(memory: MemoryView) -> str | None:
    """The folder paths are shown relative to: a project root inferred from absolute paths.

    Candidates are the parents of conventional top-level folders (`src`, `lib`, `tests`…) and
    the folders holding project files (`pyproject.toml`, `mix.exs`…); the most common wins.
    Without any, the explicit cwd, else the common prefix of the absolute paths.
    """
    absolute = sorted(it.key for it in memory.by_kind(ItemKind.FILE) if it.key.startswith("/"))
    votes: Counter[str] = Counter()
    for path in absolute:
        parts = path.split("/")
        for i, part in enumerate(parts[1:-1], 1):
            if part in _ROOT_MARKERS and i > 1:
                votes["/".join(parts[:i])] += 1
                break
        else:
            if parts[-1] in _ROOT_FILES and len(parts) > 2:
                votes["/".join(parts[:-1])] += 1
    if votes:
        return min(votes, key=lambda d: (-votes[d], len(d), d))
    cwd = memory.get(ItemKind.ENVIRONMENT, "cwd")
    if cwd is not None:
        return cwd.text.removeprefix("cwd: ").rstrip("/") or None
    if len(absolute) >= 2:
        split = [p.split("/")[:-1] for p in absolute]
        common: list[str] = []
        for level in zip(*split, strict=False):
            if len(set(level)) != 1:
                break
            common.append(level[0])
        if len(common) >= 2:
            return "/".join(common[:4])
    return None


def _relative(path: str, root: str | None) -> str:
    if root and path.startswith(root + "/"):
        return path[len(root) + 1 :]
    if root and path == root:
        return "."
    return path


def _recency(item: MemoryItem, seq: int) -> float:
    return item.last_seen / max(1, seq)


def _goal_entries(memory: MemoryView, lim: _Limits) -> tuple[list[_Entry], str | None]:
    tasks = memory.by_kind(ItemKind.TASK)
    if not tasks:
        return [], None
    goal = tasks[0]
    suffix = " (done)" if goal.status == Status.DONE else ""
    text = goal.text
    if len(text) > lim.goal:
        first = patterns.first_sentence(text)
        if len(first) >= 16:
            text = first
    return [_Entry("goal", 1_000.0, 0, patterns.clip(text, lim.goal) + suffix)], goal.id


def _task_entries(
    memory: MemoryView, goal_id: str | None, root: str | None, lim: _Limits
) -> list[_Entry]:
    out: list[_Entry] = []
    seq = memory.seq
    tasks = [t for t in memory.by_kind(ItemKind.TASK) if t.id != goal_id]
    open_tasks = sorted(
        (t for t in tasks if t.status == Status.OPEN), key=lambda t: (-t.last_seen, t.key)
    )
    for rank, task in enumerate(open_tasks):
        out.append(
            _Entry("open", _priority("open", rank), rank, patterns.clip(task.text, lim.line))
        )
    plan = memory.get(ItemKind.DECISION, "plan")
    if plan is not None and plan.last_seen >= seq - 30:
        out.append(
            _Entry("open", _priority("plan", 0), 900, patterns.clip(plan.text, 2 * lim.line))
        )
    decisions = sorted(
        (d for d in memory.by_kind(ItemKind.DECISION) if d.key != "plan"),
        key=lambda d: (-d.last_seen, -d.weight, d.key),
    )
    if decisions and decisions[0].last_seen >= seq - 12:
        text = "Last step: " + patterns.clip(decisions[0].text, lim.line)
        out.append(_Entry("open", _priority("last_step", 0), 1_000, text))
    passes = [m.last_seen for m in memory.by_kind(ItemKind.MILESTONE) if m.key.startswith("pass:")]
    if passes:
        since = max(passes)
        changed = sorted(
            (
                f
                for f in memory.by_kind(ItemKind.FILE)
                if f.changed_at is not None and f.changed_at > since
            ),
            key=lambda f: (-(f.changed_at or 0), f.key),
        )
        if changed:
            names = ", ".join(_relative(f.key, root) for f in changed[:4])
            text = f"Changed since the last passing run: {names}"
            out.append(_Entry("open", _priority("changed", 0), 500, text, scope="file"))
    done: list[MemoryItem] = [t for t in tasks if t.status == Status.DONE]
    done.extend(memory.by_kind(ItemKind.MILESTONE))
    done.sort(key=lambda d: (-d.last_seen, d.kind.value, d.key))
    for rank, item in enumerate(done):
        text = patterns.clip(item.text, lim.line)
        out.append(_Entry("done", _priority("done", rank), rank, text, dedupe=text))
    return out


@dataclass(slots=True)
class _FileView:
    path: str
    actions: set[str]
    weight: float
    hits: int
    last_seen: int
    key: str


def _file_entries(memory: MemoryView, root: str | None) -> list[_Entry]:
    merged: dict[str, _FileView] = {}
    for item in memory.by_kind(ItemKind.FILE):
        shown = _relative(item.key, root)
        view = merged.get(shown)
        if view is None:
            merged[shown] = _FileView(
                shown, set(item.actions), item.weight, item.hits, item.last_seen, item.key
            )
            continue
        view.actions |= set(item.actions)
        view.weight += item.weight
        view.hits += item.hits
        view.last_seen = max(view.last_seen, item.last_seen)
    seq = max(1, memory.seq)

    def score(view: _FileView) -> float:
        best = max((ACTION_WEIGHTS.get(a, 0.5) for a in view.actions), default=0.3)
        outside = 1.5 if root is not None and view.path.startswith("/") else 0.0
        return (
            2.0 * best
            + 0.8 * math.log1p(min(view.weight, 200.0))
            + 1.5 * view.last_seen / seq
            - outside
        )

    ranked = sorted(merged.values(), key=lambda v: (-score(v), -v.last_seen, v.path))
    out: list[_Entry] = []
    for rank, view in enumerate(ranked):
        group = "seen"
        for action in ("create", "edit", "delete", "run", "read"):
            if action in view.actions:
                group = _FILE_GROUP[action]
                break
        out.append(
            _Entry(group, _priority("files", rank), rank, view.path, dedupe=view.path, scope="file")
        )
    return out


def _error_entries(memory: MemoryView, root: str | None, lim: _Limits) -> list[_Entry]:
    errors = sorted(memory.by_kind(ItemKind.ERROR), key=lambda e: (-e.last_seen, e.key))
    out: list[_Entry] = []
    open_rank = fixed_rank = 0
    for error in errors:
        text = patterns.clip(error.text, lim.line)
        files = [
            _relative(memory.items[f].key, root)
            for f in memory.neighbours(error.id, Relation.RAISED)
            if f in memory.items and memory.items[f].kind == ItemKind.FILE
        ]
        where = next((f for f in files if f.rsplit("/", 1)[-1] not in text), None)
        if where:
            text += f" [{where}]"
        if error.status == Status.OPEN:
            priority = _priority("open_error", open_rank)
            out.append(_Entry("errors", priority, open_rank, "open: " + text))
            open_rank += 1
        else:
            order = 1_000 + fixed_rank
            priority = _priority("fixed_error", fixed_rank)
            out.append(_Entry("errors", priority, order, "fixed: " + text))
            fixed_rank += 1
    return out


def _command_entries(memory: MemoryView, lim: _Limits) -> list[_Entry]:
    commands = [
        c
        for c in memory.by_kind(ItemKind.COMMAND)
        if c.group.split(" ", 1)[0] not in READ_PROGRAMS and c.detail
    ]

    def telling(command: MemoryItem) -> bool:
        # Test and build runs, failures: the commands whose outcome matters on resume.
        return (command.exit_code not in (None, 0)) or any(
            word in command.group for word in ("test", "build", "compile", "check", "lint")
        )

    commands.sort(key=lambda c: (not telling(c), -c.last_seen, c.key))
    out: list[_Entry] = []
    for rank, command in enumerate(commands):
        shown = command.key + (" …" if command.text.endswith("…") else "")
        text = f"{patterns.clip(shown, lim.line)} → {patterns.clip(command.detail, 90)}"
        priority = _priority("commands" if telling(command) else "commands_other", rank)
        out.append(_Entry("commands", priority, rank, text, dedupe=shown))
    return out


def _fact_entries(memory: MemoryView) -> list[_Entry]:
    seq = memory.seq

    def score(item: MemoryItem) -> float:
        recency = _recency(item, seq)
        # Named from several sources (the user, the agent's prose, its edits) = central.
        sources = len(set(item.actions) - {"number"})
        return (
            min(item.weight, 12.0) * (0.5 + 0.5 * recency)
            + 0.4 * math.log1p(item.hits)
            + 1.0 * max(0, sources - 1)
        )

    facts = sorted(memory.by_kind(ItemKind.IDENTIFIER), key=lambda f: (-score(f), f.key))
    return [
        _Entry("facts", _priority("facts", rank), rank, fact.text, dedupe=fact.text)
        for rank, fact in enumerate(facts)
    ]


def _decision_entries(memory: MemoryView, lim: _Limits) -> list[_Entry]:
    seq = memory.seq

    def score(item: MemoryItem) -> float:
        return min(item.weight, 4.0) * (0.2 + _recency(item, seq))

    decisions = sorted(
        (d for d in memory.by_kind(ItemKind.DECISION) if d.key != "plan"),
        key=lambda d: (-score(d), d.key),
    )
    out: list[_Entry] = []
    for rank, decision in enumerate(decisions):
        text = patterns.clip(decision.text, lim.line)
        out.append(_Entry("decisions", _priority("decisions", rank), rank, text, dedupe=text))
    return out


def _env_entries(memory: MemoryView, root: str | None) -> list[_Entry]:
    out: list[_Entry] = []
    cwd = memory.get(ItemKind.ENVIRONMENT, "cwd")
    if cwd is not None:
        out.append(_Entry("env", _priority("cwd", 0), 0, cwd.text))
    elif root is not None:
        out.append(_Entry("env", _priority("cwd", 0), 0, f"root: {root}"))
    facts = [e for e in memory.by_kind(ItemKind.ENVIRONMENT) if e.key != "cwd" and e.group != "pm"]
    facts.sort(key=lambda e: (-e.hits, e.key))
    for rank, fact in enumerate(facts, 1):
        out.append(_Entry("env", _priority("env", rank), rank, fact.text))
    managers = sorted(
        (e for e in memory.by_kind(ItemKind.ENVIRONMENT) if e.group == "pm"),
        key=lambda e: (-e.hits, e.key),
    )
    if managers:
        tools = ", ".join(m.text for m in managers[:3])
        out.append(_Entry("env", _priority("env", 1) - 1.0, 500, f"tools: {tools}"))
    return out


def _candidates(memory: MemoryView, budget: int | None) -> list[_Entry]:
    lim = _limits(budget)
    root = project_root(memory)
    goal, goal_id = _goal_entries(memory, lim)
    entries = [
        *goal,
        *_task_entries(memory, goal_id, root, lim),
        *_file_entries(memory, root),
        *_error_entries(memory, root, lim),
        *_command_entries(memory, lim),
        *_fact_entries(memory),
        *_decision_entries(memory, lim),
        *_env_entries(memory, root),
    ]
    # The block is cachepilot's text: credential shapes found in tool outputs and arguments
    # are replaced before the budget is counted, so the block still fits it.
    entries = [_redacted(e) for e in entries]
    entries.sort(key=lambda e: (-e.priority, _SECTION_INDEX[e.section], e.order, e.text))
    return entries


def _redacted(entry: _Entry) -> _Entry:
    text = redact(entry.text)
    dedupe = redact(entry.dedupe) if entry.dedupe is not None else None
    if text is entry.text and dedupe is entry.dedupe:
        return entry
    return _Entry(entry.section, entry.priority, entry.order, text, dedupe, entry.scope)


class _Named:
    """Texts of kept entries, to skip entries whose value is already named."""

    def __init__(self) -> None:
        self.all = ""
        self.files = ""

    def add(self, entry: _Entry) -> None:
        self.all += "\n" + entry.text
        if entry.scope == "file":
            self.files += "\n" + entry.text

    def has(self, entry: _Entry) -> bool:
        if entry.dedupe is None:
            return False
        return _contains_token(self.files if entry.scope == "file" else self.all, entry.dedupe)


def _contains_token(hay: str, needle: str) -> bool:
    """`needle` occurs in `hay` with no word character touching either end."""
    start = hay.find(needle)
    while start >= 0:
        end = start + len(needle)
        before = hay[start - 1] if start else " "
        after = hay[end] if end < len(hay) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = hay.find(needle, start + 1)
    return False


def _render(selected: list[_Entry]) -> str:
    if not selected:
        return ""
    by_section: dict[str, list[_Entry]] = {}
    for entry in selected:
        by_section.setdefault(entry.section, []).append(entry)
    lines = [HEADER]
    for name, label, style in SECTIONS:
        group = by_section.get(name)
        if not group:
            continue
        group.sort(key=lambda e: (e.order, e.text))
        if style == "line":
            lines.append(f"{label} {group[0].text}")
        elif style == "list":
            sep = "; " if name == "env" else ", "
            lines.append(f"{label} {sep.join(e.text for e in group)}")
        else:
            lines.append(label)
            lines.extend(f"- {e.text}" for e in group)
    return "\n".join(lines)


def _shrink_goal(entry: _Entry, room: int, count: Callable[[str], int]) -> _Entry | None:
    text = entry.text
    while text and count(text) > room:
        cut = max(0, int(len(text) * 0.75) - 1)
        if cut < 12:
            return None
        text = patterns.clip(text, cut)
    return _Entry(entry.section, entry.priority, entry.order, text) if text else None


def _fit(entries: list[_Entry], budget: int, counter: TokenCounter) -> list[_Entry]:
    count = counter.count
    header_cost = {name: count(label) + 1 for name, label, _ in SECTIONS}
    used = count(HEADER)
    selected: list[_Entry] = []
    named = _Named()
    present: set[str] = set()
    for candidate in entries:
        entry = candidate
        if named.has(entry):
            continue
        cost = (
            count(entry.text) + 2 + (0 if entry.section in present else header_cost[entry.section])
        )
        if used + cost > budget:
            if entry.section != "goal":
                continue
            room = budget - used - header_cost["goal"] - 2
            shrunk = _shrink_goal(entry, room, count) if room > 3 else None
            if shrunk is None:
                continue
            entry = shrunk
            cost = count(entry.text) + 2 + header_cost["goal"]
        selected.append(entry)
        named.add(entry)
        used += cost
        present.add(entry.section)
    # Exact count, then trim the lowest-priority entries until the block fits.
    while selected and count(_render(selected)) > budget:
        selected.pop()
    # Fill any room the estimate left with entries that still fit exactly.
    tries = 0
    chosen = set(selected)
    current = count(_render(selected))
    for entry in entries:
        if tries >= _MAX_FILL_TRIES or current >= budget:
            break
        if entry in chosen or entry.section == "goal" or named.has(entry):
            continue
        if current + count(entry.text) > budget:
            continue
        tries += 1
        trial = [*selected, entry]
        trial.sort(key=lambda e: (-e.priority, _SECTION_INDEX[e.section], e.order, e.text))
        size = count(_render(trial))
        if size <= budget:
            selected, current = trial, size
            chosen.add(entry)
            named.add(entry)
    return selected


def resume_block(
    memory: MemoryView,
    budget_tokens: int | None = 300,
    counter: TokenCounter | None = None,
) -> str:
    """Render the memory as a plain-text resume block.

    Args:
        memory: the session memory.
        budget_tokens: the block's maximum size in tokens under `counter`; None renders
            everything (no budget).
        counter: token counter (default: `tokens.get_counter()`).

    Returns:
        The block (empty when the memory is empty or nothing fits).

    Raises:
        ValueError: when `budget_tokens` is negative.
    """
    if budget_tokens is not None and budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0 or None, got {budget_tokens}")
    entries = _candidates(memory, budget_tokens)
    if budget_tokens is None:
        selected: list[_Entry] = []
        named = _Named()
        for entry in entries:
            if not named.has(entry):
                selected.append(entry)
                named.add(entry)
        return _render(selected)
    if budget_tokens == 0 or not entries:
        return ""
    selected = _fit(entries, budget_tokens, counter or get_counter())
    return _render(selected)

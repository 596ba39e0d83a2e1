"""Building blocks of the generated outputs: a line accumulator that remembers which lines
are marked, and vocabularies that make lines vary the way real logs do."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["WORDS", "Doc", "Sample", "ident", "path", "progress_bar"]

WORDS: tuple[str, ...] = (
    "alpha", "api", "auth", "billing", "cache", "client", "codec", "config", "core", "crypto",
    "db", "dispatch", "events", "export", "feed", "gateway", "graph", "http", "index", "ingest",
    "io", "jobs", "kernel", "ledger", "loader", "mailer", "media", "metrics", "model", "net",
    "notify", "orders", "parser", "payments", "pipeline", "planner", "queue", "render", "report",
    "router", "rpc", "runtime", "scheduler", "schema", "search", "session", "shard", "storage",
    "stream", "sync", "tenant", "token", "trace", "upload", "users", "util", "vault", "worker",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sample:
    """One generated tool output and what an agent must see of it.

    Attributes:
        name: the tool (`make`, `cargo`, `pytest` …).
        tool: the tool name of the call (`bash`, `web_fetch` …).
        args: the call's arguments.
        text: the output as the tool printed it (no marks in it).
        marked: the lines an agent acts on, as they appear in `text` (escape sequences and
            trailing whitespace removed).
        position: where the first marked line sits, as a share of the output (0 = start).
    """

    name: str
    tool: str
    args: dict[str, object]
    text: str
    marked: tuple[str, ...]
    position: float


@dataclass(slots=True)
class Doc:
    """Lines of an output under construction, with the marked ones remembered."""

    rng: random.Random
    lines: list[str] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    chars: int = 0

    def add(self, line: str, *, mark: bool = False) -> None:
        self.lines.append(line)
        self.chars += len(line) + 1
        if mark:
            self.marks.append(line)

    def fill(self, target: int, make: Callable[[Doc], None]) -> None:
        """Call `make` until the output holds `target` characters."""
        while self.chars < target:
            make(self)

    def insert_at(self, share: float, block: Sequence[tuple[str, bool]]) -> None:
        """Insert `block` ((line, marked) pairs) at `share` of the lines (between lines)."""
        at = int(len(self.lines) * share)
        self.lines[at:at] = [line for line, _ in block]
        self.chars += sum(len(line) + 1 for line, _ in block)
        self.marks.extend(line for line, marked in block if marked)

    def sample(self, name: str, tool: str, args: dict[str, object], position: float) -> Sample:
        return Sample(
            name=name,
            tool=tool,
            args=args,
            text="\n".join(self.lines) + "\n",
            marked=tuple(self.marks),
            position=position,
        )


def ident(rng: random.Random, parts: int = 2, sep: str = "_") -> str:
    """A varied identifier made of vocabulary words (`orders_cache`)."""
    return sep.join(rng.choice(WORDS) for _ in range(parts))


def path(rng: random.Random, ext: str, root: str = "src", depth: int = 2) -> str:
    """A varied source path (`src/net/orders_cache.rs`)."""
    dirs = "/".join(rng.choice(WORDS) for _ in range(depth - 1))
    return f"{root}/{dirs}/{ident(rng)}.{ext}" if dirs else f"{root}/{ident(rng)}.{ext}"


def progress_bar(rng: random.Random, label: str, steps: int = 12, width: int = 30) -> str:
    """A carriage-return progress bar: every state on one line, overwritten by the next."""
    states = []
    for i in range(steps + 1):
        done = int(width * i / steps)
        pct = int(100 * i / steps)
        states.append(
            f"{label} [{'=' * done}{'>' if done < width else ''}{' ' * (width - done)}] {pct:3d}%"
        )
    return "\r".join(states)

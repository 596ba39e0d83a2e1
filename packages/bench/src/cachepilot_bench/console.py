"""Terminal output of `cachepilot bench` and `cachepilot demo`: progress and result tables.

On a terminal, `rich` draws a live progress bar and a table. When the stream is not a terminal
(a pipe, a CI log, a file) progress is one plain line per finished item, so long runs still
show that they advance, and tables are the fixed-width text of `bench.report.format_table`,
stable for scripts.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, TextIO

__all__ = ["ProgressReporter", "bench_table", "is_terminal", "write_bench_table"]


def is_terminal(stream: TextIO) -> bool:
    """True when `stream` is an interactive terminal (as rich sees it)."""
    from rich.console import Console

    return Console(file=stream).is_terminal


class ProgressReporter:
    """`progress(done, total, label)` callbacks as a rich bar or as plain lines.

    Use as a context manager around the work. `terminal=None` asks the stream.
    """

    def __init__(self, stream: TextIO, *, what: str = "sessions", terminal: bool | None = None):
        self.stream = stream
        self.what = what
        self.terminal = is_terminal(stream) if terminal is None else terminal
        self.started = time.monotonic()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> ProgressReporter:
        self.started = time.monotonic()
        if self.terminal:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn(f"[bold]{self.what}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[label]}", style="dim"),
                console=Console(file=self.stream, force_terminal=True),
                transient=False,
            )
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __call__(self, done: int, total: int, label: str) -> None:
        """Report that `done` of `total` items are finished, the last one being `label`."""
        label = label if len(label) <= 60 else "…" + label[-59:]
        if self._progress is not None:
            if self._task is None:
                self._task = self._progress.add_task(self.what, total=total, label=label)
            self._progress.update(self._task, completed=done, total=total, label=label)
            return
        elapsed = time.monotonic() - self.started
        width = len(str(total))
        self.stream.write(f"[{done:>{width}}/{total}] {elapsed:6.1f}s {label}\n")
        self.stream.flush()


def bench_table(doc: dict[str, Any]) -> Any:
    """The strategies of a bench summary as a `rich.table.Table`."""
    from rich.table import Table

    table = Table(
        title=(
            f"provider {doc['provider']} · mode {doc['mode']} · {doc['traces']} traces · "
            f"{doc['sessions']} sessions · {doc['calls']} calls"
        ),
        header_style="bold",
    )
    table.add_column("strategy", no_wrap=True)
    for header in (
        "input $",
        "× van",
        "total $",
        "hit %",
        "peak ctx",
        "mean ctx",
        "breaks",
        "fid.vis",
        "fid.rec",
        "extra",
        "fetch",
        "ms/call",
    ):
        table.add_column(header, justify="right")
    for name, t in doc["strategies"].items():
        ratio = t.get("input_cost_ratio_to_vanilla")
        style = "bold red" if name == "cachepilot" else ("dim" if name == "vanilla" else None)
        table.add_row(
            name + (f"  ({len(t['errors'])} failed)" if t["errors"] else ""),
            f"{t['input_cost_usd']:.4f}",
            f"{ratio:.3f}" if ratio is not None else "-",
            f"{t['cost_usd']:.4f}",
            f"{t['hit_rate'] * 100:.1f}",
            f"{t['peak_context_tokens']:,}",
            f"{t['mean_context_tokens']:,}",
            str(t["prefix_breaks"]),
            f"{t['fidelity_visible']:.3f}",
            f"{t['fidelity_recoverable']:.3f}",
            str(t["extra_calls"]),
            str(t["recalls"] + t["refetches"]),
            f"{t['overhead_ms_per_call_p50']:.3f}",
            style=style,
        )
    if "wall_seconds" in doc:
        table.caption = f"wall time {doc['wall_seconds']:.1f} s"
    return table


def write_bench_table(doc: dict[str, Any], out: TextIO, *, terminal: bool | None = None) -> None:
    """A rich table on a terminal, else `bench.report.format_table`'s text."""
    if is_terminal(out) if terminal is None else terminal:
        from rich.console import Console

        console = Console(file=out, force_terminal=True)
        console.print(bench_table(doc))
        for name, t in doc["strategies"].items():
            if t["errors"]:
                console.print(
                    f"[red]! {name}: {len(t['errors'])} session(s) failed, first:[/]",
                    highlight=False,
                )
                console.print(t["errors"][0], markup=False, highlight=False)
        return
    from cachepilot_bench.report import format_table

    out.write(format_table(doc) + "\n")

"""The proxy's `/metrics`: totals in the Prometheus text exposition format.

Counters follow the OpenMetrics naming rules (`_total` suffix, base units in the name:
`_tokens`, `_usd`). Totals only by default; with per-thread detail on, each thread's counters
carry a `thread` label that is a salted digest of its name (`Secret.label`), never the name,
and at most `max_threads` threads are listed (the least recently active drop out; the totals
keep counting them). The worker processes of one server add their counts up in a shared file
(`cachepilot.proxy.shared_metrics`), so any worker's `/metrics` shows the totals of all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cachepilot.diagnose.metrics import CallMetrics
from cachepilot.proxy.shared_metrics import COLUMNS, SharedCounters
from cachepilot.support.log_labels import thread_label

__all__ = ["CONTENT_TYPE", "ProxyMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(slots=True)
class _Totals:
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    input_cost_usd: float = 0.0
    recalls: int = 0
    epochs: int = 0

    def add(self, call: CallMetrics) -> None:
        self.calls += 1
        self.prompt_tokens += call.prompt_tokens
        self.cached_tokens += call.cached_tokens
        self.cache_write_tokens += call.cache_write_tokens
        self.output_tokens += call.output_tokens
        self.cost_usd += call.cost_usd
        self.input_cost_usd += call.input_cost_usd
        self.recalls += call.recalls
        self.epochs += call.epoch is not None

    @classmethod
    def of(cls, values: list[float]) -> _Totals:
        """Totals from shared counters (in `COLUMNS` order)."""
        out = cls()
        for name, value in zip(COLUMNS, values, strict=True):
            kind = type(getattr(out, name))
            setattr(out, name, kind(value) if kind is float else round(value))
        return out


def _values(call: CallMetrics) -> list[float]:
    """One call's counts in `COLUMNS` order."""
    return [1, call.prompt_tokens, call.cached_tokens, call.cache_write_tokens,
            call.output_tokens, call.cost_usd, call.input_cost_usd, call.recalls,
            int(call.epoch is not None)]  # fmt: skip


# (name, type, help, value of a _Totals)
_FAMILIES: tuple[tuple[str, str, str, Callable[[_Totals], float]], ...] = (
    ("cachepilot_proxy_model_calls_total", "counter", "Upstream model calls with usage.",
     lambda t: t.calls),
    ("cachepilot_proxy_prompt_tokens_total", "counter",
     "Prompt tokens billed, cache reads and writes included.", lambda t: t.prompt_tokens),
    ("cachepilot_proxy_cached_prompt_tokens_total", "counter",
     "Prompt tokens read from the provider cache.", lambda t: t.cached_tokens),
    ("cachepilot_proxy_cache_write_tokens_total", "counter",
     "Prompt tokens written to the provider cache.", lambda t: t.cache_write_tokens),
    ("cachepilot_proxy_output_tokens_total", "counter", "Completion tokens.",
     lambda t: t.output_tokens),
    ("cachepilot_proxy_cost_usd_total", "counter",
     "Cost under the proxy's provider profile, in US dollars.", lambda t: t.cost_usd),
    ("cachepilot_proxy_input_cost_usd_total", "counter",
     "The prompt part of that cost, in US dollars.", lambda t: t.input_cost_usd),
    ("cachepilot_proxy_recalls_total", "counter",
     "Recall calls the proxy answered itself.", lambda t: t.recalls),
    ("cachepilot_proxy_maintenance_epochs_total", "counter",
     "Maintenance points (history rewrites the cost model paid for) in the requests sent.",
     lambda t: t.epochs),
)  # fmt: skip


def _value(number: float) -> str:
    return repr(float(number)) if isinstance(number, float) else str(number)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class ProxyMetrics:
    """Counters of one proxy process (thread-safe; bounded memory).

    Args:
        per_thread: keep per-thread counters for `/metrics` as well as the totals.
        max_threads: per-thread counters kept (least recently active dropped first).
        shared: the counters the server's worker processes share (None: this process's).
    """

    def __init__(
        self,
        *,
        per_thread: bool = False,
        max_threads: int = 4096,
        shared: SharedCounters | None = None,
    ) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be >= 1")
        self.per_thread = per_thread
        self.shared = shared
        self._max = max_threads
        self._totals = _Totals()
        self._threads: OrderedDict[str, _Totals] = OrderedDict()
        self._lock = threading.Lock()
        self.label: Callable[[str], str] = thread_label
        """The thread label kept in shared counters (the proxy sets its salted one)."""

    def record(self, call: CallMetrics) -> None:
        """Count one upstream call."""
        if self.shared is not None:
            tag = self.label(call.thread) if self.per_thread else None
            self.shared.add(_values(call), tag)
            return
        with self._lock:
            self._totals.add(call)
            if not self.per_thread:
                return
            found = self._threads.get(call.thread)
            if found is None:
                found = self._threads[call.thread] = _Totals()
                while len(self._threads) > self._max:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(call.thread)
            found.add(call)

    def render(self, *, provider: str, label: Callable[[str], str], threads_in_memory: int) -> str:
        """The exposition text (ends with a newline)."""
        if self.shared is not None:
            self.shared.set_threads_in_memory(threads_in_memory)
            values, rows = self.shared.totals(self._max)
            totals = _Totals.of(values)
            threads = [(tag, _Totals.of(v)) for tag, v in rows] if self.per_thread else []
            threads_in_memory = self.shared.threads_in_memory()
        else:
            with self._lock:
                totals = _Totals(**{k: getattr(self._totals, k) for k in _Totals.__slots__})
                threads = [
                    (label(name), _Totals(**{k: getattr(t, k) for k in _Totals.__slots__}))
                    for name, t in self._threads.items()
                ]
        base = f'provider="{_escape(provider)}"'
        lines: list[str] = []
        for name, kind, text, read in _FAMILIES:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            lines.append(f"{name}{{{base}}} {_value(read(totals))}")
            lines.extend(
                f'{name}{{{base},thread="{_escape(tag)}"}} {_value(read(t))}' for tag, t in threads
            )
        lines += _gauge(
            "cachepilot_proxy_threads_in_memory",
            "Threads whose state this process holds in memory.",
            [(base, threads_in_memory)],
        )
        return "\n".join(lines) + "\n"


def _gauge(name: str, text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    out = [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
    out.extend(f"{name}{{{labels}}} {_value(v)}" for labels, v in samples)
    return out

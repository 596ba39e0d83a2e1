"""Previews of the corpus side by side: the head/tail preview, the salient preview, and
Headroom (when it is installed), each judged by the share of marked lines it shows."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from cachepilot.reduce import ReduceConfig, default_pipeline, normalize_output
from cachepilot_bench.salient_corpus.doc import Sample
from cachepilot_bench.salient_corpus.metric import marked_in_view

__all__ = [
    "EXTRA_SIZES",
    "Row",
    "Viewer",
    "evaluate",
    "head_tail_viewer",
    "headroom_viewer",
    "salient_viewer",
]

logger = logging.getLogger(__name__)

EXTRA_SIZES: tuple[int, ...] = (0, 500, 1_000, 1_500, 3_000)
"""Characters added to today's preview (1,500 head + 1,000 tail) in the comparison."""

Viewer = Callable[[Sample], str]


@dataclass(frozen=True, slots=True)
class Row:
    """How one viewer did on the corpus."""

    viewer: str
    extra: int | None
    samples: int
    marked: int
    shown: int
    complete: int
    """Samples whose marked lines all show."""
    mean_chars: float
    max_chars: int

    @property
    def share(self) -> float:
        return self.shown / self.marked if self.marked else 1.0


def _pipeline_viewer(config: ReduceConfig) -> Viewer:
    pipeline = default_pipeline(config)

    def view(sample: Sample) -> str:
        return pipeline.run(sample.tool, sample.args, "call", normalize_output(sample.text)).text

    return view


def head_tail_viewer(extra: int) -> Viewer:
    """Today's preview (head and tail only), grown by `extra` characters (3/5 head)."""
    head = 1_500 + extra * 3 // 5
    return _pipeline_viewer(
        ReduceConfig(head_chars=head, tail_chars=1_000 + extra - extra * 3 // 5, salient_chars=0)
    )


def salient_viewer(extra: int) -> Viewer:
    """The salient preview with `extra` characters for the middle (default 1,500)."""
    return _pipeline_viewer(ReduceConfig(salient_chars=extra))


def headroom_viewer() -> Viewer | None:
    """Headroom's default pipeline (`HeadroomChatModel`) on each output as a tool result, or
    None when Headroom is not installed (`uv run --with 'headroom-ai[langchain]==0.42.0'`)."""
    if importlib.util.find_spec("headroom") is None:
        return None
    from headroom.integrations.langchain import HeadroomChatModel

    # The peer module sets Headroom's offline environment before Headroom is imported.
    from cachepilot_bench.peers.headroom import CaptureModel

    def view(sample: Sample) -> str:
        capture = CaptureModel(model_name="gpt-5.4-mini")
        model = HeadroomChatModel(capture)
        messages = [
            HumanMessage(content="Run it and fix what fails."),
            AIMessage(
                content="",
                tool_calls=[{"id": "call_1", "name": sample.tool, "args": dict(sample.args)}],
            ),
            ToolMessage(content=sample.text, tool_call_id="call_1", name=sample.tool),
        ]
        model.invoke(messages)
        sent = capture.requests[-1]
        content = sent[-1].content
        return content if isinstance(content, str) else str(content)

    return view


def evaluate(corpus: Sequence[Sample], viewers: dict[tuple[str, int | None], Viewer]) -> list[Row]:
    """Each viewer's row over `corpus`."""
    rows = []
    for (name, extra), viewer in viewers.items():
        marked = shown = complete = 0
        sizes = []
        for sample in corpus:
            view = viewer(sample)
            found = marked_in_view(view, sample)
            marked += len(found)
            shown += sum(found)
            complete += all(found)
            sizes.append(len(view))
        rows.append(
            Row(
                name,
                extra,
                len(corpus),
                marked,
                shown,
                complete,
                sum(sizes) / len(sizes),
                max(sizes),
            )
        )
    return rows

"""Salient previews on the generated corpus: which marked lines each preview keeps in view.

The corpus (`cachepilot_bench.salient_corpus`, seed 0, 3 outputs of each of 21 tools, 70-200
KB each) holds the outputs of builds, package managers, test runners, runtimes, servers,
clusters and a web page, with the line(s) an agent acts on marked. Each output goes through
cachepilot's reduction pipeline as a shell (or fetch) tool result; the view the model would
get is judged by the share of marked lines it shows. Compared at each preview size (today's
1,500 head + 1,000 tail, plus 0-3,000 characters):
- `head/tail`: today's preview, the extra split 3:2 between head and tail;
- `salient`: the salient preview with the extra as its middle budget (default 1,500);
- `headroom`: Headroom 0.42's default pipeline on the same tool result (one size: its own),
  when it is installed.

Run:
    uv run python benchmarks/salient_previews.py [--seed 0] [--variants 3]
    uv run --with 'headroom-ai[langchain]==0.42.0' python benchmarks/salient_previews.py
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import defaultdict

from cachepilot.reduce.preview import salient_preview
from cachepilot_bench.salient_corpus import build_corpus, marked_in_view
from cachepilot_bench.salient_corpus.evaluate import (
    EXTRA_SIZES,
    Viewer,
    evaluate,
    head_tail_viewer,
    headroom_viewer,
    salient_viewer,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    corpus = build_corpus(seed=args.seed, variants=args.variants)
    viewers: dict[tuple[str, int | None], Viewer] = {}
    for extra in EXTRA_SIZES:
        viewers["head/tail", extra] = head_tail_viewer(extra)
        viewers["salient", extra] = salient_viewer(extra)
    headroom = headroom_viewer()
    if headroom is not None:
        viewers["headroom", None] = headroom
    print(f"corpus: {len(corpus)} outputs of {len({s.name for s in corpus})} tools, "
          f"{sum(len(s.text) for s in corpus) / len(corpus) / 1000:.0f} KB mean, "
          f"{sum(len(s.marked) for s in corpus)} marked lines")  # fmt: skip
    print(f"{'preview':<10} {'extra':>6} {'marked shown':>13} {'share':>7} {'all shown':>10} "
          f"{'mean chars':>11} {'max chars':>10}")  # fmt: skip
    for row in evaluate(corpus, viewers):
        extra = "-" if row.extra is None else f"{row.extra:,}"
        print(
            f"{row.viewer:<10} {extra:>6} {row.shown:>6}/{row.marked:<6} {row.share:>7.1%} "
            f"{row.complete:>4}/{row.samples:<5} {row.mean_chars:>11,.0f} {row.max_chars:>10,}"
        )
    if headroom is None:
        print("headroom: not installed (run with --with 'headroom-ai[langchain]==0.42.0')")
    # Per tool at the default size.
    per_tool: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    chosen = {"head/tail": viewers["head/tail", 1_500], "salient": viewers["salient", 1_500]}
    if headroom is not None:
        chosen["headroom"] = headroom
    for sample in corpus:
        for name, viewer in chosen.items():
            found = marked_in_view(viewer(sample), sample)
            per_tool[sample.name][name][0] += sum(found)
            per_tool[sample.name][name][1] += len(found)
    print()
    print("per tool, marked lines shown at +1,500 characters:")
    print(f"{'tool':<18}" + "".join(f"{name:>12}" for name in chosen))
    for tool, counts in per_tool.items():
        print(f"{tool:<18}" + "".join(f"{counts[n][0]:>6}/{counts[n][1]:<5}" for n in chosen))
    started = time.perf_counter()
    for sample in corpus:
        salient_preview(sample.text, 1_500, 1_000, 1_500, "0" * 12, original_chars=len(sample.text))
    elapsed = time.perf_counter() - started
    megabytes = sum(len(s.text) for s in corpus) / 1e6
    print(f"\nsalient preview: {elapsed * 1000 / len(corpus):.1f} ms per output "
          f"({megabytes / elapsed:.1f} MB/s of output)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A corpus of large tool outputs with the lines an agent acts on marked, and the metric.

Generated, deterministic for a seed: the outputs of the tools coding agents run (build
systems, package managers, test runners of several languages, stack traces of several
runtimes, server, container and cluster logs, a web page), 70-200 KB each, lines that vary as
real ones do (paths, ids, durations), warnings, carriage-return progress bars, and the
line(s) an agent would act on placed anywhere, often near the middle. The marks are kept out
of the text (`Sample.marked`).

    corpus = build_corpus(seed=0)
    share = marked_share(view, sample)   # marked lines visible in a view of the output

`benchmarks/salient_previews.py` prints the share per preview size for the head/tail preview,
cachepilot's salient preview and Headroom (when installed).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from cachepilot_bench.salient_corpus import builds, runs
from cachepilot_bench.salient_corpus.doc import Sample
from cachepilot_bench.salient_corpus.metric import marked_in_view, marked_share, visible_line

__all__ = [
    "GENERATORS",
    "Sample",
    "build_corpus",
    "marked_in_view",
    "marked_share",
    "visible_line",
]

Generator = Callable[[random.Random, int, float], Sample]

GENERATORS: dict[str, Generator] = {
    "make": builds.make,
    "cargo": builds.cargo,
    "npm": builds.npm_install,
    "webpack": builds.webpack,
    "tsc": builds.tsc,
    "eslint": builds.eslint,
    "docker-build": builds.docker_build,
    "pip": builds.pip_install,
    "mvn": builds.mvn,
    "gradle": builds.gradle,
    "pytest": runs.pytest_run,
    "go-test": runs.go_test,
    "jest": runs.jest,
    "python-traceback": runs.python_traceback,
    "rust-panic": runs.rust_panic,
    "node-stack": runs.node_stack,
    "java-server": runs.java_server,
    "kubectl-logs": runs.kubectl_logs,
    "kubectl-describe": runs.kubectl_describe,
    "journalctl": runs.journalctl,
    "html-page": runs.html_page,
}
"""Every tool the corpus covers, by name."""

MIN_CHARS = 70_000
MAX_CHARS = 200_000


def build_corpus(seed: int = 0, variants: int = 3) -> list[Sample]:
    """`variants` outputs of every tool in `GENERATORS`, deterministic for `seed`.

    The first variant of each tool has its key lines near the middle (40-60 % of the
    output); the others anywhere between 5 and 95 %. Sizes are drawn from 70-200 KB.
    """
    out: list[Sample] = []
    for name, generate in GENERATORS.items():
        for variant in range(variants):
            rng = random.Random(f"salient-corpus:{seed}:{name}:{variant}")
            share = rng.uniform(0.4, 0.6) if variant == 0 else rng.uniform(0.05, 0.95)
            target = rng.randint(MIN_CHARS, MAX_CHARS - 20_000)
            out.append(generate(rng, target, share))
    return out
